"""The checkpoint store protocol and the shapes it persists.

Imports messages, usage, exceptions and the columnar usage shape (`_columnar`) only. Stores are
async (ready for PostgreSQL); every persisted shape is JSON (no pickle) and versioned by
`FORMAT_VERSION`.

A thread is an append-only log. Each `append` writes new messages, new usage rows, tool-call
ledger updates and the run's small ``meta`` record (status, pending calls, decisions,
always-allowed tools, user state); one that writes messages or a meta record is a checkpoint
(`Checkpoint`), which also keeps the run id, stop reason and error of the meta record the thread
then holds, so the last checkpoint of each run says how that run ended. `version` counts
appends; an append names the version it expects and fails with `ConflictError` if another
writer got there first.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from ..approvals import PendingCall
from ..messages import Message, ToolCall, unanswered_calls
from ..usage import ModelCallUsage
from ._columnar import USAGE_KINDS, ColumnBlock, TextPart, UsageColumns, column_names
from .meta import ThreadMeta

__all__ = [
    "ERROR_KEPT",
    "FORMAT_VERSION",
    "USAGE_KINDS",
    "Change",
    "Checkpoint",
    "ColumnBlock",
    "LedgerEntry",
    "LedgerStatus",
    "Store",
    "TextPart",
    "ThreadInfo",
    "ThreadMeta",
    "ThreadState",
    "UsageColumns",
]

FORMAT_VERSION = 6
"""Version of the persisted shapes; a store refuses files from a newer version. Format 2 is
format 1 with the checkpoints' ``run_id``, ``stop_reason`` and ``error``; format 3 is format 2
with the usage rows' ``purpose`` (``'run'`` in older rows); format 4 is format 3 with the usage
rows' ``context`` (the request's size by part; NULL in older rows); format 5 is format 4 with the
usage rows' ``agent``, ``depth`` and ``parent_call_id`` (where in a tree of agents the call was
made: NULL, 0 and NULL in older rows); format 6 is format 5 with the usage rows' ``batch``
(answered through a provider's batch API: 0 in older rows). `SQLiteStore` migrates an older file
when it opens it."""

ERROR_KEPT = 500
"""How many characters of a run's error a checkpoint keeps (`Checkpoint.error`)."""

LedgerStatus = Literal["started", "finished", "failed", "denied", "cancelled", "interrupted"]


@dataclass(slots=True)
class LedgerEntry:
    """What is known about one tool call's execution (keyed by thread and call id)."""

    call_id: str
    tool: str
    args_hash: str
    status: LedgerStatus
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "tool": self.tool, "args_hash": self.args_hash,
                "status": self.status, "time": self.time}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LedgerEntry:
        return cls(data["call_id"], data["tool"], data["args_hash"], data["status"], data.get("time", 0.0))


@dataclass(slots=True)
class ThreadState:
    """A thread as loaded from a store."""

    thread: str
    version: int
    messages: list[Message]
    message_steps: list[int]
    """Per message, the step (model call number within the thread) that wrote it."""
    meta: ThreadMeta
    ledger: dict[str, LedgerEntry]
    usage: list[ModelCallUsage]
    leased: bool | None = None
    """Whether the store holds a live lease on the thread for a run going on now (renewed by the
    running process, lapsing soon after it dies): how a run on another machine is known to be
    alive. None for stores that keep no leases (`MemoryStore`, `SQLiteStore`: one machine)."""

    def open_calls(self) -> list[ToolCall]:
        """The tool calls of the last answer that have no result yet."""
        return unanswered_calls(self.messages)

    def open_pending(self) -> list[PendingCall]:
        """The calls waiting for a person that still have no result (what can be decided)."""
        return self.meta.open_pending(self.messages)

    @property
    def step(self) -> int:
        """Model calls made on the thread so far."""
        if self.meta.thread_step:
            return self.meta.thread_step
        return self.message_steps[-1] if self.message_steps else 0


@dataclass(slots=True)
class ThreadInfo:
    """One stored thread, for listings."""

    thread: str
    messages: int
    updated: float
    status: str | None
    title: str
    """The first user message, shortened."""


@dataclass(slots=True)
class Checkpoint:
    """One append that wrote messages or the run's meta record: what the thread looked like
    after it, and which run it belonged to. A run's last checkpoint says how it ended (or where
    it stands while it goes on): see `Store.last_checkpoints`."""

    thread: str
    version: int
    step: int
    time: float
    messages: int
    """Number of messages in the thread after this checkpoint."""
    last_message: str
    """Kind and start of the thread's last message after this checkpoint ("" while it has none)."""
    input_tokens: int
    output_tokens: int
    cost_total: float | None
    status: str | None
    """The thread's status after this checkpoint (its meta record's)."""
    run_id: str | None = None
    """The run of the meta record the thread held after this checkpoint. None in checkpoints
    written before nbagent 0.2 (store format 1) and in a fork's own (no run made it)."""
    stop_reason: str | None = None
    """That record's stop reason."""
    error: str | None = None
    """That record's error, its first `ERROR_KEPT` characters."""


@dataclass(frozen=True, slots=True)
class Change:
    """What `Store.update` appends to a thread: `Store.append`'s arguments, less the version and
    step (those of the thread as loaded)."""

    messages: Sequence[Message] = ()
    usage: Sequence[ModelCallUsage] = ()
    ledger: Sequence[LedgerEntry] = ()
    meta: ThreadMeta | Mapping[str, Any] | None = None


class Store:
    """Base class of checkpoint stores (see `MemoryStore`, `SQLiteStore`)."""

    async def load(self, thread: str) -> ThreadState | None:
        """The whole thread, or None when it does not exist."""
        raise NotImplementedError

    async def append(
        self,
        thread: str,
        *,
        version: int,
        step: int,
        messages: Sequence[Message] = (),
        usage: Sequence[ModelCallUsage] = (),
        ledger: Sequence[LedgerEntry] = (),
        meta: ThreadMeta | Mapping[str, Any] | None = None,
    ) -> int:
        """Append one checkpoint and return the thread's new version.

        Args:
            version: the version the writer loaded (0 for a new thread).
            step: the thread's step count at this checkpoint.
            meta: the run's meta record (`ThreadMeta`, or its JSON form as a mapping), replacing
                the stored one (None keeps it).

        Raises:
            ConflictError: the stored version is not `version`.
        """
        raise NotImplementedError

    async def create_or_load(
        self,
        thread: str,
        *,
        step: int = 0,
        messages: Sequence[Message] = (),
        meta: ThreadMeta | Mapping[str, Any] | None = None,
    ) -> int | ThreadState:
        """Start `thread` with a first checkpoint if it does not exist yet and return its version
        (1); or, writing nothing, return the thread as stored.

        What a run with a prompt does first: the prompt is written with the run's meta record if
        the thread is new, and read otherwise. This default loads, then appends (a thread
        another writer starts in between is loaded); `PostgresStore` does both in one round trip,
        without calling `append` (a subclass that watches appends should watch this too).
        """
        from ..exceptions import ConflictError

        loaded = await self.load(thread)
        if loaded is not None:
            return loaded
        try:
            return await self.append(thread, version=0, step=step, messages=messages, meta=meta)
        except ConflictError:
            loaded = await self.load(thread)  # started by another writer since the load
            if loaded is None:
                raise
            return loaded

    async def update(self, thread: str, change: Callable[[ThreadState], Change | None], *,
                     attempts: int = 20, wait: float = 0.05) -> int | None:
        """Load `thread`, append what ``change(loaded)`` returns at the version loaded, and when
        another writer appended first (`ConflictError`), load it again and ask `change` again.

        For a writer that is not the thread's run: a judge's usage row (`nbagent.evals`), the real
        outcome of a tool that outlived its run. `change` sees the thread as it now is, so it can
        decide again (None: nothing to write).

        Args:
            attempts: how many loads before giving up.
            wait: seconds between a conflict and the next load.

        Returns:
            The thread's new version; None when it does not exist or `change` returned None.

        Raises:
            ConflictError: the thread was written by someone else after each of the `attempts` loads.
        """
        from ..exceptions import ConflictError

        for attempt in range(1, attempts + 1):
            loaded = await self.load(thread)
            found = None if loaded is None else change(loaded)
            if loaded is None or found is None:
                return None
            try:
                return await self.append(thread, version=loaded.version, step=loaded.step, messages=found.messages,
                                         usage=found.usage, ledger=found.ledger, meta=found.meta)
            except ConflictError:
                if attempt == attempts:
                    raise
            import asyncio  # only on a conflict: importing nbagent loads no asyncio

            await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def threads(self) -> list[ThreadInfo]:
        """All stored threads, most recently updated first."""
        raise NotImplementedError

    async def checkpoints(self, thread: str) -> list[Checkpoint]:
        """The checkpoints of a thread, oldest first."""
        raise NotImplementedError

    async def last_checkpoints(self, thread: str) -> dict[str, Checkpoint]:
        """The last checkpoint of each run of `thread`, by run id, in the order they were written.

        How each run ended: its ``status``, ``stop_reason`` and ``error`` (``running`` for one
        still going on, or one whose process died). Runs of checkpoints written before nbagent
        0.2 are missing. This default reads `checkpoints`; stores override it with one query.
        """
        return last_of_runs(await self.checkpoints(thread))

    async def delete_thread(self, thread: str) -> bool:
        """Remove a thread with everything stored for it (messages, usage, ledger, checkpoints,
        pending calls, recorded model calls); True if it existed."""
        raise NotImplementedError

    async def prune(self, older_than: float | timedelta | datetime) -> list[str]:
        """Delete the threads last written before a time (retention); returns their ids, sorted.

        Args:
            older_than: an age (a `timedelta`, or seconds as a number) or a point in time (a
                `datetime`; a naive one is local time). A thread written since is kept.

        A thread whose run holds a live lease (`PostgresStore`: a run going on now, anywhere) is
        kept whatever its age.
        """
        if isinstance(older_than, datetime):
            cutoff = older_than.timestamp()
        elif isinstance(older_than, timedelta):
            cutoff = time.time() - older_than.total_seconds()
        elif isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
            cutoff = time.time() - float(older_than)
        else:
            from ..exceptions import UserError

            raise UserError(f"older_than must be a timedelta, seconds or a datetime, got {type(older_than).__name__}")
        return await self._prune(cutoff)

    async def _prune(self, cutoff: float) -> list[str]:
        """Delete the threads with ``updated < cutoff`` (stores override it with one statement)."""
        gone = []
        for info in await self.threads():
            if info.updated < cutoff and await self.delete_thread(info.thread):
                gone.append(info.thread)
        return sorted(gone)

    async def copy(
        self,
        source: str,
        target: str,
        *,
        messages: int,
        last: Message | None = None,
        meta: ThreadMeta | Mapping[str, Any] | None = None,
    ) -> int:
        """Start the new thread `target` with the first `messages` messages of `source`.

        Used by `Agent.fork`. Messages keep their steps; the usage rows of the steps copied (up
        to the step of the last copied message) and the ledger entries of the copied tool calls
        come along. `last` replaces the last copied message; `meta` becomes the new thread's meta.
        Returns the new thread's version.

        Checkpoints: those before the last copied message are copied; each copied run (one with
        a checkpoint or usage row copied) whose last checkpoint comes later gets that checkpoint's
        outcome (`cut_run_ends`), so the copy keeps how every run it holds ended; then one
        checkpoint for the copy itself, with `meta`.

        This default loads the source and appends one checkpoint per checkpoint it copies; stores
        override it to copy in one transaction.

        Raises:
            ConflictError: `target` already exists.
            StoreError: `source` does not exist or has fewer messages.
        """
        from ..exceptions import ConflictError, StoreError

        loaded = await self.load(source)
        if loaded is None:
            raise StoreError(f"thread {source!r} is not in the store")
        if not 0 <= messages <= len(loaded.messages):
            raise StoreError(f"thread {source!r} has {len(loaded.messages)} messages; cannot copy {messages}")
        if await self.load(target) is not None:
            raise ConflictError(f"thread {target!r} already exists")
        kept = list(loaded.messages[:messages])
        steps = loaded.message_steps[:messages]
        if last is not None and kept:
            kept[-1] = last
        top = steps[-1] if steps else 0
        call_ids = {c.id for m in kept if m.kind == "assistant" for c in m.tool_calls}
        ledger = [e for e in loaded.ledger.values() if e.call_id in call_ids]
        usage = [dataclasses.replace(r, thread=target) for r in loaded.usage if r.step <= top]
        history = await self.checkpoints(source)
        copied = [c for c in history if c.messages < messages]
        held = {r.run_id for r in usage} | {c.run_id for c in copied if c.run_id is not None}
        ends = cut_run_ends(history, held, messages, top)
        return await replay(self, target, kept, [*copied, *ends], usage, ledger=ledger,
                            meta=meta if meta is not None else ThreadMeta(), step=top)

    async def usage_columns(
        self, thread: str | None = None, columns: Sequence[str] | None = None
    ) -> UsageColumns:
        """Stored usage rows (one per model call) column by column, for DataFrames and sums.

        The contract every store keeps:

        - rows of all threads (or of `thread` only), in the order they were written (for one
          thread, oldest first; across threads, `SQLiteStore` gives write order and this default
          gives threads oldest first);
        - `columns` limits the columns read (`ModelCallUsage` field names; default all of them);
        - the result is a `UsageColumns`: a list of blocks (`ColumnBlock`), each holding one buffer
          per column, typed by `USAGE_KINDS` (int64 ``array`` / ``memoryview``, float64 with NaN
          for None, bool bytes, and dictionary-encoded text as `TextPart`) — what the pandas
          edge turns into numpy arrays without a per-value step. ``cols["model"]`` still gives
          one column as a Python list.

        This default loads every thread and encodes its rows; `SQLiteStore` reads columnar
        chunks straight from its file.
        """
        names = column_names(columns)
        ids = [thread] if thread is not None else [t.thread for t in reversed(await self.threads())]
        blocks = []
        for name in ids:
            loaded = await self.load(name)
            if loaded is not None and loaded.usage:
                blocks.extend(UsageColumns.from_rows(loaded.usage, names).blocks)
        return UsageColumns(blocks, names)

    # ------------------------------------------------------------------ recordings
    async def add_recording(self, thread: str, entry: Mapping[str, Any]) -> None:
        """Keep one recorded model call (`nbagent.models.record`) with `thread`: plain JSON data,
        read back in the order added by `recordings`.

        This default keeps recordings in this object (what `MemoryStore` does); `SQLiteStore`
        and `PostgresStore` keep them in a ``recordings`` table of their own.
        """
        kept: dict[str, list[dict[str, Any]]] = self.__dict__.setdefault("_recordings", {})
        kept.setdefault(thread, []).append(dict(entry))

    async def recordings(self, threads: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The recorded model calls of `threads` (None: of every thread), each thread's in the
        order recorded, as JSON data (see `nbagent.models.replay`)."""
        kept: dict[str, list[dict[str, Any]]] = self.__dict__.get("_recordings", {})
        names = list(kept) if threads is None else [t for t in threads if t in kept]
        return [dict(e) for name in names for e in kept[name]]

    async def close(self) -> None:
        """Release resources (connections, files)."""


def short_error(error: Any) -> str | None:
    """A run's error as a checkpoint keeps it: text, its first `ERROR_KEPT` characters."""
    if error is None:
        return None
    return (error if isinstance(error, str) else str(error))[:ERROR_KEPT]


def last_of_runs(checkpoints: Sequence[Checkpoint]) -> dict[str, Checkpoint]:
    """The last of `checkpoints` (oldest first) of each run, by run id, in the order written."""
    ends: dict[str, Checkpoint] = {}
    for c in checkpoints:
        if c.run_id is not None:
            ends.pop(c.run_id, None)
            ends[c.run_id] = c
    return ends


def cut_run_ends(history: Sequence[Checkpoint], held: set[str], messages: int, step: int) -> list[Checkpoint]:
    """What a copy of a thread's first `messages` messages adds so that it keeps how each of its
    runs ended: for each run it holds (`held`: the run ids of its copied checkpoints and usage
    rows) whose last checkpoint in `history` (the source's) was not copied, that checkpoint,
    moved to the copy's end (`messages`, `step`), in the order they were written."""
    return [dataclasses.replace(c, messages=messages, step=step)
            for run_id, c in last_of_runs(history).items() if run_id in held and c.messages >= messages]


async def replay(
    target: Store,
    thread: str,
    messages: Sequence[Message],
    parts: Sequence[Checkpoint],
    usage: Sequence[ModelCallUsage],
    *,
    ledger: Sequence[LedgerEntry],
    meta: ThreadMeta | Mapping[str, Any] | None,
    step: int,
) -> int:
    """Write the new thread `thread` into `target` the way `parts` (checkpoints of another
    thread, oldest first) wrote it; returns its version.

    One append per part: the messages up to its count, its step, and a meta record with its
    run's ``status``, ``run_id``, ``stop_reason`` and ``error`` (so the new checkpoint keeps
    them; the next append replaces the record). Then one last append: the messages left,
    `ledger` and `meta`, at `step`. Each usage row goes with the first append at or after its
    step. Used by `Store.copy` and `nbagent.store.copy`.
    """
    bounds = list(itertools.accumulate((p.step for p in parts), max))  # sorted, for bisect
    rows: list[list[ModelCallUsage]] = [[] for _ in range(len(parts) + 1)]
    for row in usage:
        rows[bisect.bisect_left(bounds, row.step)].append(row)
    version = done = 0
    for part, part_rows in zip(parts, rows, strict=False):
        end = min(max(part.messages, done), len(messages))
        record = ThreadMeta(status=part.status, run_id=part.run_id,  # type: ignore[arg-type]
                            stop_reason=part.stop_reason, error=part.error)
        version = await target.append(thread, version=version, step=part.step, messages=messages[done:end],
                                      usage=part_rows, meta=record)
        done = end
    return await target.append(thread, version=version, step=step, messages=messages[done:], usage=rows[-1],
                               ledger=ledger, meta=meta)


def summarize(message: Message, width: int = 80) -> str:
    """``kind: start of the text`` for listings."""
    if message.kind == "assistant":
        text = message.text or ", ".join(f"{c.name}({c.args_json})" for c in message.tool_calls)
    else:
        text = message.content
        images = getattr(message, "images", None)
        if images:
            text = f"[{len(images)} image{'s' if len(images) != 1 else ''}] {text}"
    text = " ".join((text or "").split())
    if len(text) > width:
        text = text[: width - 1] + "…"
    return f"{message.kind}: {text}"
