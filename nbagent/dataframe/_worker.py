"""What runs on a Ray or Dask worker for ``agent.map(..., executor=...)``.

Owns the worker's side of a cluster batch: the agent rebuilt once per process and batch from its
pickled definition (`agent_for`), and one chunk of rows run with asyncio concurrency on nbagent's
background loop, each row handed back as soon as it is settled (`run_chunk`). The row itself is
the local path's `_rows.one_row` (settled threads skipped, interrupted ones resumed), so a row means
the same on a worker as in the notebook.

Imports `_rows` and the core's `_sync`; never ray or dask (`_ray` and `_dask` call this).
"""

from __future__ import annotations

import asyncio
import pickle
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from .._sync import background_loop
from ..agent import Agent
from ._rows import one_row

__all__ = ["Row", "agent_for", "run_chunk"]

Row = tuple[int, "str | None", str]
"""One row of a chunk: its position in the input, its prompt (None: missing), its thread id."""

_KEEP = 2
"""Agents kept per worker process: the current batch's and the one before (a re-run)."""

_agents: OrderedDict[str, Agent[Any]] = OrderedDict()
_agents_lock = threading.Lock()

_STOP_POLL_S = 0.25
"""How often a chunk asks whether the batch was stopped (Dask, which cannot interrupt a task)."""

_CANCEL_WAIT_S = 15.0
"""How long a stopped chunk waits for its rows to leave their threads valid (as `run_sync`)."""


def agent_for(token: str, payload: bytes) -> Agent[Any]:
    """The agent of batch `token` in this process, unpickled from `payload` on first use.

    One per process and batch: its store connection and the model's HTTP client serve every
    chunk the process runs. Unpickling is where a model reads its API key from this process's
    environment (and fails, naming the variable, when it is not set).
    """
    with _agents_lock:
        agent = _agents.get(token)
        if agent is None:
            agent = pickle.loads(payload)
            if not isinstance(agent, Agent):
                raise TypeError(f"a batch payload must be an Agent, got {type(agent).__name__}")
            _agents[token] = agent
            while len(_agents) > _KEEP:
                _agents.popitem(last=False)
        else:
            _agents.move_to_end(token)
        return agent


def run_chunk(
    agent: Agent[Any],
    rows: list[Row],
    concurrency: int,
    stopped: Callable[[], bool] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Run `rows`, `concurrency` at a time, and yield ``(position, row)`` as each is settled.

    The rows run on nbagent's background loop (one per process, so HTTP connections are reused
    from chunk to chunk); this generator only waits for them. A KeyboardInterrupt while it waits
    (``ray.cancel``), the generator being closed, or `stopped()` turning true cancels the rows
    still running, as Ctrl-C does in the local path (their threads end ``cancelled``), and waits
    for them to be stored.
    """
    out: queue.SimpleQueue[Any] = queue.SimpleQueue()
    end = object()

    async def main() -> None:
        pending = iter(rows)

        async def lane() -> None:
            for position, prompt, thread in pending:  # one shared iterator: each row run once
                out.put((position, await one_row(agent, prompt, thread)))

        try:
            await asyncio.gather(*(lane() for _ in range(max(1, min(concurrency, len(rows))))))
        finally:
            out.put(end)

    if stopped is not None and stopped():
        return
    future = asyncio.run_coroutine_threadsafe(main(), background_loop())
    finished = False
    try:
        next_check = time.monotonic() + _STOP_POLL_S
        while True:
            try:
                item = out.get(timeout=_STOP_POLL_S)
            except queue.Empty:
                item = None
            if item is end:
                finished = True
                break
            if item is not None:
                yield item
            if stopped is not None and time.monotonic() >= next_check:
                if stopped():
                    return
                next_check = time.monotonic() + _STOP_POLL_S
        future.result()  # a failure of the chunk itself (rows never raise: `_one` catches)
    finally:
        if not finished:
            future.cancel()  # cancels the task on the loop; its rows store themselves cancelled
            deadline = time.monotonic() + _CANCEL_WAIT_S
            while time.monotonic() < deadline:
                try:
                    if out.get(timeout=0.1) is end:
                        break
                except queue.Empty:
                    continue
