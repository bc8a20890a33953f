"""Parallel input guards (``Guard.input(check, parallel=True)``): they race the run's first model
call instead of going before it.

Owns `Race` (one run's race: started with the first model call, or with the first write before
it; the model's stream or request cancelled the moment a guard blocks) and `RaceTripped`. The
prompt is held in memory meanwhile (`RunWork.unsaved`): it is written only once the guards have
spoken, marked blocked if they blocked it, so the store never holds a prompt they refused
unmarked, and no tool of the raced answer runs before they allow it (`guarding.RunGuards`
settles the race before the answer is committed). Imports asyncio, the guards and `guardset`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..guards import Guard, GuardCheck, GuardContext
from ..messages import UserMessage
from ..usage import ModelCallUsage
from .guardset import Stop, blocked_text, chain

if TYPE_CHECKING:
    from .state import RunState

__all__ = ["Race", "RaceTripped"]


class RaceTripped(Exception):
    """Raised into the first model call when a parallel input guard blocks the prompt: the call is
    cancelled (`started`: whether the model had been asked at all)."""

    def __init__(self, started: bool) -> None:
        super().__init__("a parallel input guard blocked the prompt")
        self.started = started


class Race:
    """The parallel input guards of one run and the prompt they check."""

    def __init__(self, guards: tuple[Guard, ...], run: RunState, prompt: UserMessage,
                 keep: Callable[[list[ModelCallUsage], int], None]) -> None:
        self.guards = guards
        self.run = run
        self.prompt: UserMessage | None = prompt
        """None once the guards have spoken (or the run stopped)."""
        self.keep = keep
        """Where a judge's usage rows go (`RunGuards.keep`)."""
        self.task: asyncio.Task[GuardCheck | None] | None = None

    @property
    def open(self) -> bool:
        """The guards have not spoken yet."""
        return self.prompt is not None

    def started(self) -> asyncio.Task[GuardCheck | None] | None:
        """The race's task, started on first need (the first model call, or a write before it);
        None once it is settled."""
        if self.task is None and self.prompt is not None:
            run = self.run
            ctx = GuardContext("input", run.run_id, run.stored.id, run.stored.step + 1, (), run.stored.state)
            self.task = asyncio.ensure_future(self._race(self.prompt, ctx))
        return self.task

    async def _race(self, prompt: UserMessage, ctx: GuardContext) -> GuardCheck | None:
        """The parallel guards, together: the first check that does not allow (a rewrite counts
        as a block: the model already has the prompt), or None when all allow."""
        async def one(g: Guard) -> Stop | None:  # no `fits`: a rewrite stops it, as a block would
            rows: list[ModelCallUsage] = []
            _, stop = await chain((g,), prompt.content, ctx, (ctx.step, None, None), self.run.guard_checks, rows)
            self.keep(rows, ctx.step)
            return stop

        tasks = [asyncio.ensure_future(one(g)) for g in self.guards]
        try:
            for done in asyncio.as_completed(tasks):
                stop = await done
                if stop is not None:
                    if stop.verdict.action == "rewrite":
                        stop.check.verdict, stop.check.reason = "block", (
                            "a parallel guard cannot rewrite: the model already has the prompt; give it "
                            "parallel=False (blocked)")
                    return stop.check
            return None
        finally:
            for t in tasks:
                t.cancel()

    async def settle(self) -> GuardCheck | None:
        """Wait for the guards' word on the prompt (once): the check that blocked it (it is then
        marked blocked, before its write), or None."""
        race = self.started()
        if race is None:
            return None
        check = await race
        self.prompt = self.task = None
        if check is not None:
            self._block_prompt(check)
        return check

    async def blocks(self) -> bool:
        """Whether the parallel input guards block the prompt, waiting for them if they race (the
        next model call, which sees the race ended, then stops at once)."""
        race = self.started()
        if race is None:
            return False
        await asyncio.wait((race,))
        return race.result() is not None

    def _block_prompt(self, check: GuardCheck) -> None:
        for m in self.run.work.unsaved:
            if isinstance(m, UserMessage):
                m.blocked = blocked_text(check)  # not written yet: the store only ever sees it blocked

    def abandon(self) -> None:
        """The run is stopped before the parallel input guards spoke: the prompt was never
        cleared, so it is kept blocked (fail closed)."""
        if self.prompt is None:
            return
        if self.task is not None:
            self.task.cancel()
        names = ", ".join(repr(g.name) for g in self.guards)
        self._block_prompt(GuardCheck(names, "input", "block", "not checked: the run was stopped first"))
        self.prompt = self.task = None

    async def stream(self, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The first model call's stream, cancelled as soon as a guard blocks (`RaceTripped`)."""
        race = self.started()
        if race is None:
            async for item in items:
                yield item
            return
        if race.done() and race.result() is not None:
            raise RaceTripped(False)
        source = items.__aiter__()
        step: asyncio.Future[Any] | None = None
        try:
            while not race.done():
                step = asyncio.ensure_future(source.__anext__())
                await asyncio.wait((step, race), return_when=asyncio.FIRST_COMPLETED)
                if not step.done() and race.result() is not None:
                    raise RaceTripped(True)
                try:
                    item = await step
                except StopAsyncIteration:
                    return
                step = None
                yield item
            if race.result() is not None:
                raise RaceTripped(True)
            async for item in source:
                yield item
        finally:
            if step is not None and not step.done():  # the model's read goes on in its own task: stop it first
                step.cancel()
                await asyncio.gather(step, return_exceptions=True)
            close = getattr(source, "aclose", None)
            if close is not None:
                await close()

    async def call(self, call: Awaitable[Any]) -> Any:
        """The first model call (not streamed), cancelled as soon as a guard blocks (`RaceTripped`)."""
        race = self.started()
        if race is None:
            return await call
        if race.done() and race.result() is not None:
            close = getattr(call, "close", None)
            if close is not None:
                close()
            raise RaceTripped(False)
        task = asyncio.ensure_future(call)
        try:
            await asyncio.wait((task, race), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if not task.done() and race.result() is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise RaceTripped(True)
        return await task
