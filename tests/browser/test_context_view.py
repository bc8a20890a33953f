"""The context window in a real browser (JupyterLab 4, headless Chromium): the footer's gauge
("context N % of 1.2k", its breakdown on hover, amber past the compaction threshold) and the
compaction row, light and dark; the pictures go to tests/browser/artifacts."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))

SETUP = '''\
from nbagent import Agent, Compaction, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.store.memory import MemoryStore

@tool
def get_rows(n: int) -> str:
    """Rows of the sales table."""
    return "\\n".join(f"row {i}: 2026-11-{i % 28 + 1:02d} Paris {17.5 * i:.2f} EUR paid" for i in range(n))

def answer(messages, request):
    if not request.tools:
        return "SUMMARY: the user asked for sales rows, turn after turn."
    return tool_call("get_rows", n=12) if messages[-1].kind == "user" else "Here they are. TURNEND"

agent = Agent(FunctionModel(answer, context_window=1_200), tools=[get_rows], store=MemoryStore(),
              compaction=Compaction(at=0.6, keep_last=2))
view = agent.chat(thread="sales")
view
'''

_GAUGE = "() => { const g = document.querySelector('.nbagent-gauge'); " \
         "return g ? {text: g.innerText, title: g.title, color: getComputedStyle(g).color} : null; }"


def test_gauge_and_compaction_row_in_jupyterlab(jupyter_lab, make_notebook, page_factory):
    page = page_factory(jupyter_lab, make_notebook([SETUP]))
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")
    page.type_text("turn 1: rows please")
    page.wait_text("TURNEND", timeout=60)
    page.wait_for(lambda: page.eval(_GAUGE) is not None, "the footer's gauge")
    first = page.eval(_GAUGE)
    assert first["text"].startswith("context ") and first["text"].endswith("% of 1.2k"), first
    assert "tool results:" in first["title"] and "system:" in first["title"], first  # the breakdown on hover
    for turn in range(2, 12):
        page.type_text(f"turn {turn}: rows please")
        page.wait_for(lambda t=turn: page.output_text(0).count("TURNEND") >= t, f"turn {turn}'s answer", timeout=60)
        if page.eval("() => document.querySelectorAll('.nbagent-compaction').length") > 0:
            break
    row = page.eval("() => { const r = document.querySelector('.nbagent-compaction'); return r && r.innerText; }")
    assert row and "compacted" in row and "saved" in row, row
    gauge = page.eval(_GAUGE)
    assert gauge["text"].startswith("context "), gauge
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    view = page.page.locator(".nbagent-chat").first
    view.screenshot(path=str(ARTIFACTS / "context_view.png"))
    page.command("apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for(lambda: "dark" in str(page.eval("() => document.body.dataset.jpThemeName")).lower(),
                  "the dark theme", timeout=30)
    page.page.wait_for_timeout(500)
    view.screenshot(path=str(ARTIFACTS / "context_view-dark.png"))
    page.command("apputils:change-theme", {"theme": "JupyterLab Light"})
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
