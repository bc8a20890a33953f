"""Cutting a tool result to fit the model's context window, with nothing lost.

The model reads the head and the tail of a long result with a marker between them that says how
much was left out and how to read it (the built-in ``read_result`` tool); the whole text stays in
the store (`ToolResultMessage.full_content`). Imports nothing from nbagent.
"""

from __future__ import annotations

__all__ = ["HEAD_SHARE", "cut_result"]

HEAD_SHARE = 0.7
"""The share of the kept characters taken from the start of the result (the rest from its end)."""


def cut_result(text: str, limit: int, call_id: str) -> str | None:
    """`text` cut to about `limit` characters as head + marker + tail; None when it fits."""
    if len(text) <= limit:
        return None
    limit = max(limit, 200)
    head = int(limit * HEAD_SHARE)
    tail = limit - head
    left_out = len(text) - head - tail
    marker = (
        f"\n\n[… {left_out:,} of {len(text):,} characters not shown (characters {head:,} to "
        f"{head + left_out:,}). The whole result is kept: call read_result(call_id=\"{call_id}\", "
        f"offset={head}, limit={min(left_out, limit)}) to read them.]\n\n"
    )
    return text[:head] + marker + text[len(text) - tail:]
