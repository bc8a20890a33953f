"""`python_tool`: a tool named ``python`` that runs the model's code in the kernel.

Owns the tool: its options, the note that says an earlier call's variables are gone, and the
answer the model reads (what the code printed, its value or its error, why it stopped). Where the
code runs: `_python_run` (in this kernel, on its main thread, the way the kernel runs a cell) or
`_python_kernel` (a Jupyter kernel of its own, ``kernel=``). Imports the run's `tool_output` (how a
value becomes text, a table or an image).

Which namespace ran a thread's last call is written in the namespace itself (`MARK`): it goes
with the variables (a kernel restart, ``%reset``, a fresh ``namespace=`` dict), so the note is
given exactly when those variables are gone, and nothing outlives the namespace.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from html import escape
from typing import Any

from .._run.execute import tool_output
from ..exceptions import ModelRetry, UserError
from ..messages import ToolResultMessage
from ..tools import RunContext, Tool
from ._python_run import MAX_CAPTURE_CHARS, MAX_TRACEBACK_CHARS, NOTHING, Outcome, Rich, run_here

__all__ = ["MARK", "MAX_CAPTURE_CHARS", "MAX_TRACEBACK_CHARS", "RESTARTED_NOTE", "python_tool"]

MARK = "__nbagent_python__"
"""The name, in the namespace the code runs in, of ``{thread: its last python call that ran
there}`` (hidden from ``%who``, like every name that starts with ``_``)."""
RESTARTED_NOTE = ("earlier python calls of this thread ran in a namespace that is gone (a kernel since "
                  "restarted, another process, a reset): the variables they made are gone; run their code "
                  "again if you need them")


def _user_namespace() -> dict[str, Any]:
    """The kernel's globals: the running IPython shell's ``user_ns``, else ``__main__``'s."""
    ipython = sys.modules.get("IPython")
    if ipython is not None:
        shell = ipython.get_ipython()
        if shell is not None:
            return shell.user_ns
    import __main__

    return __main__.__dict__


def _answer(outcome: Outcome, note: str | None, error: str | None = None) -> Any:
    """What the model gets: the printed text, then the value (or the error)."""
    parts = [(label, text) for label, text in
             (("note", note or ""), ("stdout", outcome.out), ("stderr", outcome.err)) if text]
    images: list[Any] = []
    html = None
    if error is not None:
        parts.append(("error", error))
    elif outcome.value is not NOTHING and outcome.value is not None:
        output = tool_output(outcome.value)
        parts.append(("value", output.content))
        images, html = output.images, (output.display or {}).get("text/html")
    if outcome.figures:
        images = [*tool_output(outcome.figures).images, *images]
    if not parts and images:
        parts.append(("figures", f"{len(images)} figure(s), sent as images"))
    if not parts:
        return "(no output)"
    text = parts[0][1].rstrip() if len(parts) == 1 else "\n".join(f"[{label}]\n{t.rstrip()}" for label, t in parts)
    if images:
        return [text, *images]
    if html is not None:
        return Rich(text, "".join(f"<pre>{escape(t)}</pre>" for _, t in parts[:-1]) + html)
    return text


def _restarted(ctx: RunContext[Any], marks: dict[str, str]) -> str | None:
    """`RESTARTED_NOTE` when the thread's last ``python`` call that ran did not run in this
    namespace (`marks`: the first call after a restart says so; the next ones follow one that
    ran here)."""
    for message in reversed(ctx.messages):
        if isinstance(message, ToolResultMessage) and message.name == "python" and message.status in ("done", "failed"):
            return None if marks.get(ctx.thread or "") == message.call_id else RESTARTED_NOTE
    return None


def python_tool(
    *, timeout: float | None = 30.0, namespace: dict[str, Any] | None = None,
    requires_approval: bool | Callable[[Any], bool] = True, kernel: str | None = None,
) -> Tool:
    """A tool named ``python`` that runs the model's Python code in this kernel.

    ```python
    agent = Agent(model, tools=[python_tool()])
    ```

    **Approving a call approves code.** The code runs with the kernel's full rights: it can read
    and change your variables and files, use the network, and install or delete anything you
    could. By default every call waits for a person (the view shows the code; "Edit" changes it).
    ``requires_approval=False`` runs whatever the model writes.

    Each call runs like a cell, on the kernel's main thread: its statements, then its last
    expression, whose value is the result (a DataFrame as a table, a matplotlib figure as an
    image). While it runs the kernel is busy, as during a cell (other cells wait); code that
    awaits (top-level ``await``) leaves the kernel free while it waits. What the code prints to
    stdout and stderr is captured and returned with it; other threads' output (the user's own,
    threads the code starts) is not. An exception's traceback (shortened) goes back to the model
    as an error result. The notebook's Interrupt button stops the code as it stops a cell: the
    model reads ``KeyboardInterrupt`` and the run goes on.

    Calls are recorded in the thread's ledger like any tool: a call is never run twice, and one
    that was running when the kernel died is answered as interrupted, never re-run. Variables
    the code made live in the kernel and are gone after a restart: the first call after one
    starts with a note saying so (``[note]``), so the model does not count on them.

    Args:
        timeout: seconds a call may run (None: no limit). At the deadline the code is stopped
            as the Interrupt button stops a cell (a blocking ``time.sleep`` or read included) and
            the tool answers "timed out after N s". Code that catches the stop runs on: the
            answer says what became of it (it still runs in the kernel, and a restart ends it).
        namespace: a dict the code runs in instead of the kernel's globals (IPython's
            ``user_ns``, else ``__main__``); variables persist in it between calls.
        requires_approval: True (default), False, or a function of the arguments.
        kernel: the name of an installed Jupyter kernel (``"python3"``) to run the code in a
            kernel of its own, a separate process started on the first call and kept for the
            next ones: the code cannot see or change your variables, and this kernel stays free
            while it runs. Past the timeout that kernel is interrupted, and restarted if the code
            does not stop. None (default): this kernel.
    """
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise UserError(f"python_tool: timeout must be a positive number of seconds or None, got {timeout!r}")
    if namespace is not None and not isinstance(namespace, dict):
        raise UserError(f"python_tool: namespace must be a dict, got {type(namespace).__name__}")
    if kernel is not None:
        return _in_kernel(kernel, timeout, namespace, requires_approval)

    async def python(ctx: RunContext[Any], code: str) -> Any:
        """Run Python code; the value of its last expression is returned, with what it prints.

        Args:
            code: Python statements, as in a notebook cell.
        """
        ns = namespace if namespace is not None else _user_namespace()
        marks = ns.get(MARK)
        if not isinstance(marks, dict):
            marks = ns[MARK] = {}
        note = _restarted(ctx, marks)
        outcome = await run_here(code, ns, timeout)
        marks[ctx.thread or ""] = ctx.call_id  # ran here: the variables it made are in this namespace
        return _result(outcome, note, timeout)

    where = "a namespace of its own" if namespace is not None else "the user's Jupyter kernel (their variables)"
    return _tool(python, where, requires_approval)


def _in_kernel(name: str, timeout: float | None, namespace: dict[str, Any] | None,
               requires_approval: bool | Callable[[Any], bool]) -> Tool:
    """`python_tool` running its code in a Jupyter kernel of its own."""
    if not isinstance(name, str) or not name:
        raise UserError(f"python_tool: kernel must be the name of a Jupyter kernel, such as 'python3', got {name!r}")
    if namespace is not None:
        raise UserError("python_tool: namespace= and kernel= do not go together (the kernel has its own variables)")
    from ._python_kernel import Kernel, check_kernel_name

    try:
        check_kernel_name(name)
    except Exception as exc:
        raise UserError(f"python_tool: no Jupyter kernel named {name!r} ({exc})") from None
    kernel = Kernel(name)

    async def python(ctx: RunContext[Any], code: str) -> Any:
        """Run Python code; the value of its last expression is returned, with what it prints.

        Args:
            code: Python statements, as in a notebook cell.
        """
        marks = kernel.marks  # a restart during the call starts a new dict: this call's variables are gone
        note = _restarted(ctx, marks)
        outcome = await kernel.run(code, timeout)
        marks[ctx.thread or ""] = ctx.call_id
        return _result(outcome, note, timeout)

    return _tool(python, f"a Jupyter kernel of its own ({name})", requires_approval, own_kernel=True)


def _result(outcome: Outcome, note: str | None, timeout: float | None) -> Any:
    if outcome.timed_out is not None:
        raise ModelRetry(_answer(outcome, note, f"timed out after {timeout:g} s: {outcome.timed_out}"))
    if outcome.error is not None:
        raise ModelRetry(_answer(outcome, note, outcome.error))
    return _answer(outcome, note)


def _tool(python: Callable[..., Any], where: str, requires_approval: bool | Callable[[Any], bool],
          own_kernel: bool = False) -> Tool:
    description = (f"Run Python code in {where}, like a notebook cell. Variables persist between calls. "
                   "Returns what it prints and the value of its last expression. Top-level `await` works")
    description += "." if own_kernel else (
        ": the code runs on the notebook's main thread, so for slow I/O prefer `await` (an async "
        "client, `await asyncio.to_thread(fn)`): the notebook stays responsive while it waits.")
    return Tool.from_function(python, description=description, requires_approval=requires_approval,
                              sequential=True)
