"""Which span each usage row of this process came from, for the usage frame's trace columns.

Owns a bounded in-process map (run id, step, purpose) -> the (trace id, span id) of each of that
step's ``chat`` spans in order, written by the spans (`_spans`) and read by `nbagent.usage_frame`
(`trace_ids`). The store does not keep these ids: a frame read in another process has the
columns empty. Imports nothing from nbagent; no OpenTelemetry.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_ROWS", "remember", "trace_ids"]

MAX_ROWS = 200_000
"""Steps remembered; the oldest are forgotten first."""

_ids: dict[tuple[str, int, str], list[tuple[str, str]]] = {}


def remember(row: Any, trace_id: int, span_id: int) -> None:
    """Remember the ``chat`` span a usage row (`ModelCallUsage`) came from."""
    key = (str(row.run_id), int(row.step), str(row.purpose or "run"))
    if key not in _ids and len(_ids) >= MAX_ROWS:
        try:
            del _ids[next(iter(_ids))]
        except (KeyError, RuntimeError, StopIteration):  # another thread's run forgot it first
            pass
    _ids.setdefault(key, []).append((format(trace_id, "032x"), format(span_id, "016x")))


def trace_ids(run_id: Any, step: Any, purpose: Any, nth: int = 0) -> tuple[str, str] | None:
    """The (trace id, span id) of the `nth` usage row of a run's step with that purpose (32
    and 16 hex digits), or None when this process did not trace it."""
    try:
        found = _ids.get((str(run_id), int(step), str(purpose or "run")))
    except (TypeError, ValueError):
        return None
    return found[nth] if found is not None and nth < len(found) else None
