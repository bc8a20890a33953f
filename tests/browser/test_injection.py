"""HTML/JS injection payloads render inert in a real browser (JupyterLab, headless Chromium).

Every payload of tests/fixtures/injection_payloads.json is used as model text (streamed, then
rendered as Markdown), as tool arguments (a row per payload, plus one call needing approval whose
full arguments and Edit text area are shown), as tool results, as a tool result's own HTML
(``_repr_html_``, shown richly in the row) and in a DataFrame; then the static summary
(``display(result)``) of the same run. After each stage the page is checked: no JS dialog fired,
nothing set ``window.__pwned``, and inside the view's DOM no ``on*`` attribute, no
script/style/iframe/... element and no javascript:/data: URL.
"""

from __future__ import annotations

import json
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE

PAYLOADS_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "injection_payloads.json"

CELLS = [
    f'''\
import json
from nbagent import Agent, tool
from nbagent.messages import AssistantMessage
from nbagent.models import FunctionModel, tool_call
from nbagent.store.memory import MemoryStore

PAYLOADS = json.loads(open({str(PAYLOADS_PATH)!r}, encoding="utf-8").read())

@tool
def lookup(q: str) -> str:
    """Look something up (returns the payload as its result)."""
    return q

@tool(requires_approval=True)
def risky(items: list[str]) -> str:
    """Needs approval; returns the payloads."""
    return "\\n".join(items)

class Rich:
    def __init__(self, html):
        self.html = html
    def _repr_html_(self):
        return self.html
    def __str__(self):
        return "rich result"

@tool
def rich(i: int) -> object:
    """Returns a payload as its own HTML (what a DataFrame's _repr_html_ is)."""
    return Rich(PAYLOADS[i])

@tool
def frame() -> object:
    """A DataFrame of the payloads."""
    import pandas as pd
    return pd.DataFrame({{"payload": PAYLOADS}})

def answer(messages, request):
    if messages[-1].kind == "user":
        calls = [tool_call("lookup", q=p) for p in PAYLOADS] + [tool_call("risky", items=PAYLOADS)]
        calls += [tool_call("rich", i=i) for i in range(len(PAYLOADS))] + [tool_call("frame")]
        return AssistantMessage(text="\\n\\n".join(PAYLOADS), tool_calls=calls)
    return "FINALANSWER\\n\\n" + "\\n\\n".join(PAYLOADS)

agent = Agent(FunctionModel(answer), tools=[lookup, risky, rich, frame], store=MemoryStore())
view = agent.chat(thread="injection")
view
''',
    "view.result",
]

CHECK_JS = """
(selector) => {
  const badTags = ['script', 'style', 'iframe', 'frame', 'object', 'embed', 'base', 'meta', 'link',
                   'form', 'img', 'svg', 'math', 'video', 'audio', 'source',
                   'mjx-container'];  // MathJax typeset text between two "$" as a formula
  const bad = [];
  const roots = Array.from(document.querySelectorAll(selector));
  for (const root of roots) {
    for (const el of root.querySelectorAll('*')) {
      const tag = el.tagName.toLowerCase();
      if (badTags.includes(tag)) bad.push('element <' + tag + '>');
      for (const a of Array.from(el.attributes)) {
        if (/^on/i.test(a.name)) bad.push('<' + tag + '> ' + a.name);
        const what = '<' + tag + '> ' + a.name + '=' + a.value.slice(0, 50);
        if (/^\\s*(javascript|vbscript|data):/i.test(a.value)) bad.push(what);
        if (a.name === 'style' && /position\\s*:\\s*fixed|url\\(/i.test(a.value)) bad.push(what);
      }
    }
  }
  return {roots: roots.length, bad: bad, pwned: window.__pwned === undefined ? null : String(window.__pwned)};
}
"""


def _assert_inert(page, selector: str, stage: str) -> None:
    # open every expander so truncated arguments/results are in the DOM as rendered text too
    page.eval(f"() => document.querySelectorAll('{selector} details').forEach(d => d.open = true)")
    page.page.wait_for_timeout(300)
    found = page.eval(CHECK_JS, selector)
    assert found["roots"] >= 1, f"{stage}: no {selector} in the page"
    assert found["bad"] == [], f"{stage}: live markup in the view: {found['bad'][:10]}"
    assert found["pwned"] is None, f"{stage}: a payload ran (window.__pwned={found['pwned']})"
    dialogs = [e for e in page.console if e.type == "dialog"]
    assert dialogs == [], f"{stage}: dialogs fired: {dialogs}"


def test_injection_corpus_renders_inert_in_jupyterlab(jupyter_lab, make_notebook, page_factory):
    payloads = json.loads(PAYLOADS_PATH.read_text(encoding="utf-8"))
    nb = make_notebook(CELLS)
    page = page_factory(jupyter_lab, nb)
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")
    page.type_text("go")
    page.wait_text("needs approval", timeout=60)
    page.click("Edit")  # the JSON text area holds the payloads too
    page.page.wait_for_timeout(500)
    area = page.page.locator(".nbagent-chat textarea")
    assert area.count() == 1 and payloads[0] in area.first.input_value()
    _assert_inert(page, ".nbagent-chat", "paused, arguments shown")

    page.click("Approve")
    page.wait_text("FINALANSWER", timeout=90)
    page.wait_idle()
    page.page.wait_for_timeout(500)
    text = page.output_text(0)
    assert "<script>window.__pwned=1;alert('script')</script>" in text  # shown as text, not run
    assert "hover me" in text
    # the tools' own HTML is shown richly (its table markup kept), yet inert
    tables = page.eval("() => Array.from(document.querySelectorAll('.nbagent-chat .nbagent-rich table'))"
                       ".map(t => t.innerText)")
    assert len(tables) >= 6, tables
    assert any("${alert('template')}" in t and "<script>" in t for t in tables), tables  # the DataFrame
    assert "spoofed class" in text and "td overlay" in text
    _assert_inert(page, ".nbagent-chat", "completed")

    page.run_cell(1)  # display(result): the static HTML summary
    page.wait_text("completed", timeout=30, cell=1)
    assert page.eval("() => document.querySelectorAll('.nbagent-result .nbagent-rich table').length") >= 6
    _assert_inert(page, ".nbagent-result", "static summary")
    page.page.mouse.move(200, 200)
    page.page.mouse.move(400, 600)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
