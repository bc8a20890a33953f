"""`python_tool`: a tool named ``python`` that runs the model's code in the kernel.

Approving a call approves code: it runs with the kernel's full rights (files, network, the
user's variables). The code runs in a thread of its own, with the user's namespace (IPython's
``user_ns``, else ``__main__``) or a dict given as ``namespace=``. What that thread prints is
captured by a router installed on ``sys.stdout`` / ``sys.stderr`` while a call runs, which sends
every other thread's writes (the user's own cells) where they went before. Imports the run's
`tool_output` (how a value becomes text, a table or an image); IPython only when a shell runs.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import ctypes
import inspect
import itertools
import linecache
import sys
import threading
import traceback
from collections.abc import Callable
from html import escape
from types import TracebackType
from typing import Any

from .._run.execute import tool_output
from ..exceptions import ModelRetry, UserError
from ..messages import ToolResultMessage
from ..tools import RunContext, Tool

__all__ = ["MAX_CAPTURE_CHARS", "MAX_TRACEBACK_CHARS", "python_tool"]

MAX_CAPTURE_CHARS = 50_000
"""The most of one call's stdout (and of its stderr) kept; the rest is counted, not kept."""
MAX_TRACEBACK_CHARS = 4_000
"""A traceback longer than this keeps its first and last lines (where it started and what raised)."""
STOP_WAIT_S = 0.5
"""How long a timed-out call waits for its interrupted thread to stop before it answers."""

_calls = itertools.count(1)
_FILE = __file__
_ran_here: set[str] = set()
"""Ids of the calls this process ran: an earlier call not among them ran in a kernel since
restarted (or in another process), and the variables it made are not here."""
RESTARTED_NOTE = ("earlier python calls of this thread ran in a kernel that has since restarted (or in "
                  "another process): the variables they made are gone; run their code again if you need them")


class _Stopped(BaseException):
    """Raised inside a timed-out (or cancelled) call's thread to stop it; not an Exception, so
    the code's own ``except Exception`` does not swallow it."""


class _Capture:
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


_lock = threading.Lock()
_captures: dict[int, tuple[_Capture, _Capture]] = {}
"""The running calls' buffers, by the thread id that runs each call."""


class _Router:
    """``sys.stdout`` (or ``sys.stderr``) while calls run: a call's thread writes to its buffer,
    every other thread to the stream that was there before (everything else is that stream's)."""

    def __init__(self, target: Any, index: int) -> None:
        self.target = target
        self._index = index

    def write(self, text: str) -> int:
        capture = _captures.get(threading.get_ident())
        if capture is not None:
            return capture[self._index].write(text)
        if self.target is None:  # no console (pythonw): print() writes nowhere, as before
            return len(text)
        return int(self.target.write(text) or 0)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if threading.get_ident() not in _captures and self.target is not None:
            self.target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


def _capture(ident: int, out: _Capture, err: _Capture) -> None:
    with _lock:
        _captures[ident] = (out, err)
        for index, name in enumerate(("stdout", "stderr")):
            current = getattr(sys, name)
            if not isinstance(current, _Router):
                setattr(sys, name, _Router(current, index))


def _release(ident: int) -> None:
    """Forget a finished call's thread; with no call left, put the streams back (unless someone
    replaced them meanwhile: then theirs stay)."""
    with _lock:
        _captures.pop(ident, None)
        if _captures:
            return
        for name in ("stdout", "stderr"):
            current = getattr(sys, name)
            if isinstance(current, _Router):
                setattr(sys, name, current.target)


def _user_namespace() -> dict[str, Any]:
    """The kernel's globals: the running IPython shell's ``user_ns``, else ``__main__``'s."""
    ipython = sys.modules.get("IPython")
    if ipython is not None:
        shell = ipython.get_ipython()
        if shell is not None:
            return shell.user_ns  # type: ignore[no-any-return]
    import __main__

    return __main__.__dict__


def _evaluate(compiled: Any, namespace: dict[str, Any]) -> Any:
    value = eval(compiled, namespace)
    if compiled.co_flags & inspect.CO_COROUTINE:  # top-level await, as in a cell
        value = asyncio.run(value)
    return value


_NOTHING: Any = object()


def _execute(code: str, namespace: dict[str, Any], filename: str) -> Any:
    """Run `code` like a cell: its statements, then its last expression, whose value is returned
    (`_NOTHING` when it ends with a statement)."""
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body[-1].value)
        del tree.body[-1]
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    _evaluate(compile(tree, filename, "exec", flags=flags), namespace)
    if last is None:
        return _NOTHING
    return _evaluate(compile(last, filename, "eval", flags=flags), namespace)


def _traceback_text(exc: BaseException) -> str:
    """The code's traceback, without this module's frames, its middle cut when long."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _FILE:
        tb = tb.tb_next
    if isinstance(exc, SyntaxError):
        text = "".join(traceback.format_exception_only(type(exc), exc))
    else:
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    if len(text) > MAX_TRACEBACK_CHARS:
        half = MAX_TRACEBACK_CHARS // 2
        text = f"{text[:half]}\n… ({len(text) - 2 * half:,} characters of traceback left out) …\n{text[-half:]}"
    return text.rstrip("\n")


def _figure_numbers() -> set[int]:
    pyplot = sys.modules.get("matplotlib.pyplot")
    return set(pyplot.get_fignums()) if pyplot is not None else set()


def _new_figures(before: set[int], value: Any) -> list[Any]:
    """The pyplot figures the code opened (as a notebook shows them after a cell), closed so they
    do not show up again under the user's next cell; not the returned figure (it is the value)."""
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


class _Job:
    """One call's code, running in a daemon thread of its own."""

    def __init__(self, code: str, namespace: dict[str, Any], note: str | None = None) -> None:
        self.code, self.namespace, self.note = code, namespace, note
        self.filename = f"<python call {next(_calls)}>"
        self.out, self.err = _Capture(), _Capture()
        self.figures: list[Any] = []
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._done = False
        self.thread = threading.Thread(target=self._run, name="nbagent-python", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        ident = threading.get_ident()
        outcome: tuple[Any, str | None] = (_NOTHING, "stopped")
        try:
            try:
                _capture(ident, self.out, self.err)
                before = _figure_numbers()
                outcome = (_execute(self.code, self.namespace, self.filename), None)
                self.figures = _new_figures(before, outcome[0])
            except _Stopped:
                pass
            except BaseException as exc:  # the code's own error (SystemExit too): the model reads it
                outcome = (_NOTHING, _traceback_text(exc))
        except _Stopped:  # arrived while the outcome was being written down
            outcome = (_NOTHING, "stopped")
        self._finish(ident)
        value, error = outcome
        try:
            if error is None:
                self.future.set_result(value)
            else:
                self.future.set_exception(ModelRetry(self.answer(error=error)))
        except concurrent.futures.InvalidStateError:  # the call was answered already (timed out)
            pass

    def _finish(self, ident: int) -> None:
        """Mark the code ended (no interrupt is sent after this) and drop one sent too late."""
        while True:
            try:
                with self._lock:
                    self._done = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
                break
            except _Stopped:
                continue
        _release(ident)

    def interrupt(self) -> None:
        """Raise `_Stopped` in the thread at its next Python instruction (code blocked in C, such
        as a long ``time.sleep`` or a read, notices only when that returns)."""
        with self._lock:
            ident = self.thread.ident
            if not self._done and ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_Stopped))

    async def stop(self) -> bool:
        """Interrupt the thread (again, should the code catch it) and wait a little for it; True
        when it stopped."""
        for _ in range(int(STOP_WAIT_S / 0.05)):
            if not self.thread.is_alive():
                return True
            self.interrupt()
            await asyncio.sleep(0.05)
        return not self.thread.is_alive()

    def answer(self, value: Any = _NOTHING, error: str | None = None) -> Any:
        """What the model gets: the printed text, then the value (or the error)."""
        parts = [(label, text) for label, text in
                 (("note", self.note or ""), ("stdout", self.out.text()), ("stderr", self.err.text())) if text]
        images: list[Any] = []
        html = None
        if error is not None:
            parts.append(("error", error))
        elif value is not _NOTHING and value is not None:
            output = tool_output(value)
            parts.append(("value", output.content))
            images, html = output.images, (output.display or {}).get("text/html")
        images = [*tool_output(self.figures).images, *images] if self.figures else images
        if not parts and images:
            parts.append(("figures", f"{len(images)} figure(s), sent as images"))
        if not parts:
            return "(no output)"
        text = parts[0][1].rstrip() if len(parts) == 1 else "\n".join(f"[{label}]\n{t.rstrip()}" for label, t in parts)
        if images:
            return [text, *images]
        if html is not None:
            return _Rich(text, "".join(f"<pre>{escape(t)}</pre>" for _, t in parts[:-1]) + html)
        return text


class _Rich:
    """A result with a table for the view (``_repr_html_``, sanitized again by the run) and its
    text for the model (``to_string``)."""

    def __init__(self, text: str, html: str) -> None:
        self.text, self.html = text, html

    def to_string(self, **_: Any) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return self.html


def _restarted(ctx: RunContext[Any]) -> str | None:
    """`RESTARTED_NOTE` when the thread's last ``python`` call ran outside this process (the first
    call after a restart says so; the next ones follow one that ran here)."""
    for message in reversed(ctx.messages):
        if isinstance(message, ToolResultMessage) and message.name == "python" and message.status in ("done", "failed"):
            return None if message.call_id in _ran_here else RESTARTED_NOTE
    return None


def python_tool(
    *, timeout: float | None = 30.0, namespace: dict[str, Any] | None = None,
    requires_approval: bool | Callable[[Any], bool] = True,
) -> Tool:
    """A tool named ``python`` that runs the model's Python code in this kernel.

    ```python
    agent = Agent(model, tools=[python_tool()])
    ```

    **Approving a call approves code.** The code runs with the kernel's full rights: it can read
    and change your variables and files, use the network, and install or delete anything you
    could. By default every call waits for a person (the view shows the code; "Edit" changes it).
    ``requires_approval=False`` runs whatever the model writes.

    Each call runs like a cell: its statements, then its last expression, whose value is the
    result (a DataFrame as a table, a matplotlib figure as an image). What the code prints to
    stdout and stderr is captured and returned with it; the user's own cell output is not
    redirected. An exception's traceback (shortened) goes back to the model as an error result.

    Calls are recorded in the thread's ledger like any tool: a call is never run twice, and one
    that was running when the kernel died is answered as interrupted, never re-run. Variables
    the code made live in the kernel and are gone after a restart: the first call after one
    starts with a note saying so (``[note]``), so the model does not count on them.

    Args:
        timeout: seconds a call may run (None: no limit). Past it the tool answers "timed out
            after N s" at once, and the code is interrupted at its next Python instruction. Code
            blocked in C (a long ``time.sleep``, a read, a native library) cannot be interrupted:
            its thread keeps running in the kernel until that returns, and the answer says so.
        namespace: a dict the code runs in instead of the kernel's globals (IPython's
            ``user_ns``, else ``__main__``); variables persist in it between calls.
        requires_approval: True (default), False, or a function of the arguments.

    Threads the code starts itself print to the notebook, not to the result.
    """
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise UserError(f"python_tool: timeout must be a positive number of seconds or None, got {timeout!r}")
    if namespace is not None and not isinstance(namespace, dict):
        raise UserError(f"python_tool: namespace must be a dict, got {type(namespace).__name__}")
    where = "a namespace of its own" if namespace is not None else "the user's Jupyter kernel (their variables)"

    async def python(ctx: RunContext[Any], code: str) -> Any:
        """Run Python code; the value of its last expression is returned, with what it prints.

        Args:
            code: Python statements, as in a notebook cell.
        """
        _ran_here.add(ctx.call_id)
        job = _Job(code, namespace if namespace is not None else _user_namespace(), _restarted(ctx))
        try:
            value = await asyncio.wait_for(asyncio.wrap_future(job.future), timeout)
        except asyncio.TimeoutError:
            stopped = await job.stop()
            note = "the code was stopped" if stopped else (
                "the code could not be stopped (blocked outside Python) and still runs in the kernel")
            raise ModelRetry(job.answer(error=f"timed out after {timeout:g} s: {note}")) from None
        except asyncio.CancelledError:
            job.interrupt()
            raise
        return job.answer(value)

    description = (f"Run Python code in {where}, like a notebook cell. Variables persist between calls. "
                   "Returns what it prints and the value of its last expression.")
    return Tool.from_function(python, description=description, requires_approval=requires_approval,
                              sequential=True)
