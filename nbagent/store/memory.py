"""`MemoryStore`: keeps threads in this process (lost when it ends). For tests and throwaway runs."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import ConflictError
from ..messages import Message
from ..usage import ModelCallUsage
from .base import Checkpoint, LedgerEntry, Store, ThreadInfo, ThreadState, short_error, summarize
from .meta import ThreadMeta

__all__ = ["MemoryStore"]


def _copied(meta: ThreadMeta) -> ThreadMeta:
    """`meta` as a caller may change it: what a load hands out is the caller's, as SQLite's and
    PostgreSQL's decoded records are (the stored one changes only through `append`)."""
    return dataclasses.replace(
        meta, pending=list(meta.pending), decisions=dict(meta.decisions),
        always_allowed=list(meta.always_allowed), state=copy.deepcopy(meta.state),
        output=copy.deepcopy(meta.output))


@dataclass
class _Thread:
    version: int = 0
    messages: list[Message] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    meta: ThreadMeta = field(default_factory=ThreadMeta)
    ledger: dict[str, LedgerEntry] = field(default_factory=dict)
    usage: list[ModelCallUsage] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    updated: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None


class MemoryStore(Store):
    """Threads in a dict of this process. Same semantics as the SQLite store, nothing durable."""

    def __init__(self) -> None:
        self._threads: dict[str, _Thread] = {}

    async def load(self, thread: str) -> ThreadState | None:
        t = self._threads.get(thread)
        if t is None:
            return None
        return ThreadState(thread, t.version, list(t.messages), list(t.steps), _copied(t.meta),
                           dict(t.ledger), list(t.usage))

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
        t = self._threads.get(thread)
        if t is None:
            if version != 0:
                raise ConflictError(f"thread {thread!r} no longer exists (this writer expected version {version})")
            t = self._threads[thread] = _Thread()
        elif version == 0:
            raise ConflictError(f"thread {thread!r} already exists (version {t.version}); this writer "
                                "expected a new thread (version 0)")
        elif t.version != version:
            raise ConflictError(
                f"thread {thread!r} was changed by another writer: the store has version {t.version}, "
                f"this writer expected version {version}"
            )
        t.messages.extend(messages)
        t.steps.extend([step] * len(messages))
        t.usage.extend(usage)
        for row in usage:
            t.tokens_in += row.input_tokens
            t.tokens_out += row.output_tokens
            if row.cost_total is not None:
                t.cost = (t.cost or 0.0) + row.cost_total
        for entry in ledger:
            t.ledger[entry.call_id] = entry
        if meta is not None:
            # The loop builds a new record for every checkpoint and never changes one it gave
            # away, so it is kept as it is (no copy on the hot path of the in-memory store).
            t.meta = meta if isinstance(meta, ThreadMeta) else ThreadMeta.from_dict(meta)
        t.version += 1
        t.updated = time.time()
        if messages or meta is not None:
            m = t.meta
            t.checkpoints.append(Checkpoint(
                thread, t.version, step, t.updated, len(t.messages),
                summarize(t.messages[-1]) if t.messages else "", t.tokens_in, t.tokens_out, t.cost,
                m.status, m.run_id, m.stop_reason, short_error(m.error),
            ))
        return t.version

    async def threads(self) -> list[ThreadInfo]:
        infos = []
        for name, t in self._threads.items():
            title = next((m.content for m in t.messages if m.kind == "user"), "")
            infos.append(ThreadInfo(name, len(t.messages), t.updated, t.meta.status, " ".join(title.split())[:80]))
        return sorted(infos, key=lambda i: i.updated, reverse=True)

    async def checkpoints(self, thread: str) -> list[Checkpoint]:
        t = self._threads.get(thread)
        return list(t.checkpoints) if t else []

    async def delete_thread(self, thread: str) -> bool:
        self.__dict__.get("_recordings", {}).pop(thread, None)  # `Store.add_recording` keeps them here
        return self._threads.pop(thread, None) is not None
