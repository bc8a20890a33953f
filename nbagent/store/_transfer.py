"""Copying whole threads from one store to another (`nbagent.store.copy`): SQLite ↔ PostgreSQL.

Owns `copy_threads`, which reads each thread through the store protocol and writes it into the
other store through the protocol too, one append per checkpoint of the source, so any two
stores work with each other. Imports the store protocol and exceptions only.

What is kept: every message with its step, the checkpoints (where they fall, their summaries,
running token totals), usage rows, the ledger, the meta record (status, pending calls,
decisions, state, owner). What is not: version numbers and checkpoint times (the target numbers
its own appends and stamps them when they are written).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..exceptions import ConflictError, StoreError
from ..messages import Message
from ..usage import ModelCallUsage
from .base import Store, ThreadState

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
            await target.delete(name)
        bounds = sorted({c.messages for c in await source.checkpoints(name) if 0 < c.messages <= len(state.messages)})
        await _write(target, state, bounds)
    return names


async def _write(target: Store, state: ThreadState, bounds: list[int]) -> None:
    messages, steps = state.messages, state.message_steps
    if messages and (not bounds or bounds[-1] != len(messages)):
        bounds.append(len(messages))
    groups: list[tuple[int, list[Message]]] = []
    start = 0
    for end in bounds:
        groups.append((steps[end - 1], messages[start:end]))
        start = end
    if not groups:
        groups = [(state.step, [])]
    rows: list[list[ModelCallUsage]] = [[] for _ in groups]
    for row in state.usage:  # each usage row goes with the first checkpoint at or after its step
        index = next((i for i, (step, _) in enumerate(groups) if step >= row.step), len(groups) - 1)
        rows[index].append(row)
    version = 0
    for i, (step, group) in enumerate(groups):
        final = i == len(groups) - 1
        version = await target.append(
            state.thread, version=version, step=max(step, state.step) if final else step, messages=group,
            usage=rows[i], ledger=list(state.ledger.values()) if final else (),
            meta=state.meta if final else None,
        )
