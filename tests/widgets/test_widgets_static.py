"""The sanitizer and the static HTML summary (``display(result)``), without a kernel or browser.

Untrusted text (model answers, tool arguments, tool results) must come out inert: checked here with
an HTML parser on the whole injection corpus, and in a real browser in tests/browser/test_injection.py.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nbagent import Agent, tool
from nbagent.display.html import expandable, tool_row_html
from nbagent.display.sanitize import escape, markdown_html
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store.memory import MemoryStore
from nbagent.widgets import render_result_html

PAYLOADS: list[str] = json.loads(
    (Path(__file__).parent.parent / "fixtures" / "injection_payloads.json").read_text(encoding="utf-8")
)
FORBIDDEN_TAGS = {"script", "style", "iframe", "object", "embed", "svg", "math", "img", "form", "input",
                  "base", "meta", "link", "video", "source", "body", "x"}
URL_ATTRS = {"href", "src", "action", "formaction", "xlink:href", "data", "srcdoc"}


class _Inspector(HTMLParser):
    """Collects what a browser would treat as live: tags, event-handler attributes, URLs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[tuple[str, str]] = []
        self.urls: list[str] = []
        self.styles: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name.startswith("on"):
                self.handlers.append((tag, name))
            if name in URL_ATTRS:
                self.urls.append(value or "")
            if name == "style":
                self.styles.append(value or "")


def inspect_html(fragment: str) -> _Inspector:
    parser = _Inspector()
    parser.feed(fragment)
    parser.close()
    return parser


def assert_inert(fragment: str, *, allow_style_attr: bool = False) -> None:
    found = inspect_html(fragment)
    assert not (set(found.tags) & FORBIDDEN_TAGS), (found.tags, fragment)
    assert found.handlers == [], fragment
    for url in found.urls:
        assert re.match(r"^(https?:|mailto:)", url.strip(), re.I), (url, fragment)
    if not allow_style_attr:
        assert found.styles == [], fragment
    for style in found.styles:  # only nbagent's own inline styles
        assert "position:fixed" not in style and "url(" not in style and "z-index" not in style, style


@pytest.mark.parametrize("payload", PAYLOADS, ids=[f"p{i}" for i in range(len(PAYLOADS))])
def test_markdown_payloads_render_inert(payload: str) -> None:
    html = markdown_html(payload)
    assert_inert(html, allow_style_attr=True)
    # the only style Markdown keeps: a table cell's alignment
    assert all(re.fullmatch(r"text-align:(left|right|center)", s) for s in inspect_html(html).styles), html


@pytest.mark.parametrize("payload", PAYLOADS, ids=[f"p{i}" for i in range(len(PAYLOADS))])
def test_a_tools_own_html_renders_inert(payload: str) -> None:
    """A tool result's ``_repr_html_`` (what a DataFrame shows) is cut to table and text markup:
    no style, class, id or event attribute, no image, no script."""
    from nbagent._run.execute import tool_output
    from nbagent.display.html import rich_result_html

    class Rich:
        def _repr_html_(self) -> str:
            return payload

    display = tool_output(Rich()).display
    if display is not None:
        html = display["text/html"]
        assert_inert(html)
        assert "class=" not in html and " id=" not in html and "data-" not in html
        assert_inert(rich_result_html(display), allow_style_attr=True)  # as the view shows it
    assert_inert(rich_result_html({"text/html": payload}), allow_style_attr=True)  # re-sanitized when shown
    frame = pytest.importorskip("pandas").DataFrame({"payload": [payload]})
    assert_inert(tool_output(frame).display["text/html"])  # type: ignore[index]


@pytest.mark.parametrize("payload", PAYLOADS, ids=[f"p{i}" for i in range(len(PAYLOADS))])
def test_escaped_payloads_render_as_text(payload: str) -> None:
    out = escape(payload)
    assert inspect_html(out).tags == []
    assert "<" not in out and '"' not in out


def test_markdown_keeps_formatting_and_safe_links() -> None:
    out = markdown_html("# Title\n\n**bold** and `code`\n\n- a\n- b\n\n[site](https://example.com)\n\n"
                        "| x | y |\n|---|---|\n| 1 | 2 |")
    for tag in ("<h1>", "<strong>bold</strong>", "<code>code</code>", "<li>a</li>", "<table>"):
        assert tag in out
    assert 'href="https://example.com"' in out and 'rel="noopener noreferrer nofollow"' in out


def test_markdown_keeps_the_line_breaks_of_a_paragraph() -> None:
    """An answer's single newlines stay line breaks, as in the user's bubble and the streaming
    preview (a model's "Totals:\nEast 27\nNorth 51" is not run into one line)."""
    out = markdown_html("Totals:\nEast 27\nNorth 51\n\nNext paragraph")
    assert out.count("<br>") == 2 and out.count("<p>") == 2
    assert "<br>" not in markdown_html("```\ncode\nlines\n```") and "<br>" not in markdown_html("- a\n- b")


def test_markdown_shows_raw_html_as_text() -> None:
    out = markdown_html("<b>not bold</b> <script>alert(1)</script>")
    assert "&lt;b&gt;not bold&lt;/b&gt;" in out and "&lt;script&gt;" in out


def test_image_becomes_link_and_unsafe_urls_are_dropped() -> None:
    assert '<a href="https://example.com/cat.png" rel="noopener noreferrer nofollow">[image: cat]</a>' in \
        markdown_html("![cat](https://example.com/cat.png)")
    assert "href" not in markdown_html("![x](data:image/png;base64,AAAA)")


@pytest.mark.parametrize("payload", PAYLOADS[:20], ids=[f"p{i}" for i in range(20)])
def test_tool_row_html_escapes_args_and_result(payload: str) -> None:
    html = tool_row_html("lookup", {"q": payload}, "done", payload, is_error=True, duration_s=0.2)
    assert_inert(html, allow_style_attr=True)
    long = expandable(payload * 20)
    assert long.startswith("<details") and "more characters" not in long
    assert_inert(long, allow_style_attr=True)


def test_expandable_truncates_long_text_with_expander() -> None:
    text = "x" * 500
    html = expandable(text, limit=50)
    assert "<details" in html and "x" * 500 in html
    assert "x" * 60 not in html.split("</summary>")[0]
    huge = expandable("y" * 30_000)
    assert "more characters not shown" in huge


async def test_static_summary_of_a_paused_run_is_escaped_and_complete() -> None:
    evil = "<img src=x onerror=alert(1)> **bold**"

    @tool(requires_approval=True)
    def refund(order: int, note: str) -> str:
        """Refund an order."""
        return "ok"

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"<script>alert('{q}')</script>"

    model = ScriptedModel([
        [tool_call("lookup", q=evil)],
        lambda messages, request: [tool_call("refund", order=1, note=evil)],
    ])
    agent = Agent(model, tools=[refund, lookup], store=MemoryStore())
    result = await agent.run(evil, thread="t-static")
    assert result.status == "paused"
    html = result._repr_html_()
    assert html == render_result_html(result)
    assert_inert(html, allow_style_attr=True)
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # the user's message, escaped
    assert "&lt;script&gt;" in html  # the tool's result, escaped
    assert "needs approval" in html and "agent.resume(thread=&#x27;t-static&#x27;" in html
    assert "tokens in" in html and "paused" in html
    assert "<script" not in html.lower()


async def test_static_summary_of_completed_run_renders_markdown() -> None:
    agent = Agent(FunctionModel(lambda m, r: "Here is **bold** and [a link](javascript:alert(1))"),
                  store=MemoryStore())
    first = await agent.run("hi", thread="t2")
    second = await agent.run("again", thread="t2")
    html = render_result_html(second)
    assert "<strong>bold</strong>" in html
    assert "javascript:" not in html.replace("[a link](javascript:alert(1))", "")
    assert "2 earlier messages" in html  # the first exchange, collapsed
    assert first.status == second.status == "completed"


async def test_static_summary_shows_reasoning_closed_and_escaped() -> None:
    from nbagent.display.html import MAX_CHARS, reasoning_html
    from nbagent.messages import AssistantMessage

    reasoning = "\n".join(PAYLOADS)
    agent = Agent(FunctionModel(lambda m, r: AssistantMessage(text="**Done.**", reasoning=reasoning)),
                  store=MemoryStore())
    result = await agent.run("hi", thread="t-reasoning")
    html = render_result_html(result)
    assert_inert(html, allow_style_attr=True)
    start = html.index('<details class="nbagent-thinking"')
    opening = html[start: html.index(">", start)]
    assert " open" not in opening  # closed until the reader opens it
    assert "<summary" in html[start:] and "Thinking</summary>" in html
    assert escape(PAYLOADS[0]) in html  # the reasoning, as escaped text
    assert start < html.index("<strong>Done.</strong>")  # above the answer it led to
    assert reasoning_html(None) == "" and reasoning_html("") == ""
    long = reasoning_html("z" * (MAX_CHARS + 10))
    assert "10 more characters not shown" in long


@pytest.mark.parametrize("payload", PAYLOADS, ids=[f"p{i}" for i in range(len(PAYLOADS))])
def test_reasoning_and_queued_bubbles_escape_payloads(payload: str) -> None:
    from nbagent.display.html import reasoning_html, user_html

    for html in (reasoning_html(payload), user_html(payload, note=payload)):
        found = inspect_html(html)
        assert set(found.tags) <= {"details", "summary", "div", "span", "br"}, (found.tags, html)
        assert found.handlers == [] and found.urls == []


# ---------------------------------------------------------------------------- images in prompts
def _png(size: int = 4) -> bytes:
    import io

    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (size, size), (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


def test_prompt_images_show_as_thumbnails_or_labels() -> None:
    from nbagent import Image
    from nbagent.display.html import MAX_INLINE_IMAGE_BYTES, messages_html
    from nbagent.messages import UserMessage

    small = Image(_png())
    big = Image(b"\x89PNG\r\n\x1a\n" + b"\x00" * MAX_INLINE_IMAGE_BYTES)
    remote = Image.from_url('https://evil.example/x.png"><script>alert(1)</script>')
    html = messages_html([UserMessage("what is <b>this</b>?", [small, big, remote])])
    found = inspect_html(html)
    # one <img>: the small image, as a data: URL of a checked raster type; no request to any address
    assert found.tags.count("img") == 1 and "script" not in found.tags and found.handlers == []
    (url,) = found.urls
    assert url == small.data_url() and url.startswith("data:image/png;base64,")
    assert "[image: image/png, 524 kB]" in html  # too big to embed: a label
    assert "[image: https://evil.example/x.png&quot;&gt;&lt;script&gt;" in html  # never fetched, escaped
    assert "what is &lt;b&gt;this&lt;/b&gt;?" in html


async def test_the_result_summary_shows_the_prompt_image() -> None:
    agent = Agent(FunctionModel(lambda m, r: "a dot"), store=MemoryStore())
    result = await agent.run(["What is this?", _png()])
    html = render_result_html(result)
    assert html.count("<img ") == 1 and "data:image/png;base64," in html
