"""Cutting a tool result to fit the model's context window, with nothing lost.

The model reads the head and the tail of a long result with a marker between them that says how
much was left out and how to read it (the built-in ``read_result`` tool); the whole text stays in
the store (`ToolResultMessage.full_content`). Imports nothing from nbagent.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["HEAD_SHARE", "chars_for", "cut_result"]

HEAD_SHARE = 0.7
"""The share of the kept characters taken from the start of the result (the rest from its end)."""
SAMPLE_CHARS = 20_000
"""How much of a result `chars_for` counts to know how dense it is."""


def chars_for(text: str, tokens: int, count: Callable[[str], int]) -> int:
    """How many characters of `text` hold about `tokens` tokens as `count` counts them: a dense
    text (numbers, a tokenizer that splits them) gets fewer characters than prose. The density
    is measured on the first `SAMPLE_CHARS` characters."""
    sample = text[:SAMPLE_CHARS]
    counted = count(sample)
    if counted <= 0:
        return max(1, tokens)
    return max(1, int(tokens * len(sample) / counted))


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
