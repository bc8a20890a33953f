"""How a provider's client lives: one per event loop (`HTTPModel.client`), closed when that loop
shuts down, or soon after the model that made it is dropped (a notebook cell run again makes a new
agent and model), so that no socket is left open for the garbage collector to find ("unclosed
transport"). A client is an SDK's (closed with ``close()``) or an httpx client (``aclose()``).

May import: the standard library only."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Any

__all__ = ["client_for_loop", "close_at_loop_shutdown", "close_for_loop", "close_when_dropped"]

_closing: set[asyncio.Future[Any]] = set()
"""Closes under way (a task is only weakly held by its loop)."""


async def client_for_loop(model: Any, make: Callable[[], Any]) -> Any:
    """`model`'s SDK client for the running loop, made with ``make()`` on first use there.

    `model` keeps them in ``_clients`` (a `weakref.WeakKeyDictionary` of loop -> (client, closer))
    under ``_clients_lock``; each is closed when its loop shuts down or `model` is dropped."""
    loop = asyncio.get_running_loop()
    entry = model._clients.get(loop)
    if entry is not None:
        return entry[0]
    client = make()
    closer = close_at_loop_shutdown(client)
    await closer.__anext__()  # registered with this loop's shutdown_asyncgens()
    with model._clients_lock:
        for old in [lp for lp in model._clients if lp.is_closed()]:
            del model._clients[old]
        entry = model._clients.setdefault(loop, (client, closer))
    if entry[0] is not client:  # another task of this loop won the race
        await closer.aclose()
    else:
        close_when_dropped(model, loop, closer)
    return entry[0]


async def close_for_loop(model: Any) -> None:
    """Close `model`'s SDK client of the running loop (its pooled connections), if it has one."""
    with model._clients_lock:
        entry = model._clients.pop(asyncio.get_running_loop(), None)
    if entry is not None:
        await entry[1].aclose()


async def close_at_loop_shutdown(client: Any) -> AsyncGenerator[None, None]:
    """Advanced once, this generator is registered with the running loop: the loop's
    ``shutdown_asyncgens()`` (``asyncio.run`` and nbagent's own loop call it) closes `client`."""
    close = getattr(client, "aclose", None) or client.close  # httpx's clients / the SDKs'
    try:
        yield
    finally:
        await close()


def close_when_dropped(model: object, loop: asyncio.AbstractEventLoop,
                       closer: AsyncGenerator[None, None]) -> None:
    """When `model` is freed, close the client of `closer` (`close_at_loop_shutdown`) on `loop`.

    The finalizer keeps the client reachable until then, so the cycle collector never frees its
    sockets with the model; at interpreter exit it does nothing (the loop's shutdown closes)."""
    weakref.finalize(model, _close_soon, loop, closer).atexit = False


def _close_soon(loop: asyncio.AbstractEventLoop, closer: AsyncGenerator[None, None]) -> None:
    try:
        loop.call_soon_threadsafe(_close, closer)  # whatever thread the collector runs on
    except RuntimeError:  # the loop is closed: its shutdown closed the client
        pass


def _close(closer: AsyncGenerator[None, None]) -> None:
    task = asyncio.ensure_future(closer.aclose())  # a no-op when it was closed already
    _closing.add(task)
    task.add_done_callback(_closing.discard)
