"""Copying whole threads from one store to another (`nbagent.store.copy`): SQLite ↔ PostgreSQL.

Owns `copy_threads`, which reads each thread through the store protocol and writes it into the
other store through the protocol too, one append per checkpoint of the source (`base.replay`),
so any two stores work with each other. Imports the store protocol and exceptions only.

What is kept: every message with its step, the checkpoints (where they fall, their summaries,
running token totals, the run each belongs to with its status, stop reason and error: how every
run ended), usage rows, the ledger, the meta record (status, pending calls, decisions, state,
owner). What is not: version numbers and checkpoint times (the target numbers its own appends
and stamps them when they are written).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..exceptions import ConflictError, StoreError
from .base import Store, replay

__all__ = ["copy_threads"]


async def copy_threads(
    source: Store, target: Store, threads: Iterable[str] | None = None, *, replace: bool = False
) -> list[str]:
    """Copy `threads` (default: all, oldest first) from `source` into `target`; returns their ids.

    Raises:
        StoreError: a thread is not in `source`.
        ConflictError: a thread is already in `target` (and not `replace`).
    """
    names = list(threads) if threads is not None else [i.thread for i in reversed(await source.threads())]
    for name in names:
        state = await source.load(name)
        if state is None:
            raise StoreError(f"thread {name!r} is not in {source!r}")
        if await target.load(name) is not None:
            if not replace:
                raise ConflictError(
                    f"thread {name!r} already exists in {target!r}; nothing was copied over it "
                    "(pass replace=True to replace it)"
                )
            await target.delete_thread(name)
        parts = [c for c in await source.checkpoints(name) if c.messages <= len(state.messages)]
        step = state.step
        if parts and parts[-1].messages == len(state.messages):
            step = max(parts.pop().step, step)  # the last append writes the last checkpoint, with the meta
        await replay(target, name, state.messages, parts, state.usage, ledger=list(state.ledger.values()),
                     meta=state.meta, step=step)
    return names
