"""Running one tool call: binding its arguments, calling it, and turning what it returned (or
raised) into the `ToolResultMessage` the model sees.

Owns `execute` and `tool_result_text`. Imports approvals, exceptions, messages, tools and the run
state; no store: the loop records each result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import os
import time
from typing import TYPE_CHECKING, Any

from .approvals import Decision
from .exceptions import ModelRetry
from .messages import ToolCall, ToolResultMessage, clean_text
from .tools import RunContext, Tool

if TYPE_CHECKING:
    from ._state import RunState

__all__ = ["execute", "tool_result_text"]


def tool_result_text(value: Any) -> str:
    """How a tool's return value is shown to the model: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    dump = getattr(value, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        from pydantic_core import to_json

        try:
            return to_json(value, fallback=str).decode()
        except Exception:
            return str(value)


_threads: concurrent.futures.ThreadPoolExecutor | None = None


def _tool_threads() -> concurrent.futures.ThreadPoolExecutor:
    """The worker threads of sync tools (one pool per process, made on first use, again after a
    fork; sized like asyncio's default executor)."""
    global _threads
    if _threads is None:
        _threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="nbagent-tool")
    return _threads


def _forget_threads() -> None:
    global _threads
    _threads = None


os.register_at_fork(after_in_child=_forget_threads)


async def execute(
    run: RunState, call: ToolCall, tool: Tool, validated: Any, note: str | None, decision: Decision | None
) -> ToolResultMessage:
    """Run one tool call and return its result; a raising tool gives an error result."""
    clock = time.perf_counter()
    ctx = None
    if tool.takes_ctx:
        ctx = RunContext(run.state, run.run_id, run.thread, run.thread_step, run.messages, call.id)
    try:
        fn = tool.bind(validated, ctx)
        if tool.is_async:
            value = await fn()
        else:
            # A thread cannot be interrupted: the run may be stopped while the function goes on.
            # `run.blocking` keeps the thread's own future (which outlives a cancelled await) so
            # the run can say so, and record the real outcome when the function returns (see
            # `_loop._answer_open_calls`). The same cost as asyncio.to_thread: no extra loop hop.
            work = _tool_threads().submit(contextvars.copy_context().run, fn)
            run.blocking[call.id] = work
            try:
                value = await asyncio.wrap_future(work)
            finally:
                if work.done():  # kept only while the thread outlives a cancelled await
                    run.blocking.pop(call.id, None)
        content, is_error, status = tool_result_text(value), False, "done"
    except ModelRetry as exc:
        content, is_error, status = exc.message, True, "failed"
    except asyncio.CancelledError:
        cancelling = getattr(asyncio.current_task(), "cancelling", None)
        if cancelling is None or cancelling():
            raise  # the run (or this call) is being cancelled
        # The tool's own code raised it (e.g. it awaited something cancelled elsewhere):
        # an error result, not a hung or aborted run.
        content, is_error, status = "CancelledError: the tool's work was cancelled", True, "failed"
    except Exception as exc:
        content, is_error, status = f"{type(exc).__name__}: {exc}", True, "failed"
    except (KeyboardInterrupt, SystemExit) as exc:
        # Raised by the tool's own code (sys.exit(), an argparse error): a real Ctrl-C reaches the
        # run as a cancellation, not here. An error result, never a dead loop or an open call.
        content, is_error, status = f"{type(exc).__name__}: {exc} (raised by the tool)", True, "failed"
    content = clean_text(content)
    if note:
        content = note + content
    result = ToolResultMessage(call.id, call.name, content, is_error, status,  # type: ignore[arg-type]
                               time.perf_counter() - clock)
    if decision is not None:
        decision.stamp(result)
    return result
