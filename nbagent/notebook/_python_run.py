"""One ``python`` call's code, run in this kernel the way the kernel runs a cell.

Owns compiling the code like a cell (its statements, then its last expression's value; top-level
``await``), running it on the kernel's main thread in steps, stopping it, and capturing what it
prints. Imports `nbagent._sync` (the thread waiting in ``run_sync``) and the standard library.

Where the code runs. A run started in a notebook is a task on the kernel's event loop, on the main
thread; the call's code runs in that task, on that thread, as a cell's does:

- code with no ``await`` runs in one step: the kernel is busy until it returns (other cells wait,
  widgets do not update), as while a cell runs;
- code with top-level ``await`` runs step by step, like an async cell: while it awaits, the loop
  is free (other cells run, the view's buttons work).

Under ``run_sync`` the run's loop is on nbagent's own thread while the caller (a cell, a script's
main thread) waits: code with no ``await`` is handed to that waiting thread (`waiting_caller`) and
runs there, inside the cell. Anywhere else (a user's own thread) it runs where the tool runs.

Stopping. ipykernel ignores SIGINT while no cell runs, so the call installs its own handler on the
main thread while it lasts (measured on ipykernel 7.4: an Interrupt sent while a background task
ran code on the main thread did nothing; with the handler it raised KeyboardInterrupt at once).
While a step runs, SIGINT (the Interrupt button, Ctrl-C) raises KeyboardInterrupt in the code, as
in a cell; while the code awaits, it cancels it, as ipykernel cancels an async cell. The timeout
is the same signal, sent to the main thread by a clock thread at the deadline and every
`STOP_WAIT_S` after, should the code catch it: it raises `Stopped` (a KeyboardInterrupt), which
also ends a blocking ``time.sleep`` or socket read (a real signal interrupts the system call).
Only the main thread receives signals: code running elsewhere goes on until it returns.

Output. While a step runs, ``sys.stdout`` and ``sys.stderr`` are routers that keep that thread's
writes for the call and pass every other thread's writes to the stream that was there before;
between steps the streams are the kernel's own. (IPython's ``capture_output`` swaps the streams for
every thread: measured, it kept a user thread's prints too.)
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import itertools
import linecache
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Coroutine, Generator, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from .._sync import Caller, waiting_caller

__all__ = ["MAX_CAPTURE_CHARS", "MAX_TRACEBACK_CHARS", "NOTHING", "STOP_WAIT_S", "Capture", "Outcome",
           "Rich", "Stopped", "run_here", "shortened"]

MAX_CAPTURE_CHARS = 50_000
"""The most of one call's stdout (and of its stderr) kept; the rest is counted, not kept."""
MAX_TRACEBACK_CHARS = 4_000
"""A traceback longer than this keeps its first and last lines (where it started and what raised)."""
STOP_WAIT_S = 0.5
"""After the deadline, how long between stop signals, and how long the call waits for its code to stop."""

NOTHING: Any = object()
"""The value of code that ends with a statement."""

_calls = itertools.count(1)
_FILE = __file__


class Stopped(KeyboardInterrupt):
    """Raised in the code at its deadline, or when the run stops while it runs; a KeyboardInterrupt,
    as an Interrupt in a cell, so ``except Exception`` does not catch it."""


class Capture:
    """A bounded text buffer: keeps the first `MAX_CAPTURE_CHARS` characters, counts the rest."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0

    def write(self, text: str) -> int:
        room = MAX_CAPTURE_CHARS - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def text(self) -> str:
        text = "".join(self.parts)
        if self.dropped:
            text += f"\n… ({self.dropped:,} more characters not kept)"
        return text


class Rich:
    """A value with a table for the view (``_repr_html_``, sanitized again by the run) and its
    text for the model (``to_string``)."""

    def __init__(self, text: str, html: str) -> None:
        self.text, self.html = text, html

    def to_string(self, **_: Any) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return self.html


@dataclass
class Outcome:
    """How a call's code ended."""

    value: Any = NOTHING
    error: str | None = None
    """The code's traceback (shortened), or what stopped it; None when it ran to its end."""
    out: str = ""
    err: str = ""
    figures: list[Any] = field(default_factory=list)
    """Images, or pyplot figures the code opened (as a notebook shows them after a cell)."""
    timed_out: str | None = None
    """Past the timeout: what became of the code, said to the model (None: no timeout)."""


class _Router:
    """``sys.stdout`` (or ``sys.stderr``) during a step: the step's thread writes to the call's
    buffer, every other thread to the stream that was there before."""

    def __init__(self, target: Any, capture: Capture, ident: int) -> None:
        self.target, self.capture, self.ident = target, capture, ident
        self.active = True  # a router the code kept (a logging handler) passes everything on afterwards

    def write(self, text: str) -> int:
        if self.active and threading.get_ident() == self.ident:
            return self.capture.write(text)
        if self.target is None:  # no console (pythonw): print() writes nowhere, as before
            return len(text)
        return int(self.target.write(text) or 0)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.target is not None and not (self.active and threading.get_ident() == self.ident):
            self.target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


async def _program(body: types.CodeType, last: types.CodeType | None, namespace: dict[str, Any]) -> Any:
    """The cell: its statements, then its last expression, whose value is returned."""
    ran = eval(body, namespace)
    if body.co_flags & inspect.CO_COROUTINE:  # top-level await, as in a cell
        await ran
    if last is None:
        return NOTHING
    value = eval(last, namespace)
    if last.co_flags & inspect.CO_COROUTINE:
        value = await value
    return value


def _compile(code: str, namespace: dict[str, Any], filename: str) -> tuple[Coroutine[Any, Any, Any], bool]:
    """The code as a coroutine to drive, and whether it awaits (has top-level ``await``)."""
    # Kept, as IPython keeps a cell's: tracebacks and inspect.getsource of what it defines read it.
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body[-1].value)
        del tree.body[-1]
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    body = compile(tree, filename, "exec", flags=flags)
    tail = None if last is None else compile(last, filename, "eval", flags=flags)
    awaits = any(c is not None and c.co_flags & inspect.CO_COROUTINE for c in (body, tail))
    return _program(body, tail, namespace), awaits


def _traceback_text(exc: BaseException) -> str:
    """The code's traceback, without this module's frames, its middle cut when long."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _FILE:
        tb = tb.tb_next
    if isinstance(exc, SyntaxError):
        text = "".join(traceback.format_exception_only(type(exc), exc))
    else:
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    return shortened(text)


def shortened(text: str) -> str:
    """A traceback, without its middle when it is longer than `MAX_TRACEBACK_CHARS`."""
    text = text.strip("\n")
    if len(text) > MAX_TRACEBACK_CHARS:
        half = MAX_TRACEBACK_CHARS // 2
        text = f"{text[:half]}\n… ({len(text) - 2 * half:,} characters of traceback left out) …\n{text[-half:]}"
    return text


def _figure_numbers() -> set[int]:
    pyplot = sys.modules.get("matplotlib.pyplot")
    return set(pyplot.get_fignums()) if pyplot is not None else set()


def _new_figures(before: set[int], value: Any) -> list[Any]:
    """The pyplot figures the code opened, closed so they do not show up again under the user's
    next cell; not the returned figure (it is the value)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return []
    figures = []
    for number in sorted(set(pyplot.get_fignums()) - before):
        figure = pyplot.figure(number)
        pyplot.close(figure)
        if figure is not value:
            figures.append(figure)
    return figures


def _send_interrupt(ident: int) -> None:
    kill = getattr(signal, "pthread_kill", None)
    if kill is not None:
        kill(ident, signal.SIGINT)  # a real signal: it also breaks a blocking sleep or read
    else:  # Windows: the handler runs at the code's next Python instruction
        import _thread

        _thread.interrupt_main(signal.SIGINT)


class _Call:
    """One call's code, its buffers, and how to stop it."""

    def __init__(self, code: str, namespace: dict[str, Any], timeout: float | None) -> None:
        self.code, self.namespace, self.timeout = code, namespace, timeout
        self.filename = f"<python call {next(_calls)}>"
        self.out, self.err = Capture(), Capture()
        self.stepping: int | None = None
        """The thread running one of the code's steps now, if one runs."""
        self.reason: str | None = None
        """Why the code is being stopped: ``timeout``, ``interrupt`` (SIGINT) or ``cancel`` (the run)."""
        self.deadline: float | None = None
        self.task: asyncio.Task[Outcome] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.done = threading.Event()
        self.off_main = False
        self._lock = threading.Lock()
        self._sent = self._received = 0  # the clock's signals: one in flight is not the user's

    # ------------------------------------------------------------------ steps
    def _step(self, coro: Coroutine[Any, Any, Any], value: Any, error: BaseException | None) -> tuple[bool, Any]:
        """Run the code until it awaits (False, what it awaits) or returns (True, its value)."""
        ident = threading.get_ident()
        routers = _Router(sys.stdout, self.out, ident), _Router(sys.stderr, self.err, ident)
        sys.stdout, sys.stderr = routers
        self.stepping = ident
        try:
            try:
                return False, (coro.send(value) if error is None else coro.throw(error))
            except StopIteration as stop:
                return True, stop.value
        finally:
            with self._lock:
                self.stepping = None
            for router, name in zip(routers, ("stdout", "stderr"), strict=True):
                router.active = False
                if getattr(sys, name) is router:  # else the code replaced it: theirs stays
                    setattr(sys, name, router.target)

    @types.coroutine
    def _steps(self, coro: Coroutine[Any, Any, Any]) -> Generator[Any, Any, Any]:
        """``await coro``, one guarded `_step` at a time."""
        value: Any = None
        error: BaseException | None = None
        while True:
            finished, result = self._step(coro, value, error)
            if finished:
                return result
            try:
                value, error = (yield result), None
            except BaseException as exc:  # a cancellation thrown in while it awaits: the code's to handle
                value, error = None, exc

    async def drive(self, coro: Coroutine[Any, Any, Any]) -> Outcome:
        """Run the code to its end; never raises (a KeyboardInterrupt escaping a task would stop the loop)."""
        before = _figure_numbers()
        try:
            value = await self._steps(coro)
        except BaseException as exc:
            with contextlib.suppress(Exception):  # (code that awaits in a finally cannot be closed)
                coro.close()
            return self._failed(exc)
        return self._ended(value, _new_figures(before, value))

    def drive_now(self, coro: Coroutine[Any, Any, Any]) -> Outcome:
        """Run code that never awaits, in one step on this thread."""
        before = _figure_numbers()
        try:
            finished, value = self._step(coro, None, None)
            assert finished, "code compiled without top-level await awaited"
        except BaseException as exc:
            with contextlib.suppress(Exception):
                coro.close()
            return self._failed(exc)
        return self._ended(value, _new_figures(before, value))

    def _ended(self, value: Any, figures: list[Any]) -> Outcome:
        return Outcome(value, None, self.out.text(), self.err.text(), figures, self._late())

    def _failed(self, exc: BaseException) -> Outcome:
        outcome = Outcome(NOTHING, None, self.out.text(), self.err.text())
        if self.reason == "timeout" and isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
            outcome.timed_out = "the code was stopped"
        else:
            outcome.timed_out = self._late()
        if isinstance(exc, asyncio.CancelledError) and self.reason == "interrupt":
            outcome.error = "KeyboardInterrupt: the user interrupted the code while it awaited"
        elif outcome.timed_out is None:
            outcome.error = _traceback_text(exc)
        return outcome

    def _late(self) -> str | None:
        """What to say of code that ended past its deadline on its own (None: it did not)."""
        if self.deadline is None or (self.reason != "timeout" and not self.off_main):
            return None
        late = time.monotonic() - self.deadline
        if late <= 0:
            return None
        if self.reason == "timeout":
            return f"the code caught the stop signal and ran on for {late:.1f} s more, until it ended"
        return (f"the code could not be interrupted (it ran off the kernel's main thread, where signals do "
                f"not reach) and ran on for {late:.1f} s more, until it ended")

    # ------------------------------------------------------------------ stopping
    def _on_sigint(self, previous: Any, signum: int, frame: Any) -> None:
        ours = self._sent > self._received
        if ours:
            self._received += 1
        if not self.done.is_set() and self.stepping == threading.get_ident():
            if self.reason is None:
                self.reason = "interrupt"
            raise KeyboardInterrupt if self.reason == "interrupt" else Stopped
        if ours:  # the clock's signal, landing after the step it was for ended
            return
        if not self.done.is_set() and self.task is not None and self.loop is not None:
            self.reason = self.reason or "interrupt"  # it awaits: cancel it, as ipykernel an async cell
            self.loop.call_soon_threadsafe(self.task.cancel)
        elif callable(previous):  # not for this call: whoever handled SIGINT before
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.default_int_handler(signum, frame)

    def _clock(self, main: int) -> None:
        """At the deadline, and every `STOP_WAIT_S` after, interrupt the step running on the main
        thread (the awaiting part is the loop's to cancel)."""
        assert self.timeout is not None
        delay = self.timeout
        while not self.done.wait(delay):
            delay = STOP_WAIT_S
            with self._lock:
                if self.reason is None:
                    self.reason = "timeout"
                if self.stepping == main and not self.done.is_set():
                    self._sent += 1
                    _send_interrupt(main)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """While the code may run on this thread: on the main thread, SIGINT stops it and a clock
        sends SIGINT at its deadline."""
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout
        main = threading.main_thread()
        if threading.current_thread() is not main:
            self.off_main = True
            try:
                yield
            finally:
                self.done.set()
            return
        previous = signal.getsignal(signal.SIGINT)
        handler = lambda signum, frame: self._on_sigint(previous, signum, frame)  # noqa: E731
        signal.signal(signal.SIGINT, handler)
        if self.timeout is not None:
            threading.Thread(target=self._clock, args=(main.ident,), name="nbagent-python-clock", daemon=True).start()
        try:
            yield
        finally:
            with self._lock:
                self.done.set()
            for _ in range(100):  # a clock signal in flight is received here, not by `previous`
                if self._received >= self._sent:
                    break
                time.sleep(0.001)
            if signal.getsignal(signal.SIGINT) is handler:  # else someone installed theirs since
                signal.signal(signal.SIGINT, previous)

    # ------------------------------------------------------------------ where it runs
    async def here(self, coro: Coroutine[Any, Any, Any]) -> Outcome:
        """Run the code in a task on this loop (in steps on this thread)."""
        self.loop = asyncio.get_running_loop()
        with self.running():
            self.task = task = asyncio.ensure_future(self.drive(coro))
            try:
                await asyncio.wait({task}, timeout=self.timeout)
                if not task.done():  # it awaits past its deadline: cancel it, as the clock would interrupt it
                    self.reason = self.reason or "timeout"
                    task.cancel()
                    await asyncio.wait({task}, timeout=STOP_WAIT_S)
            except asyncio.CancelledError:
                self.reason = "cancel"
                task.cancel()
                raise
        if not task.done():
            return Outcome(NOTHING, None, self.out.text(), self.err.text(), timed_out=(
                "the code did not stop (it caught the stop signal): it still runs in the kernel, "
                "and a restart ends it"))
        if task.cancelled():  # an Interrupt landing as the code ended, too late to reach it
            return Outcome(NOTHING, "KeyboardInterrupt: the user interrupted the code", self.out.text(),
                           self.err.text())
        return task.result()

    async def on_caller(self, coro: Coroutine[Any, Any, Any], caller: Caller) -> Outcome:
        """Run code that never awaits on the thread waiting in ``run_sync`` (the cell)."""

        def job() -> Outcome:
            with self.running():
                return self.drive_now(coro)

        future = caller.submit(job)
        if future is None:  # that thread no longer waits
            return await self.here(coro)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            ident = caller.thread.ident
            with self._lock:
                self.reason = "cancel"
                if not future.cancel() and ident is not None and self.stepping == ident and not self.done.is_set():
                    self._sent += 1
                    _send_interrupt(ident)
            raise


async def run_here(code: str, namespace: dict[str, Any], timeout: float | None) -> Outcome:
    """Run one call's code in this process, like a cell (see the module's docstring)."""
    call = _Call(code, namespace, timeout)
    try:
        coro, awaits = _compile(code, namespace, call.filename)
    except (SyntaxError, ValueError) as exc:
        return Outcome(error=_traceback_text(exc))
    caller = waiting_caller()
    main = threading.main_thread()
    if not awaits and caller is not None and caller.thread is main and threading.current_thread() is not main:
        return await call.on_caller(coro, caller)
    return await call.here(coro)
