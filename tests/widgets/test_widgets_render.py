"""What the cell shows, without a browser: rich tool results (a DataFrame's table, images) in the
row and after a restart, edited arguments with their badge, a client tool's question as text,
the view's identity line, themed buttons, JupyterLab's Markdown classes, and the static summary's
cells stated so no host CSS can move them. The same is measured in a real browser in
tests/browser/test_view_render.py."""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pytest

import nbagent
from nbagent import Agent, Image, tool
from nbagent.display.html import question_html, render_result_html, tool_row_html
from nbagent.display.sanitize import markdown_html
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store.memory import MemoryStore

from .test_widgets import ask, click, make_agent, waiting_rows
from .test_widgets_static import assert_inert

pd = pytest.importorskip("pandas")


def png() -> bytes:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (12, 6), (30, 120, 200)).save(buf, format="PNG")
    return buf.getvalue()


@tool
def cities() -> Any:
    """Temperatures."""
    return pd.DataFrame({"city": ["Paris", "Oslo"], "temp": [22, 14]})


@tool
def chart() -> Any:
    """A chart."""
    return ["the chart", Image(png())]


def rich_agent(store: MemoryStore) -> Agent:
    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            return [tool_call("cities"), tool_call("chart")]
        return "ok"

    return Agent(FunctionModel(answer), tools=[cities, chart], store=store)


class Cells(HTMLParser):
    """Every table cell's and row's inline style, and every element's classes."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[tuple[str, str]] = []
        self.rows: list[tuple[str, str]] = []
        self.stack: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = " ".join(c for _, c in self.stack) + " " + (a.get("class") or "")
        self.stack.append((tag, a.get("class") or ""))
        if tag in ("td", "th"):
            self.cells.append((classes, a.get("style") or ""))
        if tag == "tr":
            self.rows.append((classes, a.get("style") or ""))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


# ---------------------------------------------------------------------------- rich tool results
async def test_a_dataframe_and_an_image_show_richly_in_the_row_and_after_a_restart() -> None:
    store = MemoryStore()
    view = rich_agent(store).chat(thread="t-rich")
    result = await ask(view, "go")
    assert result.status == "completed"
    rows = {r.name: r for r in view.rows.values()}
    table = rows["cities"].html.value
    assert 'class="nbagent-rich' in table and "<td>Paris</td>" in table
    assert "text the model read" in table  # the model's text, one click away, not the main view
    assert "&quot;    city" not in table and "\\n" not in table  # no quoted string with literal \n
    picture = rows["chart"].html.value
    assert picture.count('<img class="nbagent-image"') == 1 and "data:image/png;base64," in picture
    assert "the chart" in picture
    assert_inert(table, allow_style_attr=True)

    # a new view of the thread (a restarted kernel): the stored display and images show again
    again = rich_agent(store).chat(thread="t-rich")
    await again.wait_loaded()
    history = again.history.value
    assert "<td>Oslo</td>" in history and history.count('<img class="nbagent-image"') == 1


def test_a_tools_own_html_is_sanitized_again_when_shown() -> None:
    evil = {"text/html": '<table><tr><td onclick="x()" style="position:fixed">a</td></tr></table>'
                         '<img src=x onerror=alert(1)><script>alert(1)</script>'}
    html = tool_row_html("t", {}, "done", "text", display=evil)
    assert "onclick" not in html and "position:fixed" not in html and "<script" not in html
    assert "onerror" not in html and "<img" not in html
    assert ">a</td>" in html
    md = tool_row_html("t", {}, "done", "text", display={"text/markdown": "**bold** <script>x</script>"})
    assert "<strong>bold</strong>" in md and "&lt;script&gt;" in md and "<script" not in md


# ---------------------------------------------------------------------------- edited arguments
async def test_an_edited_call_shows_the_arguments_it_ran_with_and_a_clean_result() -> None:
    view = make_agent().chat(thread="t-edited")
    await ask(view, "refund")
    [row] = waiting_rows(view)
    await click(row.buttons["Edit"])
    row.edit_area.value = '{"order": 42, "amount": 1.25}'
    await click(row.buttons["Approve edited"])
    result = await view.wait()
    assert result.status == "completed"
    html = row.html.value
    assert 'class="nbagent-edited"' in html
    assert re.search(r'title="the model asked for: \{\s*&quot;order&quot;: 42,\s*&quot;amount&quot;: 9.5\s*\}"', html)
    shown_args = html.split("</td>")[1]
    assert "&quot;amount&quot;: 1.25" in shown_args.split("the model&#x27;s arguments")[0]
    assert "the user edited" not in html  # the result is the tool's own text
    assert "refunded 1.25 on order 42" in html
    tool_result = next(m for m in result.messages if m.kind == "tool-result")
    assert tool_result.content == "refunded 1.25 on order 42"
    # a restarted view shows the same
    again = make_agent(view.agent.store).chat(thread="t-edited")
    await again.wait_loaded()
    assert 'class="nbagent-edited"' in again.history.value and "the user edited" not in again.history.value


# ---------------------------------------------------------------------------- client questions
async def test_a_client_question_is_text_with_a_labelled_answer_box() -> None:
    view = make_agent().chat(thread="t-question")
    await ask(view, "ask me")
    [row] = waiting_rows(view)
    question = next(w for w in row.actions.children if isinstance(w, widgets.HTML))
    assert 'class="nbagent-question-text"' in question.value and ">Which colour?</div>" in question.value
    assert "&quot;question&quot;" not in question.value  # not JSON
    assert row.answer_box.description == "Your answer"
    row.answer_box.value = "blue"
    await click(row.buttons["Submit"])
    assert (await view.wait()).output == "The tool said: blue"


def test_question_html_shows_any_arguments_as_text() -> None:
    html = question_html("pick", {"prompt": "Pick one <b>now</b>", "options": ["a", "b"]}, "Choose.")
    assert "Pick one &lt;b&gt;now&lt;/b&gt;" in html and 'options:</span> [&quot;a&quot;, &quot;b&quot;]' in html
    assert "Choose." in html
    single = question_html("confirm", {"what": "Delete it?"})
    assert '<div class="nbagent-question-text"' in single and "Delete it?" in single


# ---------------------------------------------------------------------------- identity, buttons
async def test_two_views_say_which_agent_model_and_thread_they_show() -> None:
    first = Agent(FunctionModel(lambda m, r: "hi", model_name="model-a"), store=MemoryStore(), name="alpha")
    second = Agent(FunctionModel(lambda m, r: "hi", model_name="model-b"), store=MemoryStore())
    one, two = first.chat(thread="t-one"), second.chat(thread="t-two")
    assert "alpha" in one.header.value and "model-a" in one.header.value and "t-one" in one.header.value
    assert "model-b" in two.header.value and "t-two" in two.header.value
    assert one.header.value != two.header.value
    assert one.children[1] is one.header  # at the top (after the stylesheet)
    wild = Agent(FunctionModel(lambda m, r: "hi"), store=MemoryStore(), name="<script>x</script>")
    assert "&lt;script&gt;" in wild.chat(thread='"><b>').header.value
    assert_inert(wild.chat(thread='"><img src=x onerror=alert(1)>').header.value, allow_style_attr=True)


async def test_buttons_use_the_themes_colours_not_ipywidgets_styles() -> None:
    view = make_agent().chat(thread="t-buttons")
    await ask(view, "refund")
    [row] = waiting_rows(view)
    for button, style in ((row.buttons["Approve"], "success"), (row.buttons["Deny"], "danger"),
                          (view.buttons["Send"], "primary"), (view.buttons["Stop"], "danger")):
        assert button.button_style == "" and f"nbagent-button-{style}" in button._dom_classes
    from nbagent.widgets.frame import ViewFrame

    css = ViewFrame._css  # the view's stylesheet, loaded once per page by its frame
    assert ".nbagent-button-success" in css and "var(--jp-ui-font-color1" in css
    assert any(isinstance(w, ViewFrame) for w in view.children)


def test_the_row_html_fills_its_row_without_overflowing() -> None:
    from nbagent.widgets.tool_table import ToolRow

    r = ToolRow("c1", "refund", {"order": 1}, schedule=lambda fn, *a: fn(*a), decide=lambda *a: None)
    # width 100% plus the HTML widget's 2px margins made every row 4px too wide
    assert r.html.layout.width is None and r.html.layout.margin == "0"


# ---------------------------------------------------------------------------- Markdown, static summary
def test_answers_carry_jupyterlabs_markdown_classes_and_cells_state_their_alignment() -> None:
    from nbagent.display.html import assistant_html

    html = assistant_html("| a | b |\n|---|--:|\n| 1 | 2 |")
    assert 'class="nbagent-answer jp-RenderedHTMLCommon jp-RenderedMarkdown"' in html
    assert '<td style="text-align:left">1</td>' in html and '<td style="text-align:right">2</td>' in html
    js = (Path(nbagent.__file__).parent / "widgets" / "stream.js").read_text()
    assert "jp-RenderedHTMLCommon jp-RenderedMarkdown" in js  # the streaming answer too
    # only text-align survives in a Markdown cell's style
    assert markdown_html('| <span style="position:fixed">x</span> |\n|---|\n| y |').count("position") == 1  # as text


async def test_the_static_summary_states_every_cells_alignment() -> None:
    @tool(requires_approval=True)
    def pay(order: int) -> str:
        """Pay."""
        return "paid"

    model = ScriptedModel([[tool_call("pay", order=1), tool_call("cities")],
                           "| a | b |\n|---|---|\n| 1 | 2 |"])
    agent = Agent(model, tools=[pay, cities], store=MemoryStore())
    paused = await agent.run("go", thread="t-summary")
    done = await agent.resume(paused, edit={paused.pending[0].id: {"order": 2}})
    html = render_result_html(done)
    parsed = Cells()
    parsed.feed(html)
    ours = [(cls, style) for cls, style in parsed.cells if "nbagent-rich" not in cls]
    assert len(ours) > 10
    for cls, style in ours:
        assert "text-align:" in style, (cls, style)
        if "nbagent-answer" not in cls:  # Markdown tables keep JupyterLab's Markdown look otherwise
            for prop in ("vertical-align:top", "padding:", "border:none", "background:transparent"):
                assert prop in style, (prop, cls, style)
    ours_rows = [style for cls, style in parsed.rows if "nbagent-rich" not in cls and "nbagent-answer" not in cls]
    assert len(ours_rows) > 5 and all("background:transparent" in r for r in ours_rows)  # no stripes or hover
    # the calls a resume decided are shown with their results, not as "queued"
    assert "queued" not in html and "paid" in html and 'class="nbagent-edited"' in html
    assert '<td>Paris</td>' in html
    assert "color-mix(in srgb" in html  # badges: a tint under the theme's own text colour
