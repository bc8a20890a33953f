"""Assertions shared by the core tests."""

from __future__ import annotations

from typing import Any


def shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    """A compact, comparable form of a history (call ids left out)."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if m.kind == "assistant":
            out.append(("assistant", m.text, [(c.name, c.args) for c in m.tool_calls]))
        elif m.kind == "tool-result":
            out.append(("tool-result", m.name, m.content, m.is_error))
        else:
            out.append((m.kind, m.content))
    return out


def assert_valid_history(messages: list[Any]) -> None:
    """Every tool call has exactly one result, after its answer and before the next message of
    another kind (what an OpenAI-compatible server requires of the next request)."""
    open_ids: list[str] = []
    for m in messages:
        if m.kind == "tool-result":
            assert m.call_id in open_ids, f"result for unknown or answered call {m.call_id}"
            open_ids.remove(m.call_id)
            continue
        assert not open_ids, f"tool calls without results: {open_ids}"
        if m.kind == "assistant":
            open_ids = [c.id for c in m.tool_calls]
    assert not open_ids, f"tool calls without results: {open_ids}"
