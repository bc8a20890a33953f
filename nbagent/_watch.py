"""Who follows a thread in this process: per-thread observers, told what happens to the thread.

Owns `watch` (subscribe a callback to a thread; it returns the function that unsubscribes),
`publish` (tell a thread's observers) and the two notices that are not run events:
`ToolOutcomeNotice` (a blocking tool that outlived its stopped run has ended) and
`ThreadChangedNotice` (a run ended without its final event, e.g. the store failed: read the
thread again).

Who publishes, and what:

- the run loop (`_loop`) publishes every event of every run on the thread except the text and
  reasoning deltas, from ``run-started`` (which carries the prompt) to the run's end, a
  cancelled run included (``run-cancelled``, which a `RunHandle` otherwise makes itself);
- the recorder of late outcomes (`_loop`) publishes `ToolOutcomeNotice`;
- `Threads.revoke` publishes `ThreadChangedNotice` when it took back an "always allow".

So a view (`nbagent.widgets`) that watches its thread follows a resume from code
(``agent.resume``, ``resume_sync``, ``agent.start``) or from another view of the same kernel.
Only this process: a change made by another process is not seen here (the view reads the store
again when a click finds the thread moved on).

Threading: `publish` runs on the thread of the run's loop (the kernel's loop, or the private loop
of ``run_sync``); an observer must hand its work to its own loop and return (a view's
``schedule``). An observer's error is printed, never raised into the run. An observer that is a
bound method is held weakly: a view that is gone stops listening by itself.

Cost: a run publishes a few events per step (never per delta); with nobody watching, one dict
lookup each.

Imports only the standard library: events come in as objects, notices carry plain values.
"""

from __future__ import annotations

import inspect
import threading
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Observer", "ThreadChangedNotice", "ToolOutcomeNotice", "publish", "watch", "watched"]

Observer = Callable[[str | None, Any], None]
"""``observer(run_id, item)``: `item` is a run's event (``item.kind``), or a notice below;
`run_id` is the run it comes from (None when no run is going on)."""


@dataclass(frozen=True, slots=True)
class ToolOutcomeNotice:
    """A blocking (sync) tool call that was still running when its run was stopped has ended.

    The conversation already says its outcome is not known (it is append-only); the ledger now
    records ``finished`` or ``failed``, and this notice carries what the function returned.
    """

    thread: str
    call_id: str
    tool: str
    status: Literal["done", "failed"]
    content: str
    """What the tool returned, as the model would have seen it; or its error."""
    duration_s: float | None = None
    """From the call's start to its end."""
    kind: Literal["tool-outcome"] = "tool-outcome"


@dataclass(frozen=True, slots=True)
class ThreadChangedNotice:
    """The thread changed without a run event (a run ended without its final event, or an
    "always allow" was revoked): read it again."""

    thread: str
    kind: Literal["thread-changed"] = "thread-changed"


_lock = threading.Lock()
_observers: dict[str, tuple[Callable[[], Observer | None], ...]] = {}


def _ref(observer: Observer) -> Callable[[], Observer | None]:
    if inspect.ismethod(observer):
        return weakref.WeakMethod(observer)
    return lambda: observer


def watch(thread: str, observer: Observer) -> Callable[[], None]:
    """Call ``observer(run_id, item)`` for what happens to `thread` in this process from now on;
    returns the function that stops it (calling it twice is harmless)."""
    ref = _ref(observer)
    with _lock:
        _observers[thread] = (*_observers.get(thread, ()), ref)

    def unwatch() -> None:
        with _lock:
            refs = tuple(r for r in _observers.get(thread, ()) if r is not ref)
            if refs:
                _observers[thread] = refs
            else:
                _observers.pop(thread, None)

    return unwatch


def watched(thread: str) -> bool:
    """Whether anything watches `thread` now."""
    return thread in _observers


def publish(thread: str, run_id: str | None, item: Any) -> None:
    """Tell `thread`'s observers about `item` (an event or a notice), in the order they came."""
    refs = _observers.get(thread)
    if not refs:
        return
    gone = False
    for ref in refs:
        observer = ref()
        if observer is None:
            gone = True
            continue
        try:
            observer(run_id, item)
        except Exception:  # a view's bug must not break the run that tells it
            traceback.print_exc()
    if gone:
        with _lock:
            alive = tuple(r for r in _observers.get(thread, ()) if r() is not None)
            if alive:
                _observers[thread] = alive
            else:
                _observers.pop(thread, None)
