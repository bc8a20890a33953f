"""What the cluster driver (`_executors`) and an engine (`_ray`, `_dask`) agree on.

Owns `Engine` (one cluster engine as the driver's loop uses it), `Update` (what an engine
reports) and `new_token` (a batch's name on the cluster). The engines import this, not the
driver, which imports them only when one is chosen: so neither imports the other both ways.

Imports only the standard library and `_worker`'s row shape.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from ._worker import Row

__all__ = ["Engine", "Update", "new_token"]

Update = tuple[Any, ...]
"""What an engine reports: ``("row", position, row)`` a settled row; ``("tick", position)`` a
row settled on a worker whose result comes with its chunk; ``("lost", positions, why)`` rows
whose worker died and were not run again."""


class Engine(Protocol):
    """One cluster engine as the driver's loop uses it (`_ray.RayEngine`, `_dask.DaskEngine`)."""

    name: str

    def slots(self) -> int:
        """How many chunks the cluster runs at once (CPUs for Ray, worker threads for Dask)."""

    def dumps(self, obj: Any) -> bytes:
        """`obj` pickled the way the engine pickles functions (cloudpickle)."""

    def by_value(self, module: Any) -> None:
        """Pickle `module`'s functions by value: it has no file a worker could import."""

    def start(self, payload: bytes, concurrency: int) -> None:
        """Ship the pickled agent once; each chunk then runs `concurrency` rows at a time."""

    def submit(self, rows: list[Row]) -> None:
        """Send one chunk to the workers."""

    def running(self) -> int:
        """Chunks sent and not finished."""

    def poll(self, timeout: float) -> list[Update]:
        """What happened since the last call, waiting up to `timeout` seconds for something.
        Raises the error of a chunk that failed as a whole (an agent that cannot be rebuilt)."""

    def cancel(self, wait_s: float) -> None:
        """Stop every chunk (rows running end cancelled, as Ctrl-C does locally), waiting up to
        `wait_s` seconds for the running ones to store that."""

    def close(self) -> None:
        """Forget this batch's state on the cluster."""


def new_token() -> str:
    """A name for one batch on the cluster (its agent in each worker's cache, Dask's topics)."""
    return f"nbagent-{uuid.uuid4().hex[:12]}"

