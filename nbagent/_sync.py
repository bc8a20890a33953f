"""Run coroutines from sync code, in a plain script or inside a running loop (a Jupyter cell).

Owns the private background event loop, `run_sync`, and `twin`, which makes the blocking twin
(``run_sync``, ``checkpoints_sync``, ...) of an async method; imports exceptions only. No
nest_asyncio: inside a running loop the coroutine runs on a daemon thread with its own long-lived
loop (one loop for the whole process, so clients bound to it are reused). This also works where a
user applied nest_asyncio. A blocking call cannot receive button clicks: runs started this way
return ``paused`` instead of waiting for a person.

asyncio is imported by the first sync call, not with this module: the twins are made when
``import nbagent`` defines `Agent`, which must not load asyncio.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from .exceptions import SyncInAsyncError

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

__all__ = ["Caller", "background_loop", "run_sync", "twin", "waiting_caller"]

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


class Caller:
    """The thread blocked in `run_sync` (a cell, a script's main thread), which runs functions
    handed to it (`submit`) until the run ends: the python tool runs a call's code there, in the
    cell, as a cell would (`waiting_caller` finds it from inside the run)."""

    def __init__(self) -> None:
        import queue

        self.thread = threading.current_thread()
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = (
            queue.SimpleQueue())
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T] | None:
        """Run ``fn()`` on the caller's thread; its future has what it returned or raised. None
        when the caller no longer waits (a task that outlived its run)."""
        import concurrent.futures

        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                return None
            self._work.put((fn, future))
        return future

    def serve(self, run: concurrent.futures.Future[T]) -> T:
        """Run what is submitted until `run` is done; then its result."""
        run.add_done_callback(lambda _: self._work.put(None))
        try:
            while (item := self._work.get()) is not None:
                fn, future = item
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except Exception as exc:
                        future.set_exception(exc)
                    except BaseException:
                        future.set_exception(RuntimeError("interrupted while it ran on the caller's thread"))
                        raise
        finally:  # (a Ctrl-C while it waits: the run is cancelled, and nothing more runs here)
            with self._lock:
                self._closed = True
            while not self._work.empty():
                item = self._work.get_nowait()
                if item is not None:
                    item[1].cancel()
        return run.result()


_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("nbagent_sync_caller", default=None)


def waiting_caller() -> Caller | None:
    """The thread waiting in `run_sync` for the run this is called from, if one waits."""
    return _caller.get()


def background_loop() -> asyncio.AbstractEventLoop:
    """The process-wide private loop that sync calls run on (started on first use)."""
    import asyncio

    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed() or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=serve, name="nbagent-sync-loop", daemon=True)
            thread.start()
            ready.wait()
            _loop, _thread = loop, thread
        return _loop


def run_sync(make_coro: Callable[[], Coroutine[Any, Any, T]], *, on_interrupt: Callable[[], None] | None = None) -> T:
    """Run ``make_coro()`` to completion from sync code and return its result.

    On KeyboardInterrupt (kernel interrupt, Ctrl-C) the coroutine is cancelled, given a moment to
    leave the conversation valid, and the KeyboardInterrupt is re-raised.
    """
    import asyncio

    loop = background_loop()
    if threading.current_thread() is _thread:
        raise SyncInAsyncError(
            "a *_sync method was called from inside an async tool or callback running on nbagent's "
            "loop; use `await agent.run(...)` there instead"
        )
    finished = threading.Event()
    task: asyncio.Task[Any] | None = None
    cancel_early = False
    caller = Caller()

    async def main() -> T:
        nonlocal task
        task = asyncio.current_task()
        _caller.set(caller)
        try:
            if cancel_early:  # interrupted before it began: do nothing
                raise asyncio.CancelledError
            return await make_coro()
        finally:
            finished.set()

    def stop() -> None:  # on the loop: cancel the run, or make sure it never begins
        nonlocal cancel_early
        if on_interrupt is not None:
            on_interrupt()
        if task is None:
            cancel_early = True
            finished.set()
        else:
            task.cancel()

    try:
        # Submitting inside the try: the loop thread may start the run (and a Ctrl-C may land)
        # before run_coroutine_threadsafe even returns.
        future = asyncio.run_coroutine_threadsafe(main(), loop)
        return caller.serve(future)
    except KeyboardInterrupt:
        # Cancel on the loop itself (not through the concurrent future, which may not exist yet)
        # and wait for the coroutine, so the conversation is valid (open calls answered) when
        # the KeyboardInterrupt surfaces.
        loop.call_soon_threadsafe(stop)
        finished.wait(timeout=15)
        raise


def twin(method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]], doc: str | None = None,
         ) -> Callable[Concatenate[S, P], T]:
    """The blocking twin of the async method `method`, for its class body:
    ``run_sync = twin(run)``.

    The twin is named ``<name>_sync``, takes the same parameters (``inspect.signature`` and
    ``help`` show `method`'s) and runs ``self.<name>(...)`` with `run_sync` (an override of
    `method` in a subclass included). Its docstring is `doc`, by default "`<name>` from sync code".
    """
    name = method.__name__

    @functools.wraps(method)
    def blocking(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(lambda: getattr(self, name)(*args, **kwargs))

    blocking.__name__ = f"{name}_sync"
    blocking.__qualname__ = f"{method.__qualname__}_sync"
    blocking.__doc__ = doc if doc is not None else f"`{name}` from sync code."
    return blocking
