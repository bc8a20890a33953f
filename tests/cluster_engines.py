"""Real Ray and Dask clusters on this machine, loopback only, for the tests and the benchmark.

`start_ray` starts a Ray local cluster (``ray.init(num_cpus=2)``) with its addresses on 127.0.0.1
(Ray otherwise binds its node to the machine's outward address), no usage-stats reporting, and
start-up waits long enough for a loaded 2-core machine (Ray waits 15 s for its agents by default,
and its Python side 30 s for the node: a busy machine can need more).
`start_dask` starts a `LocalCluster` of worker processes on 127.0.0.1.

Neither lets the workers inherit ``OPENAI_API_KEY``: keys must come from the worker's own
environment, and the tests show what happens when they do not.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["RAY_ENV", "START_WAIT_S", "ray_start_patience", "start_dask", "start_ray"]

START_WAIT_S = 150.0
"""How long `start_ray` waits for the Ray node to register (Ray's own wait: 30 s)."""

RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",              # never phone home
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",    # a one-machine cluster: every address on loopback
    "RAY_raylet_start_wait_time_s": "120",       # a loaded machine starts Ray's agents slowly
    "RAY_agent_register_timeout_ms": "120000",
}


@contextmanager
def _without_key() -> Iterator[None]:
    key = os.environ.pop("OPENAI_API_KEY", None)
    try:
        yield
    finally:
        if key is not None:
            os.environ["OPENAI_API_KEY"] = key


@contextmanager
def ray_start_patience() -> Iterator[None]:
    """While active: Ray's environment for this machine (`RAY_ENV`), and a `ray.init` that waits
    up to `START_WAIT_S` for its node. Ray's Python side gives the node a fixed 30 s to register,
    and the node waits for its agents (Python processes that import a lot): on a loaded 2-core
    machine that can take longer. Nothing else is changed."""
    from ray._private import services

    os.environ.update(RAY_ENV)
    real_get_node = services.get_node

    def patient_get_node(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + START_WAIT_S
        while True:
            try:
                return real_get_node(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    services.get_node = patient_get_node
    try:
        yield
    finally:
        services.get_node = real_get_node


def start_ray(num_cpus: int = 2) -> Any:
    """``ray.init`` a local cluster of `num_cpus` CPUs on 127.0.0.1; returns the ray module."""
    import ray

    with ray_start_patience(), _without_key():
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, object_store_memory=100 * 2**20,
                 _node_ip_address="127.0.0.1", configure_logging=False, log_to_driver=False)
    return ray


def start_dask(workers: int = 2) -> Any:
    """A `Client` of a `LocalCluster`: `workers` processes of one thread each, on 127.0.0.1."""
    from distributed import Client, LocalCluster

    with _without_key():
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, silence_logs=logging.ERROR)
    return Client(cluster)
