"""HTML/JS injection payloads render inert in a real browser (JupyterLab, headless Chromium).

Every payload of tests/fixtures/injection_payloads.json is used as model text (streamed, then
rendered as Markdown), as tool arguments (a row per payload, plus one call needing approval whose
full arguments and Edit text area are shown) and as tool results; then the static summary
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

def answer(messages, request):
    if messages[-1].kind == "user":
        calls = [tool_call("lookup", q=p) for p in PAYLOADS] + [tool_call("risky", items=PAYLOADS)]
        return AssistantMessage(text="\\n\\n".join(PAYLOADS), tool_calls=calls)
    return "FINALANSWER\\n\\n" + "\\n\\n".join(PAYLOADS)

agent = Agent(FunctionModel(answer), tools=[lookup, risky], store=MemoryStore())
view = agent.chat(thread="injection")
view
''',
    "view.result",
]

CHECK_JS = """
(selector) => {
  const badTags = ['script', 'style', 'iframe', 'frame', 'object', 'embed', 'base', 'meta', 'link',
                   'form', 'img', 'svg', 'math', 'video', 'audio', 'source'];
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
    _assert_inert(page, ".nbagent-chat", "completed")

    page.run_cell(1)  # display(result): the static HTML summary
    page.wait_text("completed", timeout=30, cell=1)
    _assert_inert(page, ".nbagent-result", "static summary")
    page.page.mouse.move(200, 200)
    page.page.mouse.move(400, 600)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
