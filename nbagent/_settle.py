"""What still goes on in this process after its cell has ended, and `settle`, which waits for it.

Owns two registries and the wait on them:

- the runs going on in the background: `track` (each `RunHandle` adds its task; a run ends by
  itself, paused when it needs a person, so the wait ends);
- the settle hooks: `on_settle` (each chat view adds one: wait until it shows its thread as
  stored, then send its saved copy again, from the cell that waits);
- `settle`: wait for the runs of this loop, call the hooks, and again while a hook started a run.

Why (measured with nbclient 0.11 and ipykernel 7.4): a run is a background task, so it ends, and
a chat view updates the copy of its conversation saved with the notebook, after the cell that
started it has ended. ipykernel sends that update as a reply to the cell the task was started in
(the parent header is a context variable a task inherits), and a headless executor (nbclient,
papermill, ``jupyter nbconvert --execute``, nbmake) reads only the replies to the cell it runs,
then shuts the kernel down after the last cell: the saved copy said "no messages yet", a run
still going was cut off. Awaited in the last cell, `settle` lets the runs end and sends each
view's copy again as a reply to that cell, which every executor applies (by its display id).

Threading: `track` is called on the run's loop (the kernel's, or `run_sync`'s private one);
`settle` waits only for the runs of the loop it runs on. A hook that is a bound method is held
weakly (a view that is gone stops counting by itself), as `_watch` holds observers.

Imports only the standard library.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["on_settle", "settle", "track"]

Hook = Callable[[], Awaitable[None]]
"""An awaitable function without arguments, called once in each `settle` after the runs ended."""

_lock = threading.Lock()
_runs: set[asyncio.Future[Any]] = set()
_hooks: dict[int, Callable[[], Hook | None]] = {}
_keys = itertools.count()


def track(task: asyncio.Future[Any]) -> None:
    """Count `task` (a run going on in the background) until it is done."""
    with _lock:
        _runs.add(task)
    task.add_done_callback(_forget)


def _forget(task: asyncio.Future[Any]) -> None:
    with _lock:
        _runs.discard(task)


def on_settle(hook: Hook) -> Callable[[], None]:
    """Have `settle` await ``hook()`` once the runs have ended; returns the function that takes
    it out again. A bound method is held weakly."""
    ref: Callable[[], Hook | None] = weakref.WeakMethod(hook) if inspect.ismethod(hook) else (lambda: hook)
    with _lock:
        key = next(_keys)
        _hooks[key] = ref

    def remove() -> None:
        with _lock:
            _hooks.pop(key, None)

    return remove


def _running(loop: asyncio.AbstractEventLoop) -> list[asyncio.Future[Any]]:
    me = asyncio.current_task()
    with _lock:
        return [t for t in _runs if not t.done() and t is not me and t.get_loop() is loop]


def _live_hooks() -> list[Hook]:
    with _lock:
        refs = list(_hooks.items())
    hooks = []
    for key, ref in refs:
        hook = ref()
        if hook is None:  # its view is gone
            with _lock:
                _hooks.pop(key, None)
        else:
            hooks.append(hook)
    return hooks


async def settle() -> None:
    """Wait until this kernel's runs and views have settled: every run started in the background
    on this loop (``agent.start``, a chat view's runs, a resume from a click) has ended, each chat
    view shows its thread as stored, and each view's saved copy has been sent again, from the
    cell that awaits this.

    The last cell of a notebook that is executed headless (nbclient, papermill,
    ``jupyter nbconvert --execute``, nbmake) and saved with its outputs::

        from nbagent.notebook import settle
        await settle()

    Without it, such an executor ends the kernel while runs may still go on, and misses what the
    views send after their cells ended (a view's saved copy reads "no messages yet"). In
    JupyterLab you never need it: the page applies every update when it comes.

    A run needing a person ends paused, so this does not wait for a click; it waits as long as
    a tool runs (wrap it in ``asyncio.wait_for`` for a limit).
    """
    loop = asyncio.get_running_loop()
    while True:
        runs = _running(loop)
        if runs:
            await asyncio.wait(runs)
            continue
        for hook in _live_hooks():
            await hook()
        if not _running(loop):  # a hook may have started a run (a view's queued message)
            return
