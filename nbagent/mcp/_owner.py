"""The one event loop that owns every MCP connection of the process, and closing them at exit.

An MCP session (its task group, its streams, a stdio server's pipes) is bound to the loop it was
opened on, while nbagent runs on several: the notebook kernel's loop (``await``, the view),
nbagent's private loop of the sync twins (``run_sync``, ``agent.map``), a script's
``asyncio.run``. So every connection lives on nbagent's private background loop
(`nbagent._sync.background_loop`, a daemon thread), whichever loop asked for it: one server
process per `MCPTools`, shared by every run of the kernel. `on_owner` runs a coroutine there and
awaits it from the caller's loop without blocking it (no hop when the caller is that loop).

Owns `on_owner` and the registry of open sources that `atexit` closes. Imports
nbagent._sync only.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from .._sync import background_loop

__all__ = ["on_owner", "register", "unregister"]

T = TypeVar("T")

CLOSE_AT_EXIT_S = 10.0
"""How long interpreter exit waits for the servers to be closed (stdio servers are stopped)."""


async def on_owner(coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` run on the owner loop. Cancelling the caller cancels it there too."""
    loop = background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:  # pragma: no cover - always called from a coroutine
        running = None
    if running is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


class _Closable(Protocol):
    async def _close_on_owner(self) -> None: ...


_open: dict[int, _Closable] = {}
"""The sources with an open connection (kept alive: a server is stopped at exit even when the
user dropped its `MCPTools`)."""


def register(source: _Closable) -> None:
    """Close `source` at interpreter exit if it is still open then."""
    _open[id(source)] = source


def unregister(source: _Closable) -> None:
    """`source` was closed."""
    _open.pop(id(source), None)


# A forked child has none of its parent's connections (they belong to the parent's loop thread).
os.register_at_fork(after_in_child=_open.clear)


def _close_all_at_exit() -> None:
    sources = list(_open.values())
    if not sources:
        return
    loop = background_loop()
    if loop.is_closed():  # pragma: no cover - the loop is never closed by nbagent
        return

    async def close_all() -> None:
        await asyncio.gather(*(s._close_on_owner() for s in sources), return_exceptions=True)

    future = asyncio.run_coroutine_threadsafe(close_all(), loop)
    try:
        future.result(timeout=CLOSE_AT_EXIT_S)
    except (concurrent.futures.TimeoutError, Exception):  # exit goes on whatever happens
        pass


atexit.register(_close_all_at_exit)
