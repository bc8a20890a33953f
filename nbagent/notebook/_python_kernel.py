"""A Jupyter kernel of its own for ``python_tool(kernel=...)``: the code runs in another process.

Owns that kernel's life (started with jupyter_client on the first call, kept for the next ones,
restarted when an interrupt does not stop the code, shut down when the tool is collected or this
process exits) and turns one execute request's messages (``stream``, ``execute_result``,
``display_data``, ``error``) into an `Outcome`. The kernel ends with this process even after a
kill -9: ipykernel polls its parent (measured: gone 3 s after its parent was killed). Imports
jupyter_client (when a kernel starts), `_python_run` (`Outcome`, `Capture`), `nbagent.images`
and `nbagent._sync` (the background loop).

The kernel's sockets are Unix sockets where the OS has them (no TCP port, even on loopback).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import queue
import re
import time
import weakref
from typing import Any

from .._sync import background_loop
from ..images import Image
from ._python_run import NOTHING, STOP_WAIT_S, Capture, Outcome, Rich, shortened

__all__ = ["Kernel", "check_kernel_name"]

START_TIMEOUT_S = 60.0
"""How long a kernel may take to start and answer."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def check_kernel_name(name: str) -> None:
    """Raise jupyter_client's NoSuchKernel when no kernel of that name is installed."""
    from jupyter_client.kernelspec import KernelSpecManager

    KernelSpecManager().get_kernel_spec(name)


def _shown(data: dict[str, Any]) -> Any:
    """A MIME bundle (execute_result, display_data) as a value: an image, a table, or its text."""
    if "image/png" in data:
        return Image(data=base64.b64decode(data["image/png"]), media_type="image/png")
    text = str(data.get("text/plain", ""))
    if "text/html" in data:
        return Rich(text, str(data["text/html"]))
    return text


class _Reply:
    """What one execute request's messages said."""

    def __init__(self) -> None:
        self.out, self.err = Capture(), Capture()
        self.value: Any = NOTHING
        self.figures: list[Any] = []
        self.error: str | None = None
        self.ename = ""
        self.idle = False

    def add(self, msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            (self.out if content.get("name") == "stdout" else self.err).write(content.get("text", ""))
        elif kind == "execute_result":
            self.value = _shown(content.get("data", {}))
        elif kind == "display_data":
            shown = _shown(content.get("data", {}))
            if isinstance(shown, Image):
                self.figures.append(shown)
            elif shown:
                self.out.write(f"{shown if isinstance(shown, str) else shown.text}\n")
        elif kind == "error":
            self.ename = content.get("ename", "")
            text = shortened(_ANSI.sub("", "\n".join(content.get("traceback", []))))
            self.error = text or f"{self.ename}: {content.get('evalue', '')}"
        elif kind == "status" and content.get("execution_state") == "idle":
            self.idle = True

    def outcome(self, timed_out: str | None = None) -> Outcome:
        error = None if timed_out is not None else self.error
        return Outcome(self.value, error, self.out.text(), self.err.text(), self.figures, timed_out)


async def _stop(manager: Any, client: Any) -> None:
    try:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
    except Exception:  # a kernel already gone: nothing left to end
        pass


def _shut(manager: Any, client: Any) -> None:
    """End a kernel from any thread (the tool was collected, or this process exits)."""
    loop = background_loop()
    future = asyncio.run_coroutine_threadsafe(_stop(manager, client), loop)
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    if here is not loop:  # (collected on the loop itself: it stops the kernel once this returns)
        with contextlib.suppress(Exception):
            future.result(timeout=START_TIMEOUT_S)


class Kernel:
    """One Jupyter kernel (``kernel_name``) that a tool's calls run in, one at a time.

    Everything that talks to it runs on nbagent's background loop (`background_loop`): one loop
    owns its sockets, whichever loop the run is on, and the notebook stays free meanwhile.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.marks: dict[str, str] = {}
        """{thread: its last python call that ran in this kernel process}, replaced by a restart."""
        self._manager: Any = None
        self._client: Any = None
        self._lock: asyncio.Lock | None = None
        self._finalizer: weakref.finalize[Any, Kernel] | None = None

    async def run(self, code: str, timeout: float | None) -> Outcome:
        """Run `code` in the kernel (started if need be); interrupt it at `timeout`."""
        work = asyncio.run_coroutine_threadsafe(self._run(code, timeout), background_loop())
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            work.cancel()  # the run stopped: interrupt the code
            raise

    # ------------------------------------------------------------------ on the background loop
    async def _run(self, code: str, timeout: float | None) -> Outcome:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._manager is None:
                await self._start()
            elif not await self._manager.is_alive():  # died between calls (os._exit, a crash)
                await self._restart()
            msg_id = self._client.execute(code, store_history=False, allow_stdin=False, stop_on_error=False)
            try:
                return await self._collect(msg_id, timeout)
            except asyncio.CancelledError:
                await self._manager.interrupt_kernel()
                raise

    async def _start(self) -> None:
        from jupyter_client import AsyncKernelManager

        transport = "ipc" if os.name == "posix" else "tcp"
        manager = AsyncKernelManager(kernel_name=self.name, transport=transport)
        await manager.start_kernel()
        client = manager.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=START_TIMEOUT_S)
        except BaseException:
            await _stop(manager, client)
            raise
        self._manager, self._client = manager, client
        self._finalizer = weakref.finalize(self, _shut, manager, client)

    async def _restart(self) -> None:
        """A fresh kernel process, without the variables of the last one."""
        if self._finalizer is not None:
            self._finalizer.detach()
        await _stop(self._manager, self._client)
        self.marks = {}
        await self._start()

    async def _collect(self, msg_id: str, timeout: float | None) -> Outcome:
        """The request's messages until the kernel is idle again; at `timeout`, interrupt it (twice,
        `STOP_WAIT_S` apart), then restart it."""
        reply = _Reply()
        deadline = None if timeout is None else time.monotonic() + timeout
        interrupts = 0
        checked = time.monotonic()
        while not reply.idle:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                if interrupts == 2:  # interrupted twice and still running: only a restart ends it
                    await self._restart()
                    return reply.outcome("the code did not stop when interrupted, so its kernel was restarted: "
                                         "the variables of earlier calls are gone")
                await self._manager.interrupt_kernel()
                interrupts += 1
                deadline = now + STOP_WAIT_S
            if now - checked >= 1.0:
                checked = now
                if not await self._manager.is_alive():
                    await self._restart()
                    reply.error = ("the kernel died while the code ran; it was restarted: the variables of "
                                   "earlier calls are gone")
                    return reply.outcome()
            try:
                msg = await self._client.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                reply.add(msg)
        if interrupts:
            return reply.outcome("the code was stopped" if reply.ename == "KeyboardInterrupt" else
                                 "the code caught the stop signal and ran on until it ended")
        return reply.outcome()
