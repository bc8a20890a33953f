"""Replayed answers in a real browser (JupyterLab, headless Chromium): a chat view on
``replay(store, thread=..., then=live)`` marks each answer taken from the recording with a small
visible "replayed" badge just above it, and a live answer after the recording has none. The
picture goes to tests/browser/artifacts."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))

SETUP = '''\
from nbagent import Agent, tool
from nbagent.models import FunctionModel, record, replay, tool_call
from nbagent.store.memory import MemoryStore

@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order}: shipped"

def answer(messages, info):  # the recorded model: a tool call, then a text answer
    if messages[-1].kind == "user":
        return tool_call("lookup", order=42)
    return "RECORDED ANSWER: " + messages[-1].content

store = MemoryStore()
first = await Agent(record(FunctionModel(answer)), tools=[lookup], store=store).run("Where is 42?", thread="rec")
live_calls = []

def live(messages, info):
    live_calls.append(messages[-1].content)
    return "LIVE ANSWER to " + messages[-1].content

agent = Agent(replay(store, thread="rec", then=FunctionModel(live)), tools=[lookup], store=store)
print(first.status, first.steps)
agent.chat(thread="again")
'''

# each badge and each answer of the chat view: text, visibility, and where it is on the page
_LAYOUT = """() => {
  const chat = document.querySelector('.jp-OutputArea .nbagent-chat');
  if (!chat) return null;
  const box = (el) => { const r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; };
  const badges = Array.from(chat.querySelectorAll('.nbagent-replayed')).map(b => ({
    text: b.innerText.trim(), title: b.title, visible: b.checkVisibility() && b.offsetWidth > 0,
    ...box(b)}));
  const find = (text) => {
    const hits = Array.from(chat.querySelectorAll('.nbagent-answer')).filter(a => a.innerText.includes(text));
    return hits.length ? box(hits[hits.length - 1]) : null;
  };
  return {badges, recorded: find('RECORDED ANSWER'), live: find('LIVE ANSWER')};
}"""


def test_replayed_answers_carry_a_visible_badge_and_a_live_answer_none(jupyter_lab, make_notebook, page_factory):
    page = page_factory(jupyter_lab, make_notebook([SETUP, 'print("LIVE CALLS", live_calls)']))
    page.run_cell(0)
    page.wait_idle()
    page.wait_text("completed 2", cell=0, timeout=60)  # the recording
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")
    page.type_text("Where is 42?")
    page.wait_text("RECORDED ANSWER: order 42: shipped", cell=0, timeout=60)
    layout = page.wait_for(lambda: (lay := page.eval(_LAYOUT)) and len(lay["badges"]) == 2 and lay["recorded"]
                           and lay, "two replayed badges", timeout=30)
    for badge in layout["badges"]:  # one for the tool call's step, one for the text answer's
        assert badge["text"] == "replayed" and badge["visible"], badge
        assert "answered from a recording" in badge["title"], badge
    last = layout["badges"][-1]
    assert last["bottom"] <= layout["recorded"]["top"] + 1, layout  # just above the answer
    assert layout["recorded"]["top"] - last["bottom"] < 40, layout

    page.type_text("And order 7?")  # not in the recording: the live model answers
    page.wait_text("LIVE ANSWER to And order 7?", cell=0, timeout=60)
    page.wait_idle()
    layout = page.eval(_LAYOUT)
    assert len(layout["badges"]) == 2 and layout["live"], layout  # the live answer has no badge
    assert all(b["bottom"] <= layout["recorded"]["top"] + 1 for b in layout["badges"]), layout
    assert layout["live"]["top"] > layout["recorded"]["bottom"], layout
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".jp-OutputArea .nbagent-chat").first.screenshot(path=str(ARTIFACTS / "replay_view.png"))
    page.run_cell(1)
    page.wait_idle()
    calls = page.wait_text("LIVE CALLS", cell=1, timeout=30)
    assert "LIVE CALLS ['And order 7?']" in calls, calls  # the recorded turn never asked the live model
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
