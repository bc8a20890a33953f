"""How the cell looks, measured in the browser (JupyterLab 4 and Notebook 7, headless Chromium).

One notebook per app: a view (with an agent name) and a second view of another thread; a run whose
tools return a long text, a pandas DataFrame and an image, and a call that needs approval, which is
edited in the view (Edit, Approve edited); a client tool's question answered in its labelled box; a
Markdown answer with a table, code and a link; and ``display(result)`` of a run decided in code.
Then, with computed styles and box sizes rather than HTML strings:

- no box inside the view or the summary scrolls sideways (a 4 px overflow put a scrollbar under
  every row); a long value expands into a scroll box of at most 24em, as wide as its column;
- the DataFrame is a table (not a quoted string with ``\\n``), the image an image;
- the edited call shows the arguments it ran with, an "edited" badge with the model's original
  on hover, and the tool's own result text;
- the client question is text, its answer box labelled;
- each view says which agent, model and thread it is;
- Markdown answers take JupyterLab's Markdown styles (code background, link colour, left-aligned
  table cells);
- the static summary's cells are left-aligned and top-aligned, header and cells line up, and a
  copy of it outside JupyterLab's CSS computes the same styles (no host CSS reaches it);
- every button and badge has a text contrast of at least 4.5:1, in the light, dark and high-contrast
  themes.

Screenshots of the view and the summary in both themes go to tests/browser/artifacts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .harness import KNOWN_CONSOLE_NOISE, JupyterServer, NotebookPage

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))
TIMEOUT = 90.0

SETUP = '''\
import io
import pandas as pd
from PIL import Image as PILImage
from nbagent import Agent, Image, Tool, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.store.memory import MemoryStore

@tool
def lookup(q: str) -> str:
    """Look something up."""
    return "".join(f"line {i}: " + "a long result " * 8 + "\\n" for i in range(200)) + "LONGTAIL"

@tool
def cities() -> pd.DataFrame:
    """Temperatures."""
    return pd.DataFrame({"city": ["Paris", "Oslo", "Rome"], "temp": [22, 14, 25]})

@tool
def chart() -> list:
    """A chart."""
    buf = io.BytesIO()
    PILImage.new("RGB", (120, 60), (30, 120, 200)).save(buf, format="PNG")
    return ["the chart", Image(buf.getvalue())]

@tool(requires_approval=True)
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} EUR on order {order}"

ask_user = Tool.client("ask_user", "Ask the person a question",
                       {"type": "object", "properties": {"question": {"type": "string"}}})
ANSWER = ("Done. See `the code` and [the docs](https://example.com/docs).\\n\\n"
          "| city | temp |\\n|---|---|\\n| Paris | 22 |\\n| Oslo | 14 |")

def answer(messages, request):
    last = messages[-1]
    if last.kind == "user" and last.content == "go":
        return [tool_call("lookup", q="x" * 300), tool_call("cities"), tool_call("chart"),
                tool_call("refund", order=42, amount=9.5)]
    if last.kind == "user" and last.content == "ask me":
        return tool_call("ask_user", question="Which city do you prefer?")
    return ANSWER

agent = Agent(FunctionModel(answer), tools=[lookup, cities, chart, refund, ask_user], store=MemoryStore(),
              name="support-bot")
view = agent.chat(thread="render-demo")
view
'''
OTHER_VIEW = '''\
other = Agent(FunctionModel(answer, model_name="other-model"), store=MemoryStore(), name="second-bot")
other.chat(thread="second-thread")
'''
STATIC = '''\
paused = await agent.run("go", thread="static-demo")
done = await agent.resume(paused, edit={paused.pending[0].id: {"order": 42, "amount": 5.0}})
done
'''

# Reads a colour the way the browser paints it (any CSS colour syntax), then WCAG contrast.
CONTRAST_JS = """
(selector) => {
  const canvas = document.createElement('canvas'); canvas.width = canvas.height = 1;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const rgba = (c) => { ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = '#000'; ctx.fillStyle = c;
    ctx.fillRect(0, 0, 1, 1); const d = ctx.getImageData(0, 0, 1, 1).data; return [d[0], d[1], d[2], d[3] / 255]; };
  const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  const lum = (c) => {
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const background = (el) => { const layers = [];
    for (let e = el; e; e = e.parentElement) { const c = rgba(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) { layers.push(c); if (c[3] >= 1) break; } }
    let base = [255, 255, 255];
    for (const c of layers.reverse()) base = base.map((v, i) => v * (1 - c[3]) + c[i] * c[3]);
    return base; };
  return Array.from(document.querySelectorAll(selector)).filter((el) => el.offsetParent !== null).map((el) => {
    const bg = background(el); const fc = rgba(getComputedStyle(el).color);
    const fg = bg.map((v, i) => v * (1 - fc[3]) + fc[i] * fc[3]);
    const a = lum(fg), b = lum(bg);
    return [el.innerText.trim(), +((Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)).toFixed(2)];
  });
}
"""
LABELS = ".nbagent-chat button, .nbagent-status, .nbagent-edited"

# Boxes that can scroll sideways and do: the phantom scrollbar under every tool row.
OVERFLOW_JS = """
(selector) => Array.from(document.querySelectorAll(selector + ' *')).filter((e) => {
  const s = getComputedStyle(e);
  return ['auto', 'scroll'].includes(s.overflowX) && e.clientWidth > 0 && e.scrollWidth > e.clientWidth;
}).map((e) => `${e.tagName}.${e.className}: ${e.scrollWidth} > ${e.clientWidth}`)
"""

# The static summary: cell styles, column lines, and the same HTML outside JupyterLab's CSS.
SUMMARY_JS = """
() => {
  const root = document.querySelector('.nbagent-result');
  root.querySelectorAll('details').forEach((d) => { d.open = true; });
  const props = ['text-align', 'vertical-align', 'padding-left', 'padding-top', 'border-top-width',
                 'background-color', 'white-space', 'line-height'];
  // a tool's own table keeps JupyterLab's DataFrame look; the usage table is numbers (right-aligned)
  const cells = (r) => Array.from(r.querySelectorAll('td, th'))
    .filter((c) => !c.closest('.nbagent-rich, .nbagent-usage'));
  const copy = document.createElement('div');
  copy.style.cssText = 'position:absolute;left:0;top:0;width:' + root.getBoundingClientRect().width + 'px';
  copy.innerHTML = root.outerHTML;
  document.body.appendChild(copy);
  const inJupyter = cells(root), outside = cells(copy);
  const differs = [];
  inJupyter.forEach((c, i) => { if (c.closest('.nbagent-answer')) return;  // JupyterLab's Markdown look
    for (const p of props) {
    const a = getComputedStyle(c).getPropertyValue(p), b = getComputedStyle(outside[i]).getPropertyValue(p);
    if (a !== b) differs.push(`${c.tagName} ${i} ${p}: ${a} (in JupyterLab) vs ${b}`); } });
  copy.remove();
  const lines = [];
  root.querySelectorAll('.nbagent-tools, .nbagent-result > div').forEach((box) => {
    const head = box.querySelector('.nbagent-tool-head');
    if (!head) return;
    const xs = Array.from(head.querySelectorAll('th')).map((t) => Math.round(t.getBoundingClientRect().left));
    box.querySelectorAll('table.nbagent-tool').forEach((row) => {
      const first = Array.from(row.rows[0].cells).map((t) => Math.round(t.getBoundingClientRect().left));
      if (JSON.stringify(first) !== JSON.stringify(xs)) lines.push([xs, first]);
    });
  });
  return {
    cells: inJupyter.length,
    align: inJupyter.map((c) => getComputedStyle(c).textAlign + '/' + getComputedStyle(c).verticalAlign),
    differs: differs.slice(0, 10),
    misaligned: lines,
    inRenderedHTML: !!root.closest('.jp-RenderedHTMLCommon'),
  };
}
"""


def _open(page_factory: Any, server: JupyterServer, make_notebook: Any) -> NotebookPage:
    nb = make_notebook([SETUP, OTHER_VIEW, 'view.ask("go")', 'view.ask("ask me")', STATIC])
    page = page_factory(server, nb, timeout=TIMEOUT)
    for cell in (0, 1):
        page.run_cell(cell)
        page.wait_idle(timeout=TIMEOUT)
    page.wait_for(lambda: page.output_buttons("Send").count() >= 2, "two views")
    return page


def _row(page: NotebookPage, name: str) -> Any:
    return page.page.locator(".nbagent-chat .nbagent-tool-row").filter(
        has=page.page.locator(f"code:text-is('{name}')")).first


def _check_contrast(page: NotebookPage, theme: str) -> None:
    found = page.eval(CONTRAST_JS, LABELS)
    assert len(found) >= 5, found
    low = [f for f in found if f[1] < 4.5]
    assert low == [], f"{theme}: text contrast under 4.5:1: {low}"


def _screenshots(page: NotebookPage, app: str, theme: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / f"view_render_{app}_{theme}.png"))
    page.page.locator(".nbagent-result").first.screenshot(
        path=str(ARTIFACTS / f"summary_render_{app}_{theme}.png"))


def test_the_cell_looks_right(jupyter_app: JupyterServer, make_notebook: Any, page_factory: Any) -> None:
    page = _open(page_factory, jupyter_app, make_notebook)
    page.page.set_viewport_size({"width": 1280, "height": 2400})

    # identity: each view says which agent, model and thread it shows
    headers = page.eval("() => Array.from(document.querySelectorAll('.nbagent-header')).map(h => h.innerText)")
    assert len(headers) == 2 and headers[0] != headers[1], headers
    assert "support-bot" in headers[0] and "render-demo" in headers[0] and "function" in headers[0], headers
    assert "second-bot" in headers[1] and "other-model" in headers[1] and "second-thread" in headers[1], headers

    page.run_cell(2)  # go: a long result, a DataFrame, an image, and a call that waits for approval
    page.wait_text("needs approval", timeout=TIMEOUT)
    page.wait_for(lambda: page.eval("() => !!document.querySelector('.nbagent-chat .nbagent-rich img')"),
                  "the rich results")

    # the DataFrame is a table; the model's text of it is not what the row shows
    cities = _row(page, "cities")
    assert cities.locator(".nbagent-rich table td").filter(has_text="Paris").count() == 1
    assert "\\n" not in cities.inner_text() and '"    city' not in cities.inner_text()
    size = page.eval("() => { const i = document.querySelector('.nbagent-chat .nbagent-rich img');"
                     " return [i.naturalWidth, i.naturalHeight]; }")
    assert size == [120, 60]

    # a long result: one line until opened, then a scroll box no taller than 24em, as wide as its column
    lookup = _row(page, "lookup")
    lookup.locator("details.nbagent-value summary").last.click()
    box = page.eval("""() => { const row = Array.from(document.querySelectorAll('.nbagent-chat .nbagent-tool-row'))
        .find(r => r.querySelector('code').innerText === 'lookup');
      const pre = row.querySelectorAll('details.nbagent-value')[1].querySelector('pre');
      const td = pre.closest('td'); const em = parseFloat(getComputedStyle(pre).fontSize);
      return {h: pre.clientHeight, sh: pre.scrollHeight, max: 24 * em, w: pre.getBoundingClientRect().width,
              tdw: td.getBoundingClientRect().width, oy: getComputedStyle(pre).overflowY}; }""")
    assert box["oy"] == "auto" and box["sh"] > box["h"] > 0 and box["h"] <= box["max"] + 1, box
    assert box["w"] <= box["tdw"], box
    assert page.eval(OVERFLOW_JS, ".nbagent-chat") == []  # no phantom scrollbar under any row

    # Edit: the row then shows the arguments it ran with, badged, and the tool's own result
    _row(page, "refund").locator("button:text-is('Edit')").click()
    area = page.page.locator(".nbagent-chat textarea")
    area.first.wait_for(state="visible")
    area.first.fill('{"order": 42, "amount": 5.0}')
    # with the changed editor open, the plain Approve cannot drop the edit: it is disabled
    approve_js = """() => { const row = Array.from(document.querySelectorAll('.nbagent-chat .nbagent-tool-row'))
        .find(r => r.querySelector('code').innerText === 'refund');
      const b = Array.from(row.querySelectorAll('button')).find(b => b.innerText.trim() === 'Approve');
      return b ? [b.disabled, b.title] : null; }"""
    page.wait_for(lambda: (page.eval(approve_js) or [False])[0], "Approve disabled while an edit is open")
    assert "Approve edited" in page.eval(approve_js)[1]
    page.click("Approve edited")
    page.wait_text("refunded 5.0 EUR on order 42", timeout=TIMEOUT)
    refund = _row(page, "refund")
    badge = refund.locator(".nbagent-edited")
    assert badge.count() == 1 and '"amount": 9.5' in (badge.get_attribute("title") or "")
    cells = refund.locator("table.nbagent-tool").first.locator("td")
    assert '"amount": 5.0' in cells.nth(1).inner_text()
    assert cells.nth(3).inner_text().strip() == "refunded 5.0 EUR on order 42"  # no note in the result
    page.wait_text("Done. See the code", timeout=TIMEOUT)

    # Markdown answers wear JupyterLab's Markdown styles
    md = page.eval("""() => { const a = document.querySelector('.nbagent-chat .nbagent-answer');
      const link = a.querySelector('a'), code = a.querySelector('code'), td = a.querySelector('td');
      return {link: getComputedStyle(link).color,
              linkVar: getComputedStyle(a).getPropertyValue('--jp-content-link-color').trim(),
              code: getComputedStyle(code).backgroundColor, td: getComputedStyle(td).textAlign,
              classes: a.className}; }""")
    assert "jp-RenderedMarkdown" in md["classes"] and md["td"] == "left", md
    assert md["code"] not in ("rgba(0, 0, 0, 0)", "transparent"), md
    probe = page.eval("(c) => { const s = document.createElement('span'); s.style.color = c; document.body.append(s);"
                      " const v = getComputedStyle(s).color; s.remove(); return v; }", md["linkVar"])
    assert md["link"] == probe, md

    # a client tool's question: text, and a labelled answer box
    page.run_cell(3)
    page.wait_text("Which city do you prefer?", timeout=TIMEOUT)
    question = page.page.locator(".nbagent-chat .nbagent-question-text")
    question.first.wait_for(state="visible")
    assert question.first.inner_text() == "Which city do you prefer?"
    label = page.eval("() => { const i = document.querySelector('.nbagent-chat .nbagent-answer-box input');"
                      " return i && i.labels.length ? i.labels[0].innerText : null; }")
    assert label == "Your answer"
    page.page.locator(".nbagent-chat .nbagent-answer-box input").first.fill("Paris")
    page.click("Submit")
    page.wait_for(lambda: _row(page, "ask_user").inner_text().count("Paris") >= 1
                  and "done" in _row(page, "ask_user").inner_text(), "the answer as the result")

    # display(result) of a run decided in code
    page.run_cell(4)
    page.wait_idle(timeout=TIMEOUT)
    page.wait_for(lambda: page.eval("() => !!document.querySelector('.nbagent-result')"), "the summary")
    summary = page.eval(SUMMARY_JS)
    assert summary["inRenderedHTML"], "the summary is inside JupyterLab's rendered-HTML CSS"
    assert summary["cells"] > 10
    assert set(summary["align"]) <= {"left/top", "left/middle"} and "left/top" in summary["align"], summary["align"]
    assert summary["differs"] == [], summary["differs"]
    assert summary["misaligned"] == [], summary["misaligned"]
    assert page.page.locator(".nbagent-result .nbagent-rich table td").filter(has_text="Oslo").count() >= 1
    assert page.page.locator(".nbagent-result .nbagent-edited").count() >= 1
    assert page.eval(OVERFLOW_JS, ".nbagent-result") == []

    app = "lab" if jupyter_app.app == "lab" else "nb7"
    _check_contrast(page, "light")
    _screenshots(page, app, "light")
    page.command("apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for(lambda: page.eval("() => document.body.dataset.jpThemeLight") == "false", "the dark theme")
    page.page.wait_for_timeout(500)
    _check_contrast(page, "dark")
    _screenshots(page, app, "dark")
    page.command("apputils:change-theme", {"theme": "JupyterLab Dark High Contrast"})
    page.wait_for(lambda: page.eval("() => document.body.dataset.jpThemeName") == "JupyterLab Dark High Contrast",
                  "the high-contrast theme")
    page.page.wait_for_timeout(500)
    _check_contrast(page, "high contrast")
    page.command("apputils:change-theme", {"theme": "JupyterLab Light"})  # the server's settings are shared
    page.wait_for(lambda: page.eval("() => document.body.dataset.jpThemeLight") == "true", "the light theme")
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE[jupyter_app.app]) == []
