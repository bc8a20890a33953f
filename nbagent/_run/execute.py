"""Running one tool call: binding its arguments, calling it, and turning what it returned (or
raised) into the `ToolResultMessage` the model sees.

Owns `execute` and `tool_output` (with its text-only twin `tool_result_text`): the one place that
turns a tool's return value into what the model reads (``content``), the images it is sent
(``images``) and what only the view shows (``display``, a sanitized ``_repr_html_``). Pandas,
PIL and matplotlib are never imported: their objects are recognised by duck typing. Imports
approvals, exceptions, messages, `display.sanitize`, tools and the run state; no store: the loop
records each result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..approvals import Decision
from ..context import CHARS_PER_TOKEN, chars_for, cut_result
from ..display.sanitize import rich_html
from ..exceptions import ModelRetry
from ..messages import Image, ToolCall, ToolCallStatus, ToolResultMessage, clean_text
from ..tools import RunContext, Tool

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from .state import RunState

    ResultCheck = Callable[[ToolCall, str, Any], Awaitable[tuple[str, str | None]]]
    """``check(call, text, args) -> (text, None | "rewrite" | "block")``."""

__all__ = ["MAX_DISPLAY_CHARS", "MAX_RESULT_CHARS", "ToolOutput", "execute", "tool_output", "tool_result_text"]

MAX_RESULT_CHARS = 8_000
"""The longest text rendering of an object the model is sent (a DataFrame, anything with a
``_repr_html_``, anything shown with ``str``): longer ones are cut, with a note saying how much was
left out. A string or JSON-able value a tool returns is sent whole."""
MAX_DISPLAY_CHARS = 300_000
"""The largest ``_repr_html_`` kept for the view (after sanitizing); bigger ones are shown as text."""
FRAME_ROWS = 30
"""A DataFrame / Series is sent as ``to_string()`` of at most this many rows (first and last
halves, with its shape), at most `FRAME_COLUMNS` columns and 50 characters per cell."""
FRAME_COLUMNS = 20


class ToolOutput(NamedTuple):
    """What a tool's return value becomes (see `tool_output`)."""

    content: str
    """The text the model reads."""
    images: list[Image]
    """Images sent to the model with it (see `ToolResultMessage.images`)."""
    display: dict[str, str] | None
    """A MIME bundle for the view only (``text/html``), or None."""


def tool_result_text(value: Any) -> str:
    """The text the model reads for a tool's return value (`tool_output`'s ``content``)."""
    return tool_output(value).content


def tool_output(value: Any, limit: int | None = MAX_RESULT_CHARS) -> ToolOutput:
    """Turn what a tool returned into what the model and the view get. Never raises.

    `limit`: where a rendering of an object (not a string) is cut (None: never; the run loop
    cuts every result to the model's window itself, keeping the whole, see `execute`).

    - a string: sent as it is;
    - an `Image`, a matplotlib figure, a PIL image (anything `Image.of` takes but bytes and
      paths), or a list of strings and such images: the strings joined by blank lines, the images
      in ``images`` (an image alone is described in the text, ``[image: image/png, 12 kB]``);
    - an object with ``_repr_html_`` (a pandas DataFrame, a Styler): its sanitized HTML in
      ``display`` for the view; the model gets ``to_string()`` (`FRAME_ROWS` rows, the shape), or
      the JSON / ``str`` form, cut at `MAX_RESULT_CHARS`;
    - an object with ``to_string`` (a pandas Series): that, as above, cut at `MAX_RESULT_CHARS`;
    - anything else: JSON (a pydantic model's ``model_dump_json``), else ``str(value)`` cut at
      `MAX_RESULT_CHARS`.
    """
    if isinstance(value, str):
        return ToolOutput(value, [], None)
    parts = _parts(value)
    if parts is not None:
        texts = [p for p in parts if isinstance(p, str)]
        images = [p for p in parts if isinstance(p, Image)]
        text = "\n\n".join(texts) or "\n".join(f"[image: {i.describe()}]" for i in images)
        return ToolOutput(text, images, None)
    html = _repr_html(value)
    if html is not None:
        return ToolOutput(_cut(_frame_text(value), limit), [], {"text/html": html})
    if callable(getattr(value, "to_string", None)) and not callable(getattr(value, "model_dump_json", None)):
        return ToolOutput(_cut(_frame_text(value), limit), [], None)  # a Series, a frame without HTML
    return ToolOutput(_json_text(value, limit), [], None)


def _image(value: Any) -> Image | None:
    """`value` as an image, if it is one (not bytes or a path: a tool's bytes are data, not a picture)."""
    if isinstance(value, Image):
        return value
    if isinstance(value, (str, bytes, bytearray, memoryview, os.PathLike)):
        return None
    if callable(getattr(value, "savefig", None)) or any(
        callable(getattr(value, name, None)) for name in ("_repr_png_", "_repr_jpeg_")
    ):
        try:
            return Image.of(value)
        except Exception:  # InvalidPromptError or a broken converter: not after all: shown as an object
            return None
    return None


def _parts(value: Any) -> list[str | Image] | None:
    """A value of text and images as its parts; None when it holds no image (a list of strings
    stays a JSON list, as before)."""
    single = _image(value)
    if single is not None:
        return [single]
    if not isinstance(value, (list, tuple)) or not value:
        return None
    parts: list[str | Image] = []
    for item in value:
        if isinstance(item, str):
            parts.append(item)
            continue
        image = _image(item)
        if image is None:
            return None
        parts.append(image)
    return parts if any(isinstance(p, Image) for p in parts) else None


def _repr_html(value: Any) -> str | None:
    method = getattr(value, "_repr_html_", None)
    if not callable(method) or isinstance(value, type):
        return None
    try:
        html = method()
        if isinstance(html, tuple):  # (html, metadata)
            html = html[0]
        cleaned = rich_html(html)
    except Exception:  # a broken _repr_html_ must not turn a tool's success into an error
        return None
    if cleaned is None or len(cleaned) > MAX_DISPLAY_CHARS:
        return None
    return cleaned


def _frame_text(value: Any) -> str:
    """A DataFrame's (or Series') compact ``to_string``; the JSON / str form of anything else."""
    to_string = getattr(value, "to_string", None)
    if callable(to_string):
        for kwargs in (
            {"max_rows": FRAME_ROWS, "min_rows": FRAME_ROWS, "max_cols": FRAME_COLUMNS,
             "max_colwidth": 50, "show_dimensions": True},  # DataFrame
            {"max_rows": FRAME_ROWS, "min_rows": FRAME_ROWS, "length": True, "name": True, "dtype": True},  # Series
            {},
        ):
            try:
                text = to_string(**kwargs)
            except Exception:  # another signature (a Styler...): try the next one
                continue
            if isinstance(text, str):
                return text
    return _json_text(value)


def _json_text(value: Any, limit: int | None = MAX_RESULT_CHARS) -> str:
    dump = getattr(value, "model_dump_json", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return str(dump())
        except Exception:
            pass
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        from pydantic_core import to_json

        try:
            text = to_json(value, fallback=str).decode()
            if not text.startswith('"'):
                return text  # JSON of dataclasses, sets, dates... in a structure
        except Exception:
            pass
        try:  # the object as a whole has no JSON form: its text, not a quoted JSON string
            return _cut(str(value), limit)
        except Exception:
            return f"<{type(value).__name__} object>"


async def _checked(check: ResultCheck, call: ToolCall, edited: dict[str, Any] | None, content: str,
                   output: ToolOutput, is_error: bool,
                   status: ToolCallStatus) -> tuple[str, ToolOutput, bool, ToolCallStatus]:
    """A result after the tool-result guards: rewritten, or withheld (an error result); what only
    the view would show (a table's HTML, images) is dropped with it."""
    content, changed = await check(call, content, edited if edited is not None else call.args)
    if changed is None:
        return content, output, is_error, status
    if changed == "block":
        is_error, status = True, "failed"
    return content, ToolOutput(content, [], None), is_error, status


def _cut(text: str, limit: int | None = MAX_RESULT_CHARS) -> str:
    if limit is None or len(text) <= limit:
        return text
    return (text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown: "
            f"the result was cut to {limit:,} characters)")


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


def _context(run: RunState, call: ToolCall) -> RunContext[Any]:
    """The `RunContext` a tool that takes one is given for `call`."""
    stored = run.stored
    return RunContext(state=stored.state, run_id=run.run_id, thread=stored.id, step=stored.step,
                      messages=stored.messages, call_id=call.id)


async def execute(
    run: RunState, call: ToolCall, tool: Tool, validated: Any, edited: dict[str, Any] | None,
    decision: Decision | None, cap: int | None = None, count: Callable[[str], int] | None = None,
    check: ResultCheck | None = None,
) -> ToolResultMessage:
    """Run one tool call and return its result; a raising tool gives an error result. `edited`:
    the arguments a person edited (recorded on the result, whose text stays the tool's own).
    `cap`: the most characters of the result the model reads (`RunConfig.result_cap`); a longer
    result is cut as head + tail and kept whole in ``full_content``; with `count` (the model's
    token counter), `cap` is ``tokens * CHARS_PER_TOKEN`` and the result keeps as many characters
    as hold those tokens (fewer for a dense table of numbers). None: objects' renderings are cut at
    `MAX_RESULT_CHARS` (kept whole too), strings are sent whole. `check`: the agent's tool-result
    guards (`guarding.RunGuards.result_check`), run on the whole text before it is cut, kept or
    read: a rewrite replaces it, a block withholds it (an error result); either way what only the
    view would have shown (a table's HTML, images) goes too."""
    clock = time.perf_counter()
    ctx = _context(run, call) if tool.takes_ctx else None
    status: ToolCallStatus
    try:
        fn = tool.bind(validated, ctx)
        if run.work.wrap_tool is not None:
            fn = run.work.wrap_tool(call, fn, tool.is_async)
        if tool.is_async:
            value = await fn()
        else:
            # A thread cannot be interrupted: the run may be stopped while the function goes on.
            # `run.work.blocking` keeps the thread's own future (which outlives a cancelled await) so
            # the run can say so, and record the real outcome when the function returns (see
            # `late.answer_open_calls`). The same cost as asyncio.to_thread: no extra loop hop.
            work = _tool_threads().submit(contextvars.copy_context().run, fn)
            run.work.blocking[call.id] = work
            try:
                value = await asyncio.wrap_future(work)
            finally:
                if work.done():  # kept only while the thread outlives a cancelled await
                    run.work.blocking.pop(call.id, None)
        output, is_error, status = tool_output(value, None), False, "done"
        if cap is None and not isinstance(value, str):
            cap, count = MAX_RESULT_CHARS, None
    except ModelRetry as exc:
        output, is_error, status = ToolOutput(exc.message, [], None), True, "failed"
    except asyncio.CancelledError:
        cancelling = getattr(asyncio.current_task(), "cancelling", None)
        if cancelling is None or cancelling():
            raise  # the run (or this call) is being cancelled
        # The tool's own code raised it (e.g. it awaited something cancelled elsewhere):
        # an error result, not a hung or aborted run.
        output, is_error, status = ToolOutput("CancelledError: the tool's work was cancelled", [], None), True, "failed"
    except Exception as exc:
        output, is_error, status = ToolOutput(f"{type(exc).__name__}: {exc}", [], None), True, "failed"
    except (KeyboardInterrupt, SystemExit) as exc:
        # Raised by the tool's own code (sys.exit(), an argparse error): a real Ctrl-C reaches the
        # run as a cancellation, not here. An error result, never a dead loop or an open call.
        output = ToolOutput(f"{type(exc).__name__}: {exc} (raised by the tool)", [], None)
        is_error, status = True, "failed"
    content = clean_text(output.content)
    if check is not None:
        content, output, is_error, status = await _checked(check, call, edited, content, output, is_error, status)
    if cap is not None and count is not None and len(content) > cap // 4:
        cap = chars_for(content, int(cap / CHARS_PER_TOKEN), count)
    cut = None if cap is None else cut_result(content, cap, call.id)
    result = ToolResultMessage(call_id=call.id, name=call.name, content=content if cut is None else cut,
                               is_error=is_error, status=status, duration_s=time.perf_counter() - clock,
                               images=output.images, display=output.display, edited_args=edited,
                               full_content=None if cut is None else content)
    if decision is not None:
        decision.stamp(result)
    return result
