"""Batch runs on a cluster: ``agent.map(..., executor="ray" | a dask Client)``.

Owns choosing the engine from ``executor=`` (`engine_for`), what must hold before any row runs
(`payload`: the agent pickles as its definition, a part that does not is named, and its store is
one the workers share), how the rows are cut into chunks and the concurrency shared out (`plan`),
and the driver's loop (`run_on_cluster`): chunks in flight, a progress bar that advances as rows
finish on the workers, Ctrl-C cancelling what remains, and the local path's DataFrame, in input
order (`_rows.batch_frame`). The engines are `_ray.RayEngine` and `_dask.DaskEngine`, imported
only when chosen (so ``ray`` / ``distributed`` only then); both implement `_engine.Engine`.

Imports `_rows` (inputs, thread ids, the frame, the progress bar), `_engine`, `_worker`'s row
shape, the core's exceptions and stores; tqdm when a bar is shown.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

import pandas as pd

from ..agent import Agent
from ..exceptions import UserError
from ..store.memory import MemoryStore
from ._engine import Engine
from ._rows import Progress, batch_frame, checked_inputs
from ._worker import Row

__all__ = ["engine_for", "payload", "plan", "run_on_cluster"]

def engine_for(executor: Any) -> Engine:
    """The engine of ``executor=``: ``"ray"``, a ``dask.distributed.Client``, or ``"dask"``."""
    if isinstance(executor, str):
        name = executor.strip().lower()
        if name == "ray":
            from ._ray import RayEngine

            return RayEngine()
        if name == "dask":
            from ._dask import DaskEngine, current_client

            return DaskEngine(current_client())
        raise UserError(f"executor={executor!r}: use None / 'local', 'ray', 'dask' or a dask.distributed Client")
    if _is_dask_client(executor):
        from ._dask import DaskEngine

        return DaskEngine(executor)
    raise UserError(
        f"executor= takes None / 'local', 'ray', 'dask' or a dask.distributed Client, got {type(executor).__name__}"
    )


def _is_dask_client(value: Any) -> bool:
    module = sys.modules.get("distributed")
    return module is not None and isinstance(value, module.Client)


# ---------------------------------------------------------------------------------- the agent
def _parts(agent: Agent[Any]) -> Iterator[tuple[str, Any]]:
    """The agent's parts, named for an error message, in the order a culprit is looked for."""
    for name, tool in agent.tools.items():
        yield f"tool {name!r}", tool
    yield f"the model {agent.model!r}", agent.model
    yield f"the store {agent.store!r}", agent.store
    yield "stop_when", agent.stop_when
    yield "state_type", agent.state_type
    yield "output_type", agent.output.output_type if agent.output is not None else None
    yield "settings", agent.settings
    yield "prices", agent.prices


def _fileless_modules(agent: Agent[Any]) -> set[Any]:
    """Modules of the agent's functions and types that exist only in this process (made by
    ``exec``, as a docs runner or some notebook tools do): no worker could import them."""
    found = set()
    objects: list[Any] = [agent.stop_when, agent.state_type, getattr(agent.model, "function", None),
                          getattr(agent.model, "stream_function", None)]
    if agent.output is not None:
        objects.append(agent.output.output_type)
    for tool in agent.tools.values():
        objects += [tool.function, tool.requires_approval]
    for obj in objects:
        module = sys.modules.get(getattr(obj, "__module__", None) or "")
        if module is not None and module.__name__ != "__main__" and getattr(module, "__file__", None) is None \
                and getattr(module, "__spec__", None) is None:
            found.add(module)
    return found


def payload(agent: Agent[Any], engine: Engine) -> bytes:
    """The agent pickled as its definition, checked before any row runs.

    Raises:
        UserError: the store is a `MemoryStore` (each worker would keep its own), or a part of
            the agent cannot be pickled; the message names the part (``tool 'lookup'``).
    """
    store = agent.store
    if isinstance(store, MemoryStore):
        raise UserError(
            f"agent.map(executor={engine.name!r}) runs the rows in other processes, and a MemoryStore lives in "
            "this one: the workers could not share it, and a re-run could not skip settled rows. Give the agent "
            "a store the workers share: Agent(..., store='batch.db') (a SQLite file: workers on this machine) "
            "or a PostgreSQL store (a cluster of machines)"
        )
    for module in _fileless_modules(agent):
        engine.by_value(module)
    try:
        return engine.dumps(agent)
    except Exception as exc:
        what = _culprit(agent, engine)
        raise UserError(
            f"agent.map(executor={engine.name!r}): {what} cannot be sent to the workers "
            f"({type(exc).__name__}: {exc}). Everything the agent holds is pickled (cloudpickle) and rebuilt "
            "on each worker: a tool must not hold a lock, an open file, a connection or a client; open those "
            "inside the tool, or at module level in a module the workers import"
        ) from None


def _culprit(agent: Agent[Any], engine: Engine) -> str:
    for what, part in _parts(agent):
        try:
            engine.dumps(part)
        except Exception:
            return what
    return "the agent"


# ---------------------------------------------------------------------------------- the plan
def plan(rows: int, slots: int, concurrency: int, chunk_size: int | None) -> tuple[int, int, int]:
    """``(chunks in flight, rows at once per chunk, rows per chunk)`` for a batch.

    At most `concurrency` rows run at once in all: ``min(slots, concurrency)`` chunks in flight,
    each running ``concurrency // in_flight`` rows at once. The default chunk holds at least
    twice its concurrency and is small enough that each chunk in flight is followed by about
    four more (balance between workers; less to run again when a worker dies).
    """
    if chunk_size is not None and (not isinstance(chunk_size, int) or isinstance(chunk_size, bool)
                                   or chunk_size < 1):
        raise UserError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    in_flight = max(1, min(slots, concurrency))
    per_chunk = max(1, concurrency // in_flight)
    size = chunk_size or max(2 * per_chunk, math.ceil(rows / (in_flight * 5)))
    return in_flight, per_chunk, size


# ---------------------------------------------------------------------------------- the driver
def run_on_cluster(
    agent: Agent[Any],
    inputs: Any,
    executor: Any,
    *,
    concurrency: int,
    thread_prefix: str | None,
    progress: bool,
    desc: str | None,
    chunk_size: int | None,
) -> pd.DataFrame:
    """`batch` on a cluster engine (see `nbagent.dataframe.batch` for the arguments)."""
    values, index, prompts, threads = checked_inputs(agent, inputs, concurrency, thread_prefix)
    engine = engine_for(executor)
    data = payload(agent, engine)
    in_flight, per_chunk, size = plan(len(values), engine.slots(), concurrency, chunk_size)
    rows: list[Row] = [(i, prompts[i], threads[i]) for i in range(len(values))]
    chunks = deque(rows[i:i + size] for i in range(0, len(rows), size))
    results: list[dict[str, Any] | None] = [None] * len(values)
    bar = Progress(len(values), progress, desc)
    try:
        engine.start(data, per_chunk)
        while chunks or engine.running():
            while chunks and engine.running() < in_flight:
                engine.submit(chunks.popleft())
            for update in engine.poll(0.1):
                if update[0] == "row":
                    results[update[1]] = update[2]
                    bar.settled(update[1], update[2])
                elif update[0] == "tick":
                    bar.settled(update[1])
                else:  # "lost"
                    for position in update[1]:
                        results[position] = _lost_row(threads[position], update[2])
                        bar.settled(position, failed=True)
    except BaseException:
        # Ctrl-C (KeyboardInterrupt) or a chunk that failed as a whole: nothing more runs; rows
        # running end cancelled and are stored so, as in the local path; settled rows stay.
        engine.cancel(15.0)
        raise
    finally:
        engine.close()
        bar.close()
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:  # an engine bug, not a user's: say so rather than build a frame with holes
        raise RuntimeError(f"agent.map(executor={engine.name!r}): no result for rows {missing[:10]}")
    return batch_frame(values, index, [r for r in results if r is not None])


def _lost_row(thread: str, why: str) -> dict[str, Any]:
    return {
        "output": None, "status": "failed", "input_tokens": 0, "output_tokens": 0, "cost": None,
        "duration_s": None, "steps": 0, "thread": thread, "run_id": None, "skipped": False,
        "error": f"{why}; run the batch again to continue this row where it was stored",
    }
