"""`RunHandle`: a run going on in a background task, and consuming a run's events.

Owns `RunHandle` (what `Agent.start` returns: ``await`` it, or `cancel()` it from any thread),
`RunBox` (how a handle sees the run state its event generator made) and `consume`. Imports
events, result, the run state and `_settle` (each handle's task is counted until it is done).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from .._settle import track
from ..events import Event, RunEndedEvent
from ..result import RunResult
from .state import RunState

__all__ = ["EventCallback", "RunBox", "RunHandle", "consume"]

EventCallback = Callable[[Event], Any]


async def consume(events: AsyncIterator[Event], run: RunState) -> RunResult:
    # Iterate to the end (RunEndedEvent is the last event) so the generator finishes here, rather
    # than later in an asyncgen-finalizer task (a task and a self-pipe write per run).
    ended = None
    async for event in events:
        if type(event) is RunEndedEvent:  # (no subclasses; a check per event)
            ended = event.result
    if ended is not None:
        return ended
    assert run.outcome.result is not None
    return run.outcome.result


class RunBox:
    """Lets a `RunHandle` see the run state its event generator created."""

    __slots__ = ("run",)

    def __init__(self) -> None:
        self.run: RunState | None = None


class RunHandle:
    """A run going on in a background task (see `Agent.start`).

    ``await handle`` gives the `RunResult`; `cancel()` stops the run, leaves the conversation
    valid, and the result has ``status="cancelled"``. `on_event` gets every event, including a
    final ``run-cancelled`` one.
    """

    def __init__(self, events: AsyncIterator[Event], on_event: EventCallback | None = None,
                 box: RunBox | None = None) -> None:
        self._events = events
        self._on_event = on_event
        self._box = box or RunBox()
        self._cancel_requested = False
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[RunResult | None] = asyncio.ensure_future(self._main())
        track(self.task)  # the notebook's last cell can wait for it (nbagent.notebook.settle)

    def _emit(self, event: Event) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # a view's bug must not kill the run
            import traceback

            traceback.print_exc()

    async def _main(self) -> RunResult | None:
        try:
            async for event in self._events:
                self._emit(event)
                if isinstance(event, RunEndedEvent):
                    self.result = event.result
        except asyncio.CancelledError:
            if not self._cancel_requested:
                raise
            uncancel = getattr(asyncio.current_task(), "uncancel", None)
            if uncancel is not None:
                uncancel()
            run = self._box.run
            if run is not None and run.outcome.result is not None:
                self.result = run.outcome.result
                self._emit(RunEndedEvent("run-cancelled", run.outcome.result, run.path))
        except Exception as exc:  # e.g. PendingCallsError before the run started
            self.error = exc
            raise
        return self.result

    @property
    def done(self) -> bool:
        return self.task.done()

    def cancel(self) -> None:
        """Stop the run; safe to call from any thread (e.g. a button handler)."""
        self._cancel_requested = True
        loop = self.task.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.task.cancel()
        else:
            loop.call_soon_threadsafe(self.task.cancel)

    async def wait(self) -> RunResult | None:
        return await self.task

    def __await__(self) -> Any:
        return self.task.__await__()
