"""The rounds of ``agent.map(..., batch_api=True)``: the rows' model requests, gathered into
provider batches, one round per agent step.

Each row runs as its own task with the batched model (`nbagent.models._batch.BatchedModel`); its
model call hands the request to `Rounds.ask` and waits (the row is *parked*). When every row still
running is parked (the others have run their tools, paused for a person or ended), the round
starts: the parked requests whose custom id the store's record already holds re-attach to that
batch (a map run again after a restart), the others are written to the record and submitted as
one batch (several when one would pass the provider's limits), then written again with the
batch's id. The batches are polled (``asyncio.sleep`` between polls: the kernel stays free, and
its Interrupt stops the wait) until they end; each request's outcome goes back to its row, whose
run takes the answer as its step (the usual commit, ledger and usage row), runs its tools and
parks again for the next round, or ends.

A custom id is the row's thread (hashed) and step: the same row reaching the same step after a
restart asks with the same custom id, which is how a batch is found again. Answers are taken
once: a row's custom id leaves the record once the row moved on.

With ``wait=False`` each round's batches are looked at once: what ended is taken (and the rows
go on, maybe into a next round), what did not is left running; its rows are stopped (their runs
end ``cancelled``, nothing lost) and reported ``submitted`` (a batch this call made) or
``in_progress``. Owns `Rounds` and `ROW` (the context variable naming the row that asks). The
record is `_batch_record`'s; the map and its frame `_batch_api`'s.

Imports the models' `_batch` shapes, the core's exceptions and the record; tqdm when a bar shows.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import BatchExpiredError, ModelError, UserError
from ..models._batch import BatchResult, BatchState, BatchWire
from ..models.base import ModelRequest, ModelResponse
from ._batch_record import BatchRecord, Entry
from ._rows import progress_bar

__all__ = ["ROW", "Rounds", "custom_id"]

ROW: contextvars.ContextVar[str] = contextvars.ContextVar("nbagent_batch_row")
"""The thread of the row whose task is running (set by the map for each row's task)."""

MAX_INTERVAL = 4.0
"""The poll interval grows (x1.25 per poll that saw no progress) up to this many times ``poll_s``."""


def custom_id(thread: str, step: int) -> str:
    """The custom id of a row's request at `step`: ``<20 hex digits of the thread's hash>-<step>``
    (the characters and length both APIs take)."""
    return f"{hashlib.sha256(thread.encode()).hexdigest()[:20]}-{step}"


@dataclass(slots=True, eq=False)
class Seat:
    """One parked request: the row's line, waiting for its batch's outcome."""

    custom_id: str
    thread: str
    line: bytes
    future: asyncio.Future[BatchResult]


@dataclass(slots=True, eq=False)
class _Group:
    """The seats of one round waiting on one batch (a record entry)."""

    entry: Entry
    seats: list[Seat] = field(default_factory=list)
    state: BatchState | None = None


class Rounds:
    """The rounds of one map (see the module docstring); the `BatchRounds` its model asks.

    Args:
        record: the map's record in the store.
        wait: poll until each round's batches end (False: look once and return).
        poll_s: seconds between polls (growing up to `MAX_INTERVAL` times it while nothing moves).
        progress: show a bar per round.
        desc: the bars' label.
    """

    def __init__(self, record: BatchRecord, *, wait: bool, poll_s: float, progress: bool, desc: str | None) -> None:
        self.record = record
        self.wait = wait
        self.poll_s = poll_s
        self.progress = progress
        self.desc = desc or "batch API"
        self.wire: BatchWire | None = None
        self.parked: dict[str, Seat] = {}
        self.running = 0
        self.quiet = asyncio.Event()
        self.round = 0
        self.status: dict[str, str] = {}
        """thread -> where its request stands when the map returns: ``submitted`` /
        ``in_progress`` (still in a batch), ``expired`` / ``cancelled`` (its batch ended without
        running it)."""
        self.batches: list[str] = []
        """The ids of the batches this map submitted, in order."""
        self._taken: list[str] = []
        self._looked: dict[str, BatchState] = {}

    # ------------------------------------------------------------------ what the model asks
    def join(self, wire: BatchWire) -> None:
        if self.wire is not None and self.wire is not wire:
            raise UserError("agent.map(..., batch_api=True) sends one model's requests: the agent's model holds "
                            "two models with a batch API")
        self.wire = wire

    async def ask(self, wire: BatchWire, request: ModelRequest) -> ModelResponse:
        """Park the asking row's request until its batch ends; its answer, or its error raised."""
        thread = ROW.get(None)
        if thread is None:
            raise UserError("a batched model answers inside agent.map(..., batch_api=True) only")
        cid = custom_id(thread, request.step)
        seat = Seat(cid, thread, wire.line(cid, request), asyncio.get_running_loop().create_future())
        self.parked[cid] = seat
        self._moved(-1)
        try:
            result = await seat.future
        except asyncio.CancelledError:
            if not seat.future.done():
                self.parked.pop(cid, None)
                self._moved(+1)  # the row's task ends now: it counts as running until it does
            raise
        if result.response is not None:
            return result.response
        assert result.error is not None
        raise result.error

    def _moved(self, change: int) -> None:
        self.running += change
        if self.running <= 0:
            self.quiet.set()

    # ------------------------------------------------------------------ the rows
    async def run(self, jobs: list[tuple[str, Callable[[], Awaitable[Any]]]]) -> list[Any]:
        """Run each ``(thread, job)`` as a task (the job sees its thread in `ROW`) and drive the
        rounds until every row ended, or (``wait=False``) until nothing more ended; returns each
        job's result, or the `asyncio.CancelledError` of a row stopped while its batch runs."""
        tasks = [asyncio.create_task(self._row(thread, job)) for thread, job in jobs]
        self._moved(len(tasks))
        if not tasks:
            return []
        ended = False
        try:
            await self._drive()
            ended = True
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()  # wait=False, an Interrupt or a failure: the runs end "cancelled"
            await asyncio.wait(tasks)
            if not ended:  # a row stopped right after its handover may not have stored its answer:
                self._taken.clear()  # its batch stays in the record, to be read again
            await asyncio.shield(self._save())
        return [_outcome(task) for task in tasks]

    async def _row(self, thread: str, job: Callable[[], Awaitable[Any]]) -> Any:
        ROW.set(thread)
        try:
            return await job()
        finally:
            self._moved(-1)

    async def _save(self) -> None:
        self.record.forget(self._taken)
        self._taken.clear()
        await self.record.save()

    async def _drive(self) -> None:
        while True:
            while self.running > 0:  # (a row that ended between two handovers made it 0 for a moment)
                self.quiet.clear()
                await self.quiet.wait()
            if not self.parked:
                return
            self.record.forget(self._taken)  # their rows took the answers (all rows are quiet)
            self._taken.clear()
            seats, self.parked = self.parked, {}
            self.round += 1
            groups = await self._place(seats)
            if not await self._settle(groups):
                return

    # ------------------------------------------------------------------ a round
    async def _place(self, seats: dict[str, Seat]) -> list[_Group]:
        """The round's seats by batch: re-attached to the record's batches, the rest submitted."""
        assert self.wire is not None
        groups: dict[str, _Group] = {}
        new: list[Seat] = []
        for seat in seats.values():
            entry = self.record.entry_of(seat.custom_id)
            if entry is None or entry.api != self.wire.api:
                new.append(seat)
            else:
                groups.setdefault(entry.label, _Group(entry)).seats.append(seat)
        for label, group in list(groups.items()):
            if group.entry.id is None and not await self._found(group):
                del groups[label]
                new.extend(group.seats)
        for part in self._parts(new):
            made = await self._submit(part)
            if made is not None:
                groups[made.entry.label] = made
        for group in groups.values():
            mine = group.entry.id in self.batches  # submitted by this call, else by an earlier one
            for seat in group.seats:
                self.status[seat.thread] = "submitted" if mine else "in_progress"
                seat.line = b""  # sent (now or before): the round keeps no request bodies while it waits
        return list(groups.values())

    async def _found(self, group: _Group) -> bool:
        """Whether the batch of an entry written without its id (a crash right after submitting)
        is found at the provider; if not, the entry goes and its rows are submitted again."""
        assert self.wire is not None
        entry = group.entry
        state = await self.wire.find(entry.label, entry.created, len(entry.rows))
        if state is None:
            self.record.drop(entry)
            return False
        entry.id = state.id
        self.record.dirty = True
        await self.record.save()
        return True

    def _parts(self, seats: list[Seat]) -> list[list[Seat]]:
        """`seats` cut into batches within the provider's request and byte limits."""
        assert self.wire is not None
        parts: list[list[Seat]] = []
        size = 0
        for seat in seats:
            if not parts or len(parts[-1]) >= self.wire.max_requests or size + len(seat.line) > self.wire.max_bytes:
                parts.append([])
                size = 0
            parts[-1].append(seat)
            size += len(seat.line) + 1
        return parts

    async def _submit(self, seats: list[Seat]) -> _Group | None:
        """One batch of `seats`: in the record first, then submitted, then its id in the record."""
        assert self.wire is not None
        entry = self.record.add(self.wire.api, {s.custom_id: s.thread for s in seats})
        await self.record.save()
        try:
            state = await self.wire.submit([s.line for s in seats], entry.label)
        except (ModelError, UserError) as exc:
            refused = _refused(exc)
            self.record.drop(entry)
            await self.record.save()
            self._give(seats, lambda seat: BatchResult(seat.custom_id, "errored", error=refused))
            return None
        entry.id = state.id
        self.record.dirty = True
        await self.record.save()
        self.batches.append(state.id)
        return _Group(entry, seats, state)

    async def _settle(self, groups: list[_Group]) -> bool:
        """Wait for the round's batches (or look once) and hand their outcomes to the rows.
        Returns whether any row went on (else the map returns: ``wait=False``, nothing ended)."""
        bar = _RoundBar(self, sum(len(g.seats) for g in groups))
        try:
            waiting = await self._poll(groups, bar)
        finally:
            bar.close()
        ended = [g for g in groups if g not in waiting]
        for group in waiting:
            self.parked.update((s.custom_id, s) for s in group.seats)  # left for a later call
        handed = [await self._outcomes(group) for group in ended]  # every download first ...
        for give in handed:
            give()  # ... then the rows go on, all at once
        moved = bool(ended)
        # wait=False: what ended went on (its rows park again, beside the rest, for the next
        # look); when nothing ended, the map returns.
        return moved or not waiting

    async def _poll(self, groups: list[_Group], bar: _RoundBar) -> list[_Group]:
        """Poll until every group's batch ended; the groups still running (``wait=False`` only)."""
        assert self.wire is not None
        interval = self.poll_s
        while True:
            before = [g.state.counts if g.state else None for g in groups]
            for group in groups:
                if group.state is not None and group.state.ended:
                    continue
                group.state = await self._look(group)
            bar.show(groups)
            running = [g for g in groups if g.state is None or not g.state.ended]
            if not running or not self.wait:
                return running
            moved = before != [g.state.counts if g.state else None for g in groups]
            interval = self.poll_s if moved else min(interval * 1.25, self.poll_s * MAX_INTERVAL)
            await asyncio.sleep(interval)

    async def _look(self, group: _Group) -> BatchState | None:
        """One retrieve of the group's batch (None: it failed in a way worth trying again later)."""
        assert self.wire is not None and group.entry.id is not None
        batch_id = group.entry.id
        if not self.wait and batch_id in self._looked:  # wait=False: each batch once per call
            return self._looked[batch_id]
        try:
            state = await self.wire.retrieve(batch_id)
        except ModelError as exc:
            if exc.retryable:
                return group.state  # polled again later (a 429, a 5xx, a lost connection)
            # The provider does not know the batch (deleted, another account): its rows fail,
            # and leave the record, so the map run again submits them anew.
            state = BatchState(batch_id, "unknown", True, failure=f"retrieving batch {batch_id} failed: {exc}")
        self._looked[batch_id] = state
        return state

    async def _outcomes(self, group: _Group) -> Callable[[], None]:
        """Read the ended batch's results; returns what hands each seat its outcome (the first
        line of its custom id)."""
        assert self.wire is not None and group.state is not None
        state, wire = group.state, self.wire
        results: dict[str, BatchResult] = {}
        if state.failure is None:
            try:
                for result in await self._results(state):
                    results.setdefault(result.custom_id, result)
            except ModelError as exc:
                # The answers may be paid for: the rows fail now, and the record keeps the batch
                # so that the map run again reads its results.
                error = exc
                return lambda: self._give(group.seats, lambda seat: BatchResult(seat.custom_id, "errored",
                                                                                error=error), keep=True)
        return lambda: self._give(group.seats, lambda seat: results.get(seat.custom_id)
                                  or wire.missing(seat.custom_id, state), batch_id=state.id)

    async def _results(self, state: BatchState) -> list[BatchResult]:
        assert self.wire is not None
        for attempt in range(5):
            try:
                return await self.wire.results(state)
            except ModelError as exc:
                if not exc.retryable or attempt == 4:
                    raise
                await asyncio.sleep(min(self.poll_s, 2.0 ** attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _give(self, seats: list[Seat], outcome: Callable[[Seat], BatchResult], *, batch_id: str | None = None,
              keep: bool = False) -> None:
        """Hand each seat its outcome (its row goes on); unless `keep`, its custom id leaves the
        record once the rows are quiet again (they have taken the answers by then)."""
        for seat in seats:
            result = outcome(seat)
            if result.outcome in ("expired", "canceled"):
                self.status[seat.thread] = "expired" if result.outcome == "expired" else "cancelled"
                if isinstance(result.error, BatchExpiredError):
                    result.error.batch_id = batch_id
            else:
                self.status.pop(seat.thread, None)
            if not keep:
                self._taken.append(seat.custom_id)
            if not seat.future.done():
                self._moved(+1)
                seat.future.set_result(result)


def _outcome(task: asyncio.Task[Any]) -> Any:
    """A row task's result, or what stopped it (its exception, or `asyncio.CancelledError`)."""
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()


def _refused(exc: BaseException) -> ModelError:
    """A whole batch the provider refused to make: each of its rows fails with the provider's words."""
    if isinstance(exc, ModelError):
        exc.retryable = False
        return exc
    return ModelError(f"the batch could not be submitted: {exc}")


class _RoundBar:
    """A round's progress: requests done of the round's, the batches' counts, their expiry."""

    def __init__(self, rounds: Rounds, total: int) -> None:
        self.bar = progress_bar(total, rounds.progress and rounds.wait, f"{rounds.desc} round {rounds.round}")
        self.total = total
        self.started = time.time()

    def show(self, groups: list[_Group]) -> None:
        if self.bar is None:
            return
        counts: dict[str, int] = {}
        for group in groups:
            for key, value in (group.state.counts if group.state else {}).items():
                counts[key] = counts.get(key, 0) + value
        done = min(self.total, sum(v for k, v in counts.items() if k != "processing"))
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)
        shown: dict[str, Any] = {name: counts.get(name, 0) for name in ("processing", "succeeded", "errored")}
        expires = [g.state.expires_at for g in groups if g.state and g.state.expires_at]
        if expires:  # neither API estimates when a batch ends: when it expires at the latest
            shown["expires"] = time.strftime("%H:%M", time.localtime(min(expires)))
        self.bar.set_postfix(shown, refresh=False)  # a dict: tqdm keeps its order (keywords, it sorts)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
