"""Static HTML for runs: what ``display(result)`` shows, and the HTML pieces the live view reuses.

Owns `render_result_html` (called by `RunResult._repr_html_`) and the small HTML builders for
messages, tool-call rows (with what a tool returned richly: a DataFrame's table, images; and the
arguments a person edited), client questions and usage. Output uses inline styles only and no
JavaScript, so it reads the same in JupyterLab, Notebook 7, a saved notebook on GitHub and
nbviewer; every table cell, row and code element states the properties JupyterLab's rendered-HTML
CSS would change (alignment, padding, stripes), so no host CSS can misalign it. Colours and fonts
are JupyterLab theme tokens (`nbagent.display.theme`), each declaration written by `theme.css`
after the plain one an untrusted notebook keeps; text on a coloured label is the theme's own text
colour on a tint, so light, dark and high-contrast themes all read. Answers carry JupyterLab's
Markdown classes. Every piece of model text, tool arguments and tool results goes through
`sanitize` (Markdown, a tool's own HTML) or is escaped.

Part of `nbagent.display` (layer 2): imports the base data shapes, `sanitize` and `theme`, never
ipywidgets or the edge, so a saved ``RunResult`` renders without a widget front end
(``RunResult._repr_html_`` imports it when a notebook asks for HTML). The live view
(`nbagent.widgets`) reuses these builders.

Size: every piece of a run's static HTML lives here, next to the table styles they all share, so
the summary, the live view and the saved copy cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..messages import IMAGE_TYPES, AssistantMessage, call_results
from ..usage import usd
from . import theme
from .reveal import hidden_characters, reveal, reveal_json, revealed_json
from .sanitize import escape, markdown_html
from .sanitize import rich_html as clean_rich_html
from .theme import Token, css, tint

if TYPE_CHECKING:
    from ..approvals import PendingCall
    from ..messages import Message
    from ..result import RunResult
    from ..usage import Usage

__all__ = [
    "STATUS_STYLE",
    "ProviderCall",
    "always_allowed_html",
    "args_html",
    "assistant_html",
    "badge",
    "blocked_html",
    "budget_texts",
    "calls_text",
    "code_html",
    "cost_text",
    "diff_html",
    "expandable",
    "guard_badge",
    "header_html",
    "hidden_badge",
    "image_html",
    "messages_html",
    "pretty_args",
    "provider_calls",
    "question_html",
    "reasoning_html",
    "render_result_html",
    "replayed_answers",
    "replayed_badge",
    "result_row_html",
    "rich_result_html",
    "shown_status",
    "status_badge",
    "subrun_html",
    "tint",
    "tool_row_html",
    "unshown_chars",
    "usage_html",
    "usage_text",
    "user_html",
]

NO_MATH = "mathjax_ignore"
"""The class that keeps JupyterLab's MathJax off an output: it typesets the text between two
"$" as math, so "$5 and $10" in a model's answer would read as an italic formula."""

# The themed declarations the pieces share, each after its plain fallback (`theme.css`).
FONT = f"{css('font-family', theme.UI_FONT)};font-size:13px;line-height:1.45"
SMALL = f"{css('font-family', theme.UI_FONT)};font-size:12px;line-height:1.45"
"""`FONT` at 12px: the muted lines (the header, hints, usage, reasoning)."""
MONO = f"{css('font-family', theme.CODE_FONT)};font-size:12px"
FRAME = css("border", theme.LINE)
RULE_BELOW = css("border-bottom", theme.LINE)
RULE_LEFT = css("border-left", theme.LINE)
MUTED = css("color", theme.MUTED_TEXT)
ERROR = css("color", theme.ERROR)

# Every table piece states what JupyterLab's rendered-HTML CSS (`.jp-RenderedHTMLCommon`, the
# class of a ``text/html`` output) would otherwise change: cells right-aligned and vertically
# centred with 0.5em padding, striped and hovered rows, centred tables, grey inline code. Inline
# styles win over any class rule, so the summary looks the same in JupyterLab, Notebook 7, the
# live view, GitHub and nbviewer.
TABLE = (f"{FONT};width:100%;table-layout:fixed;border-collapse:collapse;border-spacing:0;border:none;"
         "margin:0;background:transparent;color:inherit")
TR = "background:transparent;border:none"
CELL = ("text-align:left;vertical-align:top;padding:3px 6px;line-height:1.45;white-space:normal;"
        "max-width:none;border:none;background:transparent;overflow-wrap:anywhere;word-break:normal")
PRE = (f"{MONO};white-space:pre-wrap;overflow-wrap:anywhere;word-break:normal;margin:0;padding:0;border:none;"
       "background:transparent;color:inherit;line-height:1.45;text-align:left")
CODE = f"{MONO};background:transparent;padding:0;color:inherit"
_HINT_CODE = f"{MONO};color:inherit;{css('background', theme.CHIP)};padding:0 3px;border-radius:3px"
"""Inline code in a hint (a thread id, ``agent.resume(...)``): `CODE` on a chip."""
SCROLL = "max-height:24em;overflow:auto"
"""Long values scroll inside a box of at most 24em, like JupyterLab's scrolled outputs."""
LONG = f"{SCROLL};resize:vertical"
"""An expanded long value: a scroll box the reader may make taller (JupyterLab's scrolled outputs)."""


STATUS_STYLE: dict[str, tuple[str, Token]] = {
    # status -> (label shown, colour: a theme token, `nbagent.display.theme`)
    "queued": ("queued", theme.GREY),
    "needs approval": ("needs approval", theme.WARN),
    "needs answer": ("needs answer", theme.WARN),
    "running": ("running", theme.BRAND),
    "done": ("done", theme.SUCCESS),
    "failed": ("failed", theme.ERROR),
    "denied": ("denied", theme.PURPLE),
    "denied (repeat)": ("denied (repeat)", theme.PURPLE),
    "cancelled": ("cancelled", theme.DARK_GREY),
    "interrupted": ("interrupted", theme.BROWN),
    # how a run ended (the summary's head)
    "completed": ("completed", theme.SUCCESS),
    "paused": ("paused", theme.WARN),
    # a blocking tool whose run was stopped goes on in its thread; then it really ends
    "still running": ("still running", theme.BROWN),
    "done after stop": ("done after stop", theme.SUCCESS),
    "failed after stop": ("failed after stop", theme.ERROR),
    "waiting": ("waiting", theme.WARN),
}

PREVIEW_CHARS = 120
"""Arguments and results longer than this are shown as a one-line preview, the rest behind an expander."""
MAX_CHARS = 20_000
"""Beyond this, text is cut even in the expanded view (keeps widget traffic and outputs bounded)."""
WHOLE_CHARS = 100_000
"""A waiting call's arguments are shown whole up to this many characters (each text: the JSON,
or a ``code`` argument), in a scroll box: what a person approves is what they were shown. Longer
ones are cut here too (`unshown_chars`); the live view then offers Approve only once the editor,
which holds all of them, was opened, and the summary says where to read them."""

# Column widths of the tool table; the live view uses the same so rows line up.
COLUMNS = (("tool", "15%"), ("arguments", "30%"), ("status", "15%"), ("result", "32%"), ("time", "8%"))
"""Wide enough at a notebook's usual width (~730 px) for the longest status pill, "needs approval"."""


def _json_text(args: Any) -> str:
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


def pretty_args(args: Any) -> str:
    """Tool arguments as indented JSON (a raw string, e.g. invalid JSON from a model, as is),
    with every invisible character escaped (`reveal_json`: the JSON still reads as the same
    value, so the editor of a waiting call can hold it).

    >>> print(pretty_args({"path": "a\u202e.txt"}))
    {
      "path": "a\\u202e.txt"
    }
    """
    return reveal_json(_json_text(args))


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown)"


def _shown_texts(args: Any) -> list[str]:
    """The texts a row shows for `args`: a ``code`` argument and the JSON of the others, or the
    JSON of all."""
    with_code = _with_code(args)
    if with_code is None:
        return [pretty_args(args)]
    rest = {k: v for k, v in with_code.items() if k != "code"}
    return [reveal(with_code["code"]), *([pretty_args(rest)] if rest else [])]


def unshown_chars(args: Any) -> int:
    """How many characters of a waiting call's arguments its row leaves out (0: all are shown;
    see `WHOLE_CHARS`)."""
    return sum(max(0, len(text) - WHOLE_CHARS) for text in _shown_texts(args))


def expandable(
    text: str | None, *, limit: int = PREVIEW_CHARS, full: bool = False, error: bool = False,
    label: str | None = None, cut: int = MAX_CHARS,
) -> str:
    """Escaped text in a monospace block; when longer than `limit`, a one-line preview (cut with
    an ellipsis to its column) that expands (``<details>``, no JavaScript) to the text in a
    scroll box of at most 24em (its first `cut` characters, and how many more there are). `full`
    shows it at once (also in a scroll box); `label` replaces the preview (e.g. "text the model
    read")."""
    if text is None or text == "":
        return f'<span style="{MUTED}">-</span>'
    colour = f"{ERROR};" if error else ""
    if (full or len(text) <= limit) and label is None:
        box = LONG if len(text) > limit else SCROLL
        return f'<pre class="nbagent-value" style="{PRE};{colour}{box}">{escape(_cut(text, cut))}</pre>'
    pre = f'style="{PRE};{colour}{LONG}"'
    preview = label if label is not None else " ".join(text.split())[: limit - 1] + "…"
    style = f"{MONO};{colour}" if label is None else f"{SMALL};{MUTED};"
    return (
        f'<details class="nbagent-value"><summary style="cursor:pointer;{style}white-space:nowrap;overflow:hidden;'
        f'text-overflow:ellipsis">{escape(preview)}</summary>'
        f'<pre {pre}>{escape(_cut(text, cut))}</pre></details>'
    )


def badge(label: str, colour: Token, *, title: str | None = None, cls: str = "") -> str:
    """A small label: the theme's text colour on a tint of `colour`, framed in `colour`.

    >>> label = badge("done", theme.SUCCESS)
    >>> label.startswith(f'<span style="background:#2e7d3238;background:{tint(theme.SUCCESS).themed};')
    True
    """
    attrs = f' class="{cls}"' if cls else ""
    if title is not None:
        attrs += f' title="{escape(title)}"'
    return (
        f'<span{attrs} style="{css("background", tint(colour))};{css("color", theme.TEXT)};'
        f"{css('border', colour.within('1px solid {}'))};border-radius:8px;padding:0 6px;font-size:11px;"
        f'line-height:1.5;white-space:nowrap;display:inline-block">{escape(label)}</span>'
    )


REPLAYED_TITLE = "answered from a recording (nbagent.models.replay): no model was asked, cost 0"


def replayed_badge() -> str:
    """The small "replayed" label of an answer taken from a recording (`nbagent.models.replay`)."""
    return badge("replayed", theme.INFO, title=REPLAYED_TITLE, cls="nbagent-replayed")


def guard_badge(guard: str, reason: str = "") -> str:
    """The red "blocked by <guard>" label of a guard's trip (`nbagent.guards`), its reason on hover."""
    return badge(f"blocked by {guard}", theme.ERROR, title=reason or None, cls="nbagent-guard")


def blocked_html(blocked: str, what: str) -> str:
    """The line that stands where a guard blocked something: its label and ``what · reason``.
    `blocked`: ``UserMessage.blocked`` / ``AssistantMessage.blocked`` (the guard's name and its
    reason); `what`: what became of it ("not sent to the model", "answer withheld")."""
    guard, _, reason = blocked.partition(": ")
    text = f"{what}: {reason}" if reason else what
    return (f'<div class="nbagent-blocked" style="{SMALL};margin:4px 0">{guard_badge(guard, reason)} '
            f'<span style="{MUTED}">{escape(text)}</span></div>')


def replayed_answers(messages: Sequence[Message], steps: Sequence[int], rows: Iterable[Any]) -> list[int]:
    """The indices of the answers in `messages` (whose steps are `steps`) that were taken from a
    recording: the answers of the steps whose usage row (of `rows`) is marked ``replayed``."""
    replayed = {r.step for r in rows if r.replayed and getattr(r, "purpose", "run") == "run"}
    if not replayed:
        return []
    return [i for i, (m, step) in enumerate(zip(messages, steps, strict=False))
            if m.kind == "assistant" and step in replayed]


def status_badge(status: str) -> str:
    """A tinted label for a tool call's (or a run's) status."""
    label, colour = STATUS_STYLE.get(status, (status, theme.GREY))
    return badge(label, colour, cls="nbagent-status")


def _colgroup() -> str:
    return "<colgroup>" + "".join(f'<col style="width:{w}">' for _, w in COLUMNS) + "</colgroup>"


def table_header_html() -> str:
    """The header of a tool table, as its own table with the shared column widths."""
    cells = "".join(
        f'<th style="{CELL};{MUTED};font-weight:600">{name}</th>' for name, _ in COLUMNS
    )
    return (
        f'<table class="nbagent-tool-head" style="{TABLE};{RULE_BELOW}">{_colgroup()}'
        f'<tr style="{TR}">{cells}</tr></table>'
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


_NOT_EDITED: Any = object()


def code_html(code: str, *, cut: int = MAX_CHARS) -> str:
    """Python code as a code block: syntax-highlighted by pygments when it is installed (its
    spans with inline colours around escaped text), else escaped text; never live HTML. Its
    first `cut` characters (and how many more there are); invisible characters escaped (`reveal`)."""
    code = _cut(reveal(code), cut)
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        body = highlight(code, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True))
    except Exception:  # no pygments (or a lexer error): plain escaped text
        body = escape(code)
    return f'<pre class="nbagent-code" style="{PRE};{LONG}">{body}</pre>'


def _code_args_html(args: Mapping[str, Any], full: bool, cut: int) -> str:
    """Arguments with a ``code`` string (the ``python`` tool's): the code as a code block, any
    other arguments as JSON above it."""
    code: str = args["code"]
    rest = {k: v for k, v in args.items() if k != "code"}
    head = expandable(pretty_args(rest), full=full, cut=cut) if rest else ""
    if full or (len(code) <= PREVIEW_CHARS and "\n" not in code.strip()):
        return head + code_html(code, cut=cut)
    preview = " ".join(reveal(code).split())[: PREVIEW_CHARS - 1] + "…"
    return (head + f'<details class="nbagent-value"><summary style="cursor:pointer;{MONO};white-space:nowrap;'
            f'overflow:hidden;text-overflow:ellipsis">{escape(preview)}</summary>{code_html(code)}</details>')


def _with_code(args: Any) -> Mapping[str, Any] | None:
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    return args if isinstance(args, Mapping) and isinstance(args.get("code"), str) else None


HIDDEN_TITLE = ("these arguments hold characters a reader cannot see, or that reorder what is shown "
                "(Trojan Source); each is shown escaped, as \\u…: {}")


def hidden_badge(*texts: str, names: Sequence[str] = ()) -> str:
    """A warning label when `texts` (a call's arguments as written, before `reveal`) hold
    invisible or reordering characters (or `names` names some), naming them on hover; "" when
    there is none."""
    names = [*names, *(n for text in texts for n in hidden_characters(text))]
    if not names:
        return ""
    return badge("hidden characters", theme.ERROR, title=HIDDEN_TITLE.format(", ".join(dict.fromkeys(names))),
                 cls="nbagent-hidden-chars") + "<br>"


def args_html(args: Any, *, full: bool = False, edited_from: Any = _NOT_EDITED, cut: int = MAX_CHARS) -> str:
    """A call's arguments (`full`: shown at once, else longer ones behind an expander; at most
    `cut` characters of each text); when a person edited them, an **edited** badge (the model's
    own arguments on hover) and under "the model's arguments" the original and what the edit
    changed (`diff_html`). A ``code`` argument (a string) is shown as a Python code block
    (`code_html`). Invisible characters are escaped, and flagged with a "hidden characters"
    label (`hidden_badge`)."""
    with_code = _with_code(args)
    if with_code is not None:
        rest = _json_text({k: v for k, v in with_code.items() if k != "code"})
        shown = hidden_badge(with_code["code"], rest) + _code_args_html(with_code, full, cut)
    else:
        text, names = revealed_json(_json_text(args))
        shown = hidden_badge(names=names) + expandable(text, full=full, cut=cut)
    if edited_from is _NOT_EDITED:
        return shown
    original = pretty_args(edited_from)
    return (
        badge("edited", theme.BRAND, title=f"the model asked for: {original}",
              cls="nbagent-edited")
        + shown
        + f'<details class="nbagent-original"><summary style="cursor:pointer;{FONT};{MUTED};font-size:11px">'
        f"the model's arguments</summary><pre style=\"{PRE};{LONG}\">{escape(_cut(original, MAX_CHARS))}</pre>"
        f"{diff_html(original, pretty_args(args))}</details>"
    )


def diff_html(before: str, after: str, *, cut: int = MAX_CHARS) -> str:
    """What an edit changes, line by line: removed lines on a red tint (``-``), added ones on a
    green tint (``+``), two lines of context around each change; "no change" when the texts are
    the same. Escaped text in a scroll box: the whole texts are compared, and the first `cut`
    characters of the diff are shown (then how many lines more).

    >>> html = diff_html('{"path": "a.txt"}', '{"path": "b.txt"}')
    >>> ["-" in html, '+{&quot;path&quot;: &quot;b.txt&quot;}' in html.replace("</span>", "")]
    [True, True]
    """
    import difflib  # here: only an edit needs it

    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=2))[2:]
    if not lines:
        return f'<div class="nbagent-diff" style="{SMALL};{MUTED}">no change: the arguments are the model\'s</div>'
    rows, size = [], 0
    for i, line in enumerate(lines):
        if line.startswith("@@"):
            rows.append(f'<div style="{MUTED}">⋯</div>')
            continue
        pair = lines[i + 1] if line[:1] == "-" and i + 1 < len(lines) else lines[i - 1] if line[:1] == "+" else ""
        line = _excerpt(line, pair if pair[:1] in "-+" and pair[:1] != line[:1] else "")
        size += len(line)
        if size > cut:
            rows.append(f'<div style="{MUTED}">… ({len(lines) - i:,} more lines of the diff not shown)</div>')
            break
        colour = {"+": theme.SUCCESS, "-": theme.ERROR}.get(line[:1])
        tinted = f"{css('background', tint(colour))};" if colour is not None else ""
        rows.append(f'<div style="{tinted}white-space:pre-wrap;overflow-wrap:anywhere">{escape(line) or " "}</div>')
    return (f'<div class="nbagent-diff" style="{SMALL};margin:4px 0"><span style="{MUTED}">what the edit changes</span>'
            f'<div style="{MONO};{FRAME};border-radius:4px;padding:2px 4px;{SCROLL}">{"".join(rows)}</div></div>')


_EXCERPT = 400
"""A diff line longer than this (a long JSON string, e.g. a ``code`` argument) is shown around
its first difference from the line it replaces."""


def _excerpt(line: str, other: str) -> str:
    """`line` (``-`` or ``+`` then the text), cut around where it first differs from `other`
    (the line it pairs with; "" for none) when it is longer than `_EXCERPT`."""
    if len(line) <= _EXCERPT:
        return line
    at = next((i for i, (a, b) in enumerate(zip(line[1:], other[1:], strict=False)) if a != b),
              min(len(line), len(other)) - 1) if other else 0
    start = max(1, at - _EXCERPT // 4)
    end = start + _EXCERPT
    return (line[0] + ("…" if start > 1 else "") + line[start:end]
            + (f"… ({len(line) - end:,} more characters)" if end < len(line) else ""))


def rich_result_html(display: Mapping[str, str] | None, images: Sequence[Any] = ()) -> str:
    """What a tool returned, shown richly: its ``text/html`` sanitized again (a DataFrame's table,
    styled like JupyterLab's own DataFrame outputs) or else its ``text/markdown`` rendered, and its
    images, in a scroll box of at most 24em."""
    parts: list[str] = []
    bundle = display or {}
    html = clean_rich_html(bundle.get("text/html"))
    if html:
        # JupyterLab centres tables in rendered HTML; a result starts at the left like an output
        parts.append(html.replace("<table>", '<table style="margin:0 0 4px 0">'))
    elif isinstance(bundle.get("text/markdown"), str):
        parts.append(markdown_html(bundle["text/markdown"]))
    parts.extend(image_html(i, large=True) for i in images)
    if not parts:
        return ""
    return (
        f'<div class="nbagent-rich jp-RenderedHTMLCommon jp-RenderedHTML" style="{SCROLL};padding:2px 0;'
        f'margin:0;font-size:12px;line-height:1.45;text-align:left;overflow-wrap:normal">{"".join(parts)}</div>'
    )


def tool_row_html(
    name: str,
    args: Any,
    status: str,
    result: str | None = None,
    *,
    is_error: bool = False,
    duration_s: float | None = None,
    full_args: bool = False,
    edited_from: Any = _NOT_EDITED,
    display: Mapping[str, str] | None = None,
    images: Sequence[Any] = (),
    elapsed_s: float | None = None,
) -> str:
    """One tool call as a table (tool, arguments, status, result or error, duration), with a
    second row under the arguments for what the tool returned richly (`display`, `images`).
    `full_args`: the call waits for a person; its arguments are shown at once and whole (up to
    `WHOLE_CHARS`). `edited_from`: the model's arguments when `args` are a person's edit. `elapsed_s`: the call
    is still going and has run this long; its time is a ``<span class="nbagent-tick"
    data-elapsed>`` that the live view's front end counts up."""
    rich = rich_result_html(display, images)
    cut = WHOLE_CHARS if full_args else MAX_CHARS
    last = f'style="{CELL};{RULE_BELOW}"'
    td = f'style="{CELL}"' if rich else last
    if rich and display and result:
        shown = expandable(result, label="text the model read", error=is_error)
    else:
        shown = expandable(result, error=is_error)
    if elapsed_s is not None:
        time_cell = (f'<span class="nbagent-tick" data-elapsed="{elapsed_s:.3f}" style="{MUTED}">'
                     f"{escape(_duration(elapsed_s))}</span>")
    else:
        time_cell = f'<span style="{MUTED}">{escape(_duration(duration_s))}</span>'
    out = (
        f'<table class="nbagent-tool" style="{TABLE}">{_colgroup()}<tr style="{TR}">'
        f'<td {td}><code style="{CODE}">{escape(name)}</code></td>'
        f"<td {td}>{args_html(args, full=full_args, edited_from=edited_from, cut=cut)}</td>"
        f"<td {td}>{status_badge(status)}</td>"
        f"<td {td}>{shown}</td>"
        f"<td {td}>{time_cell}</td></tr>"
    )
    if rich:
        out += f'<tr style="{TR}"><td {last}></td><td colspan="4" {last}>{rich}</td></tr>'
    return out + "</table>"


MAX_INLINE_IMAGE_BYTES = 512 * 1024
"""Images up to this size are shown as thumbnails (embedded as ``data:`` URLs, so they are saved
with the notebook); bigger ones, and URL images (never fetched by the view), are shown as labels."""


def image_html(image: Any, *, large: bool = False) -> str:
    """A thumbnail of an `Image` (a prompt's, or `large`: one a tool returned): an ``<img>`` with a
    ``data:`` URL for a small image whose bytes were checked to be PNG / JPEG / GIF / WebP (a
    browser runs nothing in those), else an escaped label. A URL image is never loaded by the view
    (no request to an address from the data)."""
    data = getattr(image, "data", None)
    if data is not None and len(data) <= MAX_INLINE_IMAGE_BYTES and image.media_type in IMAGE_TYPES:
        size = "max-width:100%;max-height:320px" if large else "max-width:240px;max-height:180px"
        return (
            f'<img class="nbagent-image" src="{escape(image.data_url())}" alt="{escape(image.describe())}" '
            f'style="{size};margin:4px 6px 0 0;border-radius:4px;{FRAME};vertical-align:top;'
            'display:inline-block">'
        )
    return f'<span style="{MUTED};font-size:12px;margin-right:6px">[image: {escape(image.describe())}]</span>'


def user_html(text: str, note: str | None = None, images: Sequence[Any] = (), who: str = "you") -> str:
    """A user message bubble (escaped, line breaks kept), with its images (`image_html`). `note`
    is shown next to "you" (the live view marks a message that waits to be sent "queued"); a noted
    bubble has a dashed border. `who`: whose message it is ("task" for a sub-agent's, from its
    parent agent)."""
    label = escape(who) + (f" · {escape(note)}" if note else "")
    border = f"{css('border', theme.DASHED_LINE)};" if note else ""
    pictures = f'<div>{"".join(image_html(i) for i in images)}</div>' if images else ""
    return (
        f'<div style="{FONT};margin:6px 0;padding:6px 10px;border-radius:8px;{border}'
        f'{css("background", theme.BUBBLE)};white-space:pre-wrap;word-break:break-word">'
        f'<span style="{MUTED};font-size:11px">{label}</span><br>{escape(text)}{pictures}</div>'
    )


def reasoning_html(reasoning: str | None) -> str:
    """A model's reasoning as a closed "Thinking" ``<details>`` (escaped plain text, never HTML;
    cut at `MAX_CHARS`). Empty string when there is none."""
    if not reasoning:
        return ""
    return (
        f'<details class="nbagent-thinking" style="{SMALL};{MUTED};margin:4px 0">'
        f'<summary style="cursor:pointer">Thinking</summary>'
        f'<div style="white-space:pre-wrap;word-break:break-word;margin:4px 0 0 0;padding:4px 8px;'
        f'{RULE_LEFT}">{escape(_cut(reasoning, MAX_CHARS))}</div></details>'
    )


def compaction_html(record: Any) -> str:
    """A compaction record as a muted row ("compacted 42 messages into a summary (1,204 tokens),
    saved 61k tokens") whose summary opens below it (escaped plain text)."""
    line = escape(record.describe())
    if not record.content:
        return f'<div class="nbagent-compaction" style="{SMALL};{MUTED};margin:4px 0">{line}</div>'
    return (
        f'<details class="nbagent-compaction" style="{SMALL};{MUTED};margin:4px 0">'
        f'<summary style="cursor:pointer">{line}</summary>'
        f'<div style="white-space:pre-wrap;word-break:break-word;margin:4px 0 0 0;padding:4px 8px;'
        f'{RULE_LEFT}">{escape(_cut(record.content, MAX_CHARS))}</div></details>'
    )


ANSWER_CLASS = "nbagent-answer jp-RenderedHTMLCommon jp-RenderedMarkdown"
"""An answer is styled by JupyterLab's own Markdown CSS (tables, code, links; every theme)."""
ANSWER_STYLE = (f"{css('font-family', theme.CONTENT_FONT)};{css('font-size', theme.CONTENT_SIZE)};"
                f"{css('line-height', theme.CONTENT_LINE_HEIGHT)};padding:0;text-align:left;overflow-wrap:anywhere")


def assistant_html(text: str | None, refusal: str | None = None) -> str:
    """An assistant answer: Markdown rendered and sanitized, with JupyterLab's Markdown classes."""
    body = markdown_html(text)
    if refusal:
        body += f'<p style="{ERROR}">refused: {escape(refusal)}</p>'
    if not body:
        return ""
    return f'<div class="{ANSWER_CLASS}" style="{ANSWER_STYLE};margin:6px 0">{body}</div>'


_QUESTION_KEYS = ("question", "prompt", "message", "text", "query")


def question_html(name: str, args: Any, description: str = "") -> str:
    """What a client tool's call asks the person, as text (not JSON): the question (its one text
    argument, or one named ``question`` / ``prompt`` / ``message`` / ``text`` / ``query``), then
    any other arguments as ``name: value`` lines, then the tool's description."""
    items = dict(args) if isinstance(args, Mapping) else {}
    key = next((k for k in _QUESTION_KEYS if isinstance(items.get(k), str)), None)
    if key is None and len(items) == 1 and isinstance(next(iter(items.values())), str):
        key = next(iter(items))
    question = items.pop(key) if key is not None else None
    lines = [f'<div style="{MUTED};font-size:12px">{escape(name)} asks you</div>']
    if question is not None:
        lines.append(f'<div class="nbagent-question-text" style="font-size:14px;white-space:pre-wrap;'
                     f'overflow-wrap:anywhere;margin:2px 0">{escape(question)}</div>')
    elif not isinstance(args, Mapping):
        lines.append(f'<pre style="{PRE}">{escape(pretty_args(args))}</pre>')
    for k, v in items.items():
        shown = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
        lines.append(f'<div style="white-space:pre-wrap;overflow-wrap:anywhere"><span style="{MUTED}">'
                     f"{escape(k)}:</span> {escape(_cut(shown, MAX_CHARS))}</div>")
    if description:
        lines.append(f'<div style="{MUTED};font-size:12px">{escape(description)}</div>')
    return (f'<div class="nbagent-question" style="{FONT};text-align:left;padding:4px 8px;margin:2px 0;'
            f'{css("border-left", theme.WARN.within("3px solid {}"))}">{"".join(lines)}</div>')


def header_html(thread: str, model: Any = None, name: str | None = None) -> str:
    """A view's identity line: the agent's name (when it has one), its model (provider and
    name) and the thread id, so two views in one notebook can be told apart."""
    parts = []
    if name:
        parts.append(f'<b class="nbagent-agent-name" style="{css("color", theme.TEXT)}">{escape(name)}</b>')
    if model is not None:
        provider = getattr(model, "provider", None)
        model_name = getattr(model, "model_name", None) or type(model).__name__
        label = f"{provider} · {model_name}" if provider and provider != model_name else str(model_name)
        parts.append(f'<span class="nbagent-model" title="model">{escape(label)}</span>')
    parts.append(f'<span class="nbagent-thread" title="thread id">thread <code style="{_HINT_CODE}">'
                 f"{escape(thread)}</code></span>")
    return (f'<div class="nbagent-header" style="{SMALL};{MUTED};padding:2px 2px 4px 2px;'
            f'{RULE_BELOW};margin-bottom:4px;text-align:left">' + " · ".join(parts) + "</div>")


def calls_text(n: int) -> str:
    """``1 model call``, ``3 model calls``."""
    return f"{n:,} model call{'s' if n != 1 else ''}"


def cost_text(usage: Usage) -> str:
    """``cost $0.00120``, or ``cost n/a`` when a price is unknown (`nbagent.usage.usd`)."""
    return "cost " + usd(usage.cost_total)


def budget_texts(usage: Usage, token_budget: int | None, cost_budget: float | None) -> list[str]:
    """How much of its budgets a run used (nothing when no budget is set)."""
    out = []
    if token_budget:
        used = usage.total_tokens
        out.append(f"token budget {used:,} / {token_budget:,} ({100 * used / token_budget:.0f}%)")
    if cost_budget:
        spent = usage.cost_total or 0.0
        out.append(f"cost budget {usd(spent)} / {usd(cost_budget)} ({100 * spent / cost_budget:.0f}%)")
    return out


def usage_text(usage: Usage, label: str) -> str:
    """One line of text: ``label: model calls | tokens (input / cached / output) | cost``."""
    return " | ".join([
        f"{label}: {calls_text(usage.requests)}",
        f"tokens in {usage.input_tokens:,} · cached {usage.cache_read_tokens:,} · out {usage.output_tokens:,}",
        cost_text(usage),
    ])


def usage_html(usage: Usage, *, label: str = "run") -> str:
    """`usage_text` as a muted line of HTML."""
    return f'<div style="{SMALL};{MUTED}">{escape(usage_text(usage, label))}</div>'


class ProviderCall(NamedTuple):
    """A tool call the model's server ran itself (a built-in tool of OpenAI's Responses API:
    web search, code interpreter, image generation, file search...), as a read-only row."""

    id: str
    name: str
    args: Any
    status: str
    result: str


_PROVIDER_STATUS = {"completed": "done", "failed": "failed", "incomplete": "failed"}
_PROVIDER_KEPT_OUT = frozenset({"id", "type", "status", "result", "outputs", "results", "encrypted_content"})


def _provider_result(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    outputs = [o for o in item.get("outputs") or () if isinstance(o, dict)]
    logs = "".join(str(o.get("logs") or "") for o in outputs if o.get("type") == "logs")
    if logs:
        return logs
    if kind == "image_generation_call" and item.get("result"):
        size = " ".join(str(item[k]) for k in ("size", "output_format") if item.get(k))
        return f"an image{f' ({size})' if size else ''}, kept with the answer"
    if isinstance(item.get("results"), list):
        return f"{len(item['results'])} results"
    return "ran on the model's server"


def provider_calls(message: Any) -> list[ProviderCall]:
    """The tool calls of an answer that its model's server ran itself: the output items of type
    ``*_call`` (other than ``function_call``) kept on the answer (``thinking_blocks``). They never
    run locally and never wait for approval: the view shows them as read-only rows."""
    calls: list[ProviderCall] = []
    for item in getattr(message, "thinking_blocks", None) or ():
        kind = item.get("type") if isinstance(item, dict) else None
        if not isinstance(kind, str) or not kind.endswith("_call") or kind == "function_call":
            continue
        if kind == "web_search_call":
            args: Any = item.get("action") or {}
        elif kind == "image_generation_call":
            args = {"prompt": item.get("revised_prompt")} if item.get("revised_prompt") else {}
        else:
            args = {k: v for k, v in item.items() if k not in _PROVIDER_KEPT_OUT
                    and not (isinstance(v, str) and len(v) > 2000)}
        status = str(item.get("status") or "done")
        calls.append(ProviderCall(str(item.get("id") or f"{kind}-{len(calls)}"), kind[: -len("_call")], args,
                                  _PROVIDER_STATUS.get(status, status), _provider_result(item)))
    return calls


def messages_html(messages: Sequence[Message], *, skip_call_ids: Iterable[str] = (),
                  whole: Sequence[Message] | None = None, offset: int = 0, replayed: Iterable[int] = (),
                  subruns: Mapping[str, Any] | None = None, who: str = "you") -> str:
    """A conversation as static HTML: user bubbles, each answer's reasoning as a closed "Thinking"
    section (escaped), answers as Markdown, and each answer's tool calls as a table with their
    results (matched by call id). Calls in `skip_call_ids` are left out (the live view shows those
    as rows with buttons).

    `whole` and `offset`: `messages` is ``whole[offset:...]`` (a part of a longer conversation,
    e.g. what a resumed run added): results are looked up in `whole`, so a call answered later
    shows its result, and results here of calls asked before `offset` (the calls a resume
    decided) are shown as rows of their own, with the call's name and arguments.

    `replayed`: the indices (in `whole`) of the answers taken from a recording
    (`replayed_answers`), shown with a small "replayed" badge.

    `subruns`: the sub-agents' runs of agent calls, by call id (`RunResult.subagents`, or a
    stored sub-agent thread read alike), each shown under its call's row (`subrun_html`). `who`:
    whose the user messages are (`user_html`)."""
    skip = set(skip_call_ids)
    from_recording = set(replayed)
    whole = messages if whole is None else whole
    results = call_results(whole)
    out: list[str] = []
    early: list[tuple[Any, Any]] = []  # (call, result) of calls asked before `offset`
    # the last answer before `offset`: results of its calls here are rows of their own (`early`)
    asked = next((m for m in reversed(whole[:offset]) if isinstance(m, AssistantMessage)), None)

    def flush() -> None:
        if early:
            rows = [table_header_html(), *(_call_row_html(c, r, subruns) for c, r in early)]
            out.append('<div class="nbagent-tools" style="margin:4px 0 8px 0">' + "".join(rows) + "</div>")
            early.clear()

    for index, m in enumerate(messages, start=offset):
        if m.kind == "tool-result" and asked is not None:
            call = next((c for c in asked.tool_calls if c.id == m.call_id), None)
            if call is not None and call.id not in skip:
                early.append((call, m))
            continue
        flush()
        if m.kind == "user":
            blocked = m.blocked
            out.append(user_html(m.content, "blocked" if blocked else None, images=m.images, who=who))
            if blocked:
                out.append(blocked_html(blocked, "not sent to the model"))
        elif m.kind == "compaction":
            out.append(compaction_html(m))
        elif m.kind == "assistant" and m.blocked is not None:
            out.append(blocked_html(m.blocked, "answer withheld"))
        elif m.kind == "assistant":
            asked = None  # results from here on answer this message's calls
            if index in from_recording:
                out.append(f'<div style="margin:2px 0">{replayed_badge()}</div>')
            out.append(reasoning_html(m.reasoning))
            out.append(assistant_html(m.text, m.refusal))
            calls = [c for c in m.tool_calls if c.id not in skip]
            provided = provider_calls(m)
            if calls or provided:
                rows = [table_header_html()]
                rows += [tool_row_html(p.name, p.args, p.status, p.result) for p in provided]
                for call in calls:
                    found = results.get((index, call.id))
                    rows.append(_call_row_html(call, found[1] if found is not None else None, subruns))
                out.append('<div class="nbagent-tools" style="margin:4px 0 8px 0">' + "".join(rows) + "</div>")
    flush()
    return "".join(out)


def shown_status(result: Any) -> str:
    """The status a row shows for a call's `ToolResultMessage`: its status, and ``denied (repeat)``
    for a call denied again without asking (the same call as one a person denied in the turn)."""
    return "denied (repeat)" if getattr(result, "decision", None) == "repeat-denied" else result.status


def _call_row_html(call: Any, result: Any, subruns: Mapping[str, Any] | None) -> str:
    """A call's row (with its result, when it has one) and, for an agent call, its sub-agent's run
    under it; an agent call with no result waits for its sub-agent's calls ("waiting")."""
    sub = subruns.get(call.id) if subruns else None
    if result is None:
        row = tool_row_html(call.name, call.args_json, "queued" if sub is None else "waiting")
    else:
        row = result_row_html(call.name, call.args_json, result)
    return row if sub is None else row + subrun_html(call.name, sub)


def subrun_html(name: str, sub: Any) -> str:
    """A sub-agent's run under its agent call's row (`Agent.as_tool`): a closed section, indented
    under the call, whose summary line says the agent, how its run stands and what it cost (its
    own sub-agents' included), and which holds its steps: its answers, tool rows and its own
    sub-agents' runs, the same way down. `sub`: a `RunResult`, or anything with its
    ``messages``, ``status``, ``usage``, ``pending`` and ``subagents`` (a stored sub-agent thread).
    Its calls that wait are left out here: the top's pending rows show them."""
    usage = sub.usage
    line = (f"{name} · {sub.status} · {calls_text(usage.requests)} · {usage.total_tokens:,} tokens · "
            f"{cost_text(usage)}")
    body = messages_html(sub.messages, skip_call_ids=[p.id for p in sub.pending], subruns=sub.subagents,
                         who="task")
    return (f'<details class="nbagent-subrun" style="{FONT};margin:0 0 6px 18px;padding-left:8px;'
            f'{theme.css("border-left", theme.NEST_LINE)}">'
            f'<summary style="cursor:pointer;{MUTED};font-size:12px">{escape(line)}</summary>{body}</details>')


def result_row_html(name: str, args: Any, result: Any, **kwargs: Any) -> str:
    """`tool_row_html` for a call that has its `ToolResultMessage`: its status, text, duration,
    what it returned richly, and the arguments a person edited (the model's `args` on hover)."""
    if result.edited_args is not None:
        kwargs.update(edited_from=args)
        args = result.edited_args
    text = getattr(result, "whole_text", result.content)  # the whole result, also when the model read a cut
    return tool_row_html(name, args, shown_status(result), text, is_error=result.is_error,
                         duration_s=result.duration_s, display=result.display, images=result.images, **kwargs)


def _pending_html(pending: Sequence[PendingCall], thread: str) -> str:
    if not pending:
        return ""
    rows = [table_header_html()]
    for i, p in enumerate(pending):
        status = "needs answer" if p.reason == "client" else "needs approval"
        rows.append(tool_row_html(p.label, p.args, status, full_args=True))  # a sub-agent's: "researcher → ..."
        if p.reason == "client":
            rows.append(question_html(p.name, p.args, p.description))
        unshown = unshown_chars(p.args)
        if unshown:
            rows.append(f'<div class="nbagent-unshown" style="{SMALL};{ERROR};margin:2px 0">{unshown:,} characters '
                        f"of these arguments are not shown here: read them (<code style=\"{_HINT_CODE}\">"
                        f"result.pending[{i}].args</code>) before you approve</div>")
    ids = ", ".join(repr(p.id) for p in pending)
    code = f'<code style="{_HINT_CODE}">'
    hint = (
        f'<div style="{SMALL};{MUTED};margin-top:4px">continue with '
        f"{code}agent.resume(thread={escape(repr(thread))}, approve=[{escape(ids)}])</code>, "
        f"{code}deny={{id: reason}}</code> or {code}results={{id: value}}</code>; or "
        f"{code}agent.chat(thread={escape(repr(thread))})</code> for buttons</div>"
    )
    return '<div style="margin:6px 0">' + "".join(rows) + hint + "</div>"


def always_allowed_html(tools: Sequence[str], thread: str) -> str:
    """The thread's always-allowed tools as a muted line, with how to take them back ("" for none)."""
    if not tools:
        return ""
    names = ", ".join(f'<code style="{_HINT_CODE}">{escape(t)}</code>' for t in tools)
    revoke = escape(f"agent.revoke({thread!r}, {', '.join(repr(t) for t in tools)})")
    return (f'<div class="nbagent-always" style="{SMALL};{MUTED};margin:4px 0">always allowed on this thread '
            f'(run without asking): {names}; take back with <code style="{_HINT_CODE}">{revoke}</code></div>')


def _usage_table(usage: Usage) -> str:
    if not usage.calls:
        return ""
    cell = CELL.replace("text-align:left", "text-align:right").replace("padding:3px 6px", "padding:2px 6px")
    th = f'style="{cell};{MUTED};font-weight:600"'
    td = f'style="{cell}"'
    tree = any(getattr(row, "depth", 0) for row in usage.calls)  # sub-agents' rows: say whose
    names = (*(("agent",) if tree else ()), "step", "model", "input", "cached", "output", "cost", "latency")
    head = "".join(f"<th {th}>{h}</th>" for h in names)
    body = []
    for row in usage.calls:
        cost = usd(row.cost_total)
        cells = (*((row.agent or "",) if tree else ()), row.step, row.model, f"{row.input_tokens:,}",
                 f"{row.cache_read_tokens:,}", f"{row.output_tokens:,}", cost, _duration(row.latency_s))
        html = [escape(c) for c in cells]
        if getattr(row, "replayed", False):
            html[2 if tree else 1] += " " + replayed_badge()
        body.append(f'<tr style="{TR}">' + "".join(f"<td {td}>{c}</td>" for c in html) + "</tr>")
    table = TABLE.replace("width:100%;table-layout:fixed;", "width:auto;")
    return (
        f'<details class="nbagent-usage" style="{SMALL}">'
        f'<summary style="cursor:pointer;{MUTED}">model calls</summary>'
        f'<table style="{table};font-size:12px"><tr style="{TR}">{head}</tr>{"".join(body)}</table></details>'
    )


def render_result_html(result: RunResult) -> str:
    """The static HTML summary of a run (``display(result)``): status, the run's messages and
    tool calls, pending calls, and usage. Inline styles only, no JavaScript; each themed colour
    has a plain one before it for an untrusted notebook (`nbagent.display.theme`)."""
    head = (
        f'<div style="{FONT};margin-bottom:6px">{status_badge(result.status)}'
        f'<span style="{MUTED}"> · thread <code style="{CODE}">{escape(result.thread)}</code> · {result.steps} '
        f"step{'s' if result.steps != 1 else ''}</span>"
    )
    replayed = sum(1 for row in result.usage.calls if getattr(row, "replayed", False))
    if replayed:
        head += f'<span style="{MUTED}"> · {replayed} of {calls_text(result.usage.requests)} </span>{replayed_badge()}'
    trip = getattr(result, "guard_trip", None)
    if trip is not None:
        head += f'<span style="{MUTED}"> · </span>{guard_badge(trip.guard, trip.reason)}'
        head += f'<span style="{MUTED}"> {escape(trip.reason)}</span>'
    elif result.stop_reason:
        head += f'<span style="{MUTED}"> · stopped: {escape(result.stop_reason)}</span>'
    if result.truncated:
        head += f'<span style="{ERROR}"> · answer cut off at the output token limit</span>'
    head += "</div>"
    parts = [head]
    start = result.new_message_index
    earlier = result.messages[:start]
    if earlier:
        parts.append(
            f'<details style="{FONT}"><summary style="cursor:pointer;{MUTED}">{len(earlier)} earlier '
            f"message{'s' if len(earlier) != 1 else ''}</summary>"
            f"{messages_html(earlier, whole=result.messages)}</details>"
        )
    pending_ids = [p.id for p in result.pending]
    parts.append(messages_html(result.new_messages, skip_call_ids=pending_ids, whole=result.messages, offset=start,
                               subruns=result.subagents))
    parts.append(_pending_html(result.pending, result.thread))
    parts.append(always_allowed_html(result.always_allowed, result.thread))
    if result.error:
        parts.append(
            f'<div style="{FONT};{ERROR};white-space:pre-wrap">error: {escape(result.error)}</div>'
        )
    parts.append(usage_html(result.usage))
    parts.append(_usage_table(result.usage))
    return (
        f'<div class="nbagent-result {NO_MATH}" style="{FONT};{FRAME};border-radius:6px;padding:8px 10px;'
        f'max-width:960px;text-align:left;box-sizing:border-box">' + "".join(parts) + "</div>"
    )
