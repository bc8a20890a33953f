"""Static HTML for runs: what ``display(result)`` shows, and the HTML pieces the live view reuses.

Owns `render_result_html` (called by `RunResult._repr_html_`) and the small HTML builders for
messages, tool-call rows and usage. Output uses inline styles only and no JavaScript, so it reads
the same in JupyterLab, Notebook 7, a saved notebook on GitHub and nbviewer. Every piece of model
text, tool arguments and tool results goes through `_sanitize` (Markdown) or is escaped.

A core module: imports the core's data shapes and `_sanitize`, never ipywidgets or the edge, so
``RunResult._repr_html_`` points downward and a saved ``RunResult`` renders without a widget
front end. The live view (`nbagent.widgets`) reuses these builders.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._sanitize import escape, markdown_html
from .messages import IMAGE_TYPES, call_results

if TYPE_CHECKING:
    from .approvals import PendingCall
    from .messages import Message
    from .result import RunResult
    from .usage import Usage

__all__ = [
    "STATUS_STYLE",
    "expandable",
    "messages_html",
    "pretty_args",
    "reasoning_html",
    "render_result_html",
    "status_badge",
    "tool_row_html",
    "usage_html",
]

FONT = "font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;line-height:1.45"
MONO = "font-family:var(--jp-code-font-family,monospace);font-size:12px"
BORDER = "1px solid var(--jp-border-color2,#ddd)"
MUTED = "color:var(--jp-ui-font-color2,#666)"

STATUS_STYLE: dict[str, tuple[str, str]] = {
    # status -> (label shown, background colour)
    "queued": ("queued", "#9e9e9e"),
    "needs approval": ("needs approval", "#e67e00"),
    "needs answer": ("needs answer", "#e67e00"),
    "running": ("running", "#1e6fd9"),
    "done": ("done", "#2e7d32"),
    "failed": ("failed", "#c62828"),
    "denied": ("denied", "#7b1fa2"),
    "cancelled": ("cancelled", "#616161"),
    "interrupted": ("interrupted", "#8d6e63"),
    # a blocking tool whose run was stopped goes on in its thread; then it really ends
    "still running": ("still running", "#8d6e63"),
    "done after stop": ("done after stop", "#2e7d32"),
    "failed after stop": ("failed after stop", "#c62828"),
    "waiting": ("waiting", "#e67e00"),
}

PREVIEW_CHARS = 120
"""Arguments and results longer than this are shown truncated, the rest behind an expander."""
MAX_CHARS = 20_000
"""Beyond this, text is cut even in the expanded view (keeps widget traffic and outputs bounded)."""

# Column widths of the tool table; the live view uses the same so rows line up.
COLUMNS = (("tool", "16%"), ("arguments", "32%"), ("status", "12%"), ("result", "32%"), ("time", "8%"))


def pretty_args(args: Any) -> str:
    """Tool arguments as indented JSON (a raw string, e.g. invalid JSON from a model, as is)."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return args
    try:
        return json.dumps(args, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(args)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown)"


def expandable(
    text: str | None, *, limit: int = PREVIEW_CHARS, full: bool = False, error: bool = False
) -> str:
    """Escaped text in a monospace block; when longer than `limit`, a one-line preview that
    expands (``<details>``, no JavaScript) to the whole text. `full` shows everything at once."""
    if text is None or text == "":
        return f'<span style="{MUTED}">-</span>'
    colour = "color:#c62828;" if error else ""
    pre = f'style="{MONO};{colour}white-space:pre-wrap;word-break:break-word;margin:0"'
    if full or len(text) <= limit:
        return f"<pre {pre}>{escape(_cut(text, MAX_CHARS))}</pre>"
    one_line = " ".join(text.split())
    preview = one_line[: limit - 1] + "…"
    return (
        f'<details><summary style="cursor:pointer;{MONO};{colour}word-break:break-word">'
        f"{escape(preview)}</summary><pre {pre}>{escape(_cut(text, MAX_CHARS))}</pre></details>"
    )


def status_badge(status: str) -> str:
    """A coloured label for a tool call's status."""
    label, colour = STATUS_STYLE.get(status, (status, "#9e9e9e"))
    return (
        f'<span style="background:{colour};color:#fff;border-radius:8px;padding:1px 7px;'
        f'font-size:11px;white-space:nowrap">{escape(label)}</span>'
    )


def _colgroup() -> str:
    return "<colgroup>" + "".join(f'<col style="width:{w}">' for _, w in COLUMNS) + "</colgroup>"


def table_header_html() -> str:
    """The header of a tool table, as its own table with the shared column widths."""
    cells = "".join(
        f'<th style="text-align:left;padding:3px 6px;{MUTED};font-weight:600">{name}</th>'
        for name, _ in COLUMNS
    )
    return (
        f'<table style="{FONT};width:100%;table-layout:fixed;border-collapse:collapse;'
        f'border-bottom:{BORDER}">{_colgroup()}<tr>{cells}</tr></table>'
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def tool_row_html(
    name: str,
    args: Any,
    status: str,
    result: str | None = None,
    *,
    is_error: bool = False,
    duration_s: float | None = None,
    full_args: bool = False,
    elapsed_s: float | None = None,
) -> str:
    """One tool call as a one-row table (tool, arguments, status, result or error, duration).
    `elapsed_s`: the call is still going and has run this long; its time is a
    ``<span class="nbagent-tick" data-elapsed>`` that the live view's front end counts up."""
    td = f'style="padding:3px 6px;vertical-align:top;border-bottom:{BORDER};overflow-wrap:anywhere"'
    if elapsed_s is not None:
        time_cell = (f'<span class="nbagent-tick" data-elapsed="{elapsed_s:.3f}" style="{MUTED}">'
                     f"{escape(_duration(elapsed_s))}</span>")
    else:
        time_cell = f'<span style="{MUTED}">{escape(_duration(duration_s))}</span>'
    return (
        f'<table style="{FONT};width:100%;table-layout:fixed;border-collapse:collapse">{_colgroup()}<tr>'
        f'<td {td}><code style="{MONO}">{escape(name)}</code></td>'
        f"<td {td}>{expandable(pretty_args(args), full=full_args)}</td>"
        f"<td {td}>{status_badge(status)}</td>"
        f"<td {td}>{expandable(result, error=is_error)}</td>"
        f"<td {td}>{time_cell}</td>"
        "</tr></table>"
    )


MAX_INLINE_IMAGE_BYTES = 512 * 1024
"""Images up to this size are shown as thumbnails (embedded as ``data:`` URLs, so they are saved
with the notebook); bigger ones, and URL images (never fetched by the view), are shown as labels."""


def image_html(image: Any) -> str:
    """A thumbnail of a prompt's `Image`: an ``<img>`` with a ``data:`` URL for a small image whose
    bytes were checked to be PNG / JPEG / GIF / WebP (a browser runs nothing in those), else an
    escaped label. A URL image is never loaded by the view (no request to an address from the data)."""
    data = getattr(image, "data", None)
    if data is not None and len(data) <= MAX_INLINE_IMAGE_BYTES and image.media_type in IMAGE_TYPES:
        return (
            f'<img src="{escape(image.data_url())}" alt="{escape(image.describe())}" '
            'style="max-width:240px;max-height:180px;margin:4px 6px 0 0;border-radius:4px;'
            f'border:{BORDER};vertical-align:top">'
        )
    return f'<span style="{MUTED};font-size:12px;margin-right:6px">[image: {escape(image.describe())}]</span>'


def user_html(text: str, note: str | None = None, images: Sequence[Any] = ()) -> str:
    """A user message bubble (escaped, line breaks kept), with its images (`image_html`). `note`
    is shown next to "you" (the live view marks a message that waits to be sent "queued"); a noted
    bubble has a dashed border."""
    label = "you" + (f" · {escape(note)}" if note else "")
    border = "border:1px dashed var(--jp-border-color1,#bbb);" if note else ""
    pictures = f'<div>{"".join(image_html(i) for i in images)}</div>' if images else ""
    return (
        f'<div style="{FONT};margin:6px 0;padding:6px 10px;border-radius:8px;{border}'
        f'background:var(--jp-layout-color2,#eef3fb);white-space:pre-wrap;word-break:break-word">'
        f'<span style="{MUTED};font-size:11px">{label}</span><br>{escape(text)}{pictures}</div>'
    )


def reasoning_html(reasoning: str | None) -> str:
    """A model's reasoning as a closed "Thinking" ``<details>`` (escaped plain text, never HTML;
    cut at `MAX_CHARS`). Empty string when there is none."""
    if not reasoning:
        return ""
    return (
        f'<details class="nbagent-thinking" style="{FONT};{MUTED};font-size:12px;margin:4px 0">'
        f'<summary style="cursor:pointer">Thinking</summary>'
        f'<div style="white-space:pre-wrap;word-break:break-word;margin:4px 0 0 0;padding:4px 8px;'
        f'border-left:{BORDER}">{escape(_cut(reasoning, MAX_CHARS))}</div></details>'
    )


def assistant_html(text: str | None, refusal: str | None = None) -> str:
    """An assistant answer: Markdown rendered and sanitized."""
    body = markdown_html(text)
    if refusal:
        body += f'<p style="color:#c62828">refused: {escape(refusal)}</p>'
    if not body:
        return ""
    return f'<div style="{FONT};margin:6px 0;word-break:break-word">{body}</div>'


def usage_html(usage: Usage, *, token_budget: int | None = None, cost_budget: float | None = None,
               label: str = "run") -> str:
    """One line: tokens (input / cached / output), cost, and budget use when budgets are set."""
    parts = [
        f"{escape(label)}: {usage.requests} model call{'s' if usage.requests != 1 else ''}",
        f"tokens in {usage.input_tokens:,} · cached {usage.cache_read_tokens:,} "
        f"· out {usage.output_tokens:,}",
        "cost " + (f"${usage.cost_total:.4f}" if usage.cost_total is not None else "n/a"),
    ]
    if token_budget:
        used = usage.total_tokens
        parts.append(f"token budget {used:,} / {token_budget:,} ({100 * used / token_budget:.0f}%)")
    if cost_budget:
        spent = usage.cost_total or 0.0
        parts.append(f"cost budget ${spent:.4f} / ${cost_budget:.4f} ({100 * spent / cost_budget:.0f}%)")
    return f'<div style="{FONT};{MUTED};font-size:12px">' + " | ".join(parts) + "</div>"


def messages_html(messages: Sequence[Message], *, skip_call_ids: Iterable[str] = ()) -> str:
    """A conversation as static HTML: user bubbles, each answer's reasoning as a closed "Thinking"
    section (escaped), answers as Markdown, and each answer's tool
    calls as a table with their results (matched by call id). Calls in `skip_call_ids` are left
    out (the live view shows those as rows with buttons)."""
    skip = set(skip_call_ids)
    results = call_results(messages)
    out: list[str] = []
    for index, m in enumerate(messages):
        if m.kind == "user":
            out.append(user_html(m.content, images=m.images))  # type: ignore[union-attr]
        elif m.kind == "assistant":
            out.append(reasoning_html(m.reasoning))  # type: ignore[union-attr]
            out.append(assistant_html(m.text, m.refusal))  # type: ignore[union-attr]
            calls = [c for c in m.tool_calls if c.id not in skip]  # type: ignore[union-attr]
            if calls:
                rows = [table_header_html()]
                for call in calls:
                    found = results.get((index, call.id))
                    r = found[1] if found is not None else None
                    if r is None:
                        rows.append(tool_row_html(call.name, call.args_json, "queued"))
                    else:
                        rows.append(tool_row_html(call.name, call.args_json, r.status, r.content,
                                                  is_error=r.is_error, duration_s=r.duration_s))
                out.append('<div style="margin:4px 0 8px 0">' + "".join(rows) + "</div>")
    return "".join(out)


def _pending_html(pending: Sequence[PendingCall], thread: str) -> str:
    if not pending:
        return ""
    rows = [table_header_html()]
    for p in pending:
        status = "needs answer" if p.reason == "client" else "needs approval"
        rows.append(tool_row_html(p.name, p.args, status, full_args=True))
    ids = ", ".join(repr(p.id) for p in pending)
    hint = (
        f'<div style="{FONT};{MUTED};font-size:12px;margin-top:4px">continue with '
        f"<code>agent.resume(thread={escape(repr(thread))}, approve=[{escape(ids)}])</code>, "
        "<code>deny={id: reason}</code> or <code>results={id: value}</code>; or "
        f"<code>agent.chat(thread={escape(repr(thread))})</code> for buttons</div>"
    )
    return '<div style="margin:6px 0">' + "".join(rows) + hint + "</div>"


def _usage_table(usage: Usage) -> str:
    if not usage.calls:
        return ""
    th = f'style="text-align:right;padding:2px 6px;{MUTED};font-weight:600"'
    td = 'style="text-align:right;padding:2px 6px"'
    names = ("step", "model", "input", "cached", "output", "cost", "latency")
    head = "".join(f"<th {th}>{h}</th>" for h in names)
    body = []
    for row in usage.calls:
        cost = f"${row.cost_total:.5f}" if row.cost_total is not None else "n/a"
        cells = (row.step, row.model, f"{row.input_tokens:,}", f"{row.cache_read_tokens:,}",
                 f"{row.output_tokens:,}", cost, _duration(row.latency_s))
        body.append("<tr>" + "".join(f"<td {td}>{escape(c)}</td>" for c in cells) + "</tr>")
    return (
        f'<details style="{FONT};font-size:12px">'
        f'<summary style="cursor:pointer;{MUTED}">model calls</summary>'
        f'<table style="border-collapse:collapse"><tr>{head}</tr>{"".join(body)}</table></details>'
    )


def render_result_html(result: RunResult) -> str:
    """The static HTML summary of a run (``display(result)``): status, the run's messages and
    tool calls, pending calls, and usage. Inline styles only, no JavaScript."""
    status = result.status
    colour = {"completed": "#2e7d32", "paused": "#e67e00", "failed": "#c62828"}.get(status, "#616161")
    head = (
        f'<div style="{FONT};margin-bottom:6px"><b style="color:{colour}">{escape(status)}</b>'
        f'<span style="{MUTED}"> · thread <code>{escape(result.thread)}</code> · {result.steps} '
        f"step{'s' if result.steps != 1 else ''}</span>"
    )
    if result.stop_reason:
        head += f'<span style="{MUTED}"> · stopped: {escape(result.stop_reason)}</span>'
    if result.truncated:
        head += '<span style="color:#c62828"> · answer cut off at the output token limit</span>'
    head += "</div>"
    parts = [head]
    earlier = result.messages[: result.new_message_index]
    if earlier:
        parts.append(
            f'<details style="{FONT}"><summary style="cursor:pointer;{MUTED}">{len(earlier)} earlier '
            f"message{'s' if len(earlier) != 1 else ''}</summary>{messages_html(earlier)}</details>"
        )
    pending_ids = [p.id for p in result.pending]
    parts.append(messages_html(result.new_messages, skip_call_ids=pending_ids))
    parts.append(_pending_html(result.pending, result.thread))
    if result.error:
        parts.append(
            f'<div style="{FONT};color:#c62828;white-space:pre-wrap">error: {escape(result.error)}</div>'
        )
    parts.append(usage_html(result.usage))
    parts.append(_usage_table(result.usage))
    return (
        f'<div class="nbagent-result" style="{FONT};border:{BORDER};border-radius:6px;padding:8px 10px;'
        f'max-width:960px">' + "".join(parts) + "</div>"
    )
