"""`Usage.add` and `Usage.snapshot`: the run's sums, written out field by field (issue #46)."""

from __future__ import annotations

import dataclasses

from nbagent.usage import ModelCallUsage, Usage


def row(step: int, cost: float | None) -> ModelCallUsage:
    return ModelCallUsage("run_1", "t", step, 0.0, "openai", "m", input_tokens=10 * step, cache_read_tokens=step,
                          cache_write_tokens=2 * step, output_tokens=3 * step, reasoning_tokens=step + 1,
                          latency_s=0.1, finish_reason="stop", tool_calls=step, cost_total=cost)


def test_add_sums_every_counted_column_and_the_known_costs() -> None:
    rows = [row(1, 0.5), row(2, None), row(3, 0.25)]
    usage = Usage.of(rows)
    assert (usage.requests, usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
            usage.output_tokens, usage.reasoning_tokens, usage.tool_calls) == (3, 60, 6, 12, 18, 9, 6)
    assert usage.cost_total == 0.75 and usage.calls == rows
    assert Usage.of([row(1, None)]).cost_total is None


def test_a_snapshot_copies_every_field_and_keeps_its_own_list_of_calls() -> None:
    usage = Usage.of([row(1, 0.5), row(2, 0.25)])
    snap = usage.snapshot()
    # Every field, so a field added to Usage later must be added to `snapshot` too.
    assert snap == dataclasses.replace(usage, calls=list(usage.calls))
    assert all(getattr(snap, f.name) == getattr(usage, f.name) for f in dataclasses.fields(Usage))
    usage.add(row(3, 1.0))
    assert snap.requests == 2 and len(snap.calls) == 2 and snap.cost_total == 0.75
