"""The Dask engine of ``agent.map(..., executor=client)`` (a ``dask.distributed.Client``).

Owns the Dask side of a cluster batch: the pickled agent scattered once, one task per chunk, the
driver's view of them, progress and stopping. A chunk returns its rows when it ends; meanwhile
the rows it settles are reported as events on the batch's topic (``log_event`` /
``subscribe_topic``, at most ten a second), so the bar advances as rows finish. Dask cannot
interrupt a running task, so a stopped batch sets a Dask `Event` that each chunk checks a few
times a second (`_worker`).

When a worker dies, the scheduler runs its tasks again elsewhere (up to its
``distributed.scheduler.allowed-failures``); the store makes that safe: settled rows are skipped,
interrupted ones continue. A chunk that killed too many workers (`KilledWorker`) reports its rows
failed, and a re-run of the batch continues them; a chunk the scheduler dropped is sent again
(`RETRIES` times). The pickled agent is a task's result, not scattered data, so that losing the
worker that holds it does not lose it.

Imports ``distributed`` and ``cloudpickle`` (this module is imported only when a Dask executor
is chosen), `_worker` and `_engine` (what the driver expects of an engine).
"""

from __future__ import annotations

import collections
import itertools
import time
from concurrent.futures import CancelledError
from typing import Any

import cloudpickle
from distributed import Client, Event, KilledWorker, get_client, get_worker, wait

from ..exceptions import UserError
from ._engine import Update, new_token
from ._worker import Row, agent_for, run_chunk

__all__ = ["RETRIES", "DaskEngine", "current_client"]

RETRIES = 2
"""How many times a chunk the scheduler dropped is sent again (then its rows are reported failed)."""


def current_client() -> Client:
    """The Dask client of ``executor="dask"``: the current one (the last `Client` made)."""
    try:
        return get_client()
    except ValueError:
        raise UserError(
            "executor='dask' needs a dask.distributed Client: client = Client() (a LocalCluster on this "
            "machine) or Client('tcp://scheduler:8786') first, or pass executor=client"
        ) from None


_REPORT_EVERY_S = 0.1
"""A chunk reports the rows it settled at most this often (one event, not one per row)."""


def _chunk(data: bytes, token: str, rows: list[Row], concurrency: int) -> list[tuple[int, dict[str, Any]]]:
    """The Dask task: one chunk on a worker; settled rows are reported on the topic `token`."""
    worker = get_worker()
    stop = Event(f"{token}-stop")
    settled: list[tuple[int, dict[str, Any]]] = []
    unreported: list[int] = []
    next_report = time.monotonic()
    for position, row in run_chunk(agent_for(token, data), rows, concurrency, stopped=stop.is_set):
        settled.append((position, row))
        unreported.append(position)
        if time.monotonic() >= next_report:
            worker.log_event(token, unreported)
            unreported, next_report = [], time.monotonic() + _REPORT_EVERY_S
    if unreported:
        worker.log_event(token, unreported)
    return settled


class DaskEngine:
    """`_engine.Engine` on a ``dask.distributed.Client`` (a LocalCluster or a scheduler)."""

    name = "dask"

    def __init__(self, client: Client) -> None:
        if client.asynchronous:
            raise UserError("agent.map(executor=client) blocks: give it a Client made without asynchronous=True")
        self._client = client
        self._token = new_token()
        self._futures: dict[Any, tuple[list[Row], int]] = {}
        self._ticks: collections.deque[int] = collections.deque()
        self._numbers = itertools.count()
        self._data: Any = None
        self._stop: Event | None = None
        self._concurrency = 1

    def slots(self) -> int:
        return max(1, sum(self._client.nthreads().values()))

    def dumps(self, obj: Any) -> bytes:
        return cloudpickle.dumps(obj)

    def by_value(self, module: Any) -> None:
        cloudpickle.register_pickle_by_value(module)

    def start(self, payload: bytes, concurrency: int) -> None:
        self._concurrency = concurrency
        self._stop = Event(f"{self._token}-stop", client=self._client)
        self._client.subscribe_topic(self._token, self._tick)
        # The agent as a task's result, not scattered data: if the worker holding it dies, the
        # scheduler computes it again (scattered data would be lost, and the chunks with it).
        self._data = self._client.submit(bytes, payload, key=f"{self._token}-agent", pure=False)

    def _tick(self, event: tuple[float, Any]) -> None:  # on the client's loop thread
        self._ticks.extend(event[1])

    def submit(self, rows: list[Row], attempt: int = 0) -> None:
        future = self._client.submit(
            _chunk, self._data, self._token, rows, self._concurrency,
            pure=False, key=f"{self._token}-chunk-{next(self._numbers)}",
        )
        self._futures[future] = (rows, attempt)

    def running(self) -> int:
        return len(self._futures)

    def poll(self, timeout: float) -> list[Update]:
        updates: list[Update] = []
        if self._futures:
            try:
                wait(list(self._futures), timeout=timeout, return_when="FIRST_COMPLETED")
            except (TimeoutError, CancelledError):  # cancelled ones are looked at below
                pass
            for future in [f for f in self._futures if f.done()]:
                rows, attempt = self._futures.pop(future)
                if future.cancelled():  # the scheduler dropped it (not us: `cancel` forgets them first)
                    if attempt < RETRIES:
                        self.submit(rows, attempt + 1)  # settled rows are skipped, the rest continue
                    else:
                        updates.append(("lost", [r[0] for r in rows], "the Dask scheduler dropped this row's chunk"))
                elif future.status == "error" and isinstance(future.exception(), KilledWorker):
                    why = f"the Dask workers running this row died ({future.exception()})"
                    updates.append(("lost", [r[0] for r in rows], why))
                else:
                    updates += [("row", position, row) for position, row in future.result()]
        while self._ticks:
            updates.append(("tick", self._ticks.popleft()))
        return updates

    def cancel(self, wait_s: float) -> None:
        futures = list(self._futures)
        if self._stop is not None:
            self._stop.set()  # running chunks cancel their rows; queued ones start and return
        if futures:
            try:
                wait(futures, timeout=wait_s)
            except TimeoutError:
                pass
            self._client.cancel(futures)
        self._futures.clear()

    def close(self) -> None:
        if self._data is not None:
            self._client.unsubscribe_topic(self._token)
            self._data.release()
            self._data = None
