"""The one place an edge module plugs into every run: `run_hook` (None unless one is set).

Owns the hook's shape. `loop.drive` hands each run to the hook when one is set (with nothing set,
the cost is one module-attribute read per run); `nbagent.tracing.instrument()` sets it. The hook
may give the run another `RunConfig` (e.g. its model wrapped), wrap the run's event stream, and
set the run's per-call hook `RunWork.wrap_tool`. The core never learns what the hook does: it
imports no OpenTelemetry. Imports config, state and events only.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

from ..events import Event
from .config import RunConfig
from .state import RunState

__all__ = ["RunHook", "run_hook", "set_run_hook"]

RunHook = Callable[[RunConfig, RunState, Callable[[RunConfig], AsyncGenerator[Event, None]]],
                   AsyncGenerator[Event, None]]
"""``hook(config, run, start)`` returns the run's events: it calls ``start(config)`` (the loop's
own event generator for that config) and yields what it yields, in order, to the end."""

run_hook: RunHook | None = None


def set_run_hook(hook: RunHook | None) -> None:
    """Set (or, with None, remove) the hook every run started from now on goes through."""
    global run_hook
    run_hook = hook
