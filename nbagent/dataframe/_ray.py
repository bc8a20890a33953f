"""The Ray engine of ``agent.map(..., executor="ray")``.

Owns the Ray side of a cluster batch: the pickled agent put in Ray's object store once, one Ray
task per chunk, the driver's view of them, their cancellation. Each chunk task is a generator (a
Ray streaming generator) that yields each row as its worker settles it, so the bar advances per
row and what a worker had settled before it died has already reached the driver.

Ray does not retry these tasks (``max_retries=0``): it would match a retried generator's outputs
to the first attempt's by position, and rows finish in any order. The driver sends the rows it has
not received again instead (`RETRIES` times), which the store makes safe: settled rows are
skipped, interrupted ones continue where they were stored.

Imports ``ray`` (this module is imported only when ``executor="ray"`` is chosen), `_worker`
and `_engine` (what the driver expects of an engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray
import ray.cloudpickle
from ray.exceptions import RayError, RayTaskError, TaskCancelledError

from ._engine import Update, new_token
from ._worker import Row, agent_for, run_chunk

__all__ = ["RETRIES", "RayEngine"]

RETRIES = 2
"""How many times the rows of a chunk whose worker died are sent again (then they are reported
failed, and a re-run of the batch continues them)."""


def _chunk(data: bytes, token: str, rows: list[Row], concurrency: int) -> Any:
    """The Ray task: one chunk on a worker, each settled row yielded as it comes."""
    yield from run_chunk(agent_for(token, data), rows, concurrency)


_remote_chunk: Any = None


def _task() -> Any:
    global _remote_chunk
    if _remote_chunk is None:
        _remote_chunk = ray.remote(max_retries=0, retry_exceptions=False)(_chunk)
    return _remote_chunk


@dataclass
class _Chunk:
    rows: list[Row]
    attempt: int
    received: set[int] = field(default_factory=set)


class RayEngine:
    """`_engine.Engine` on the Ray cluster this process is connected to (``ray.init``; like
    Ray's own API, it connects with ``ray.init()`` when nothing did)."""

    name = "ray"

    def __init__(self) -> None:
        if not ray.is_initialized():
            ray.init()
        self._chunks: dict[Any, _Chunk] = {}
        self._data: Any = None
        self._token = new_token()
        self._concurrency = 1

    def slots(self) -> int:
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def dumps(self, obj: Any) -> bytes:
        return ray.cloudpickle.dumps(obj)

    def by_value(self, module: Any) -> None:
        ray.cloudpickle.register_pickle_by_value(module)

    def start(self, payload: bytes, concurrency: int) -> None:
        self._data = ray.put(payload)
        self._concurrency = concurrency

    def submit(self, rows: list[Row], attempt: int = 0) -> None:
        generator = _task().remote(self._data, self._token, rows, self._concurrency)
        self._chunks[generator] = _Chunk(rows, attempt)

    def running(self) -> int:
        return len(self._chunks)

    def poll(self, timeout: float) -> list[Update]:
        if not self._chunks:
            return []
        pending = list(self._chunks)
        ready, _ = ray.wait(pending, num_returns=1, timeout=timeout)
        if ready:  # and whatever else is ready by now
            ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
        updates: list[Update] = []
        for generator in ready:
            updates += self._take(generator)
        return updates

    def _take(self, generator: Any) -> list[Update]:
        """The next output of a chunk whose next output is ready (or its end)."""
        chunk = self._chunks[generator]
        try:
            ref = next(generator)
            position, row = ray.get(ref)
        except StopIteration:
            del self._chunks[generator]
            return []
        except RayTaskError:
            raise  # the chunk failed as a whole (e.g. the agent cannot be rebuilt there): stop
        except TaskCancelledError:
            del self._chunks[generator]
            return []
        except RayError as exc:  # the worker (or its node) died, its objects were lost
            del self._chunks[generator]
            rest = [r for r in chunk.rows if r[0] not in chunk.received]
            if chunk.attempt < RETRIES:
                self.submit(rest, chunk.attempt + 1)
                return []
            why = f"the Ray worker running this row died {chunk.attempt + 1} times ({type(exc).__name__})"
            return [("lost", [r[0] for r in rest], why)]
        chunk.received.add(position)
        return [("row", position, row)]

    def cancel(self, wait_s: float) -> None:
        """Cancel every chunk and wait up to `wait_s` for their tasks to end (their rows store
        themselves cancelled). Never longer: reading a cancelled chunk's stream to its end
        waits for its task with no time limit, so only the tasks' end refs are waited for."""
        for generator in self._chunks:
            ray.cancel(generator)  # a KeyboardInterrupt in the task: its rows end cancelled
        ends = [generator.completed() for generator in self._chunks]
        if ends:
            ray.wait(ends, num_returns=len(ends), timeout=wait_s, fetch_local=False)
        self._chunks.clear()

    def close(self) -> None:
        self._chunks.clear()
        self._data = None
