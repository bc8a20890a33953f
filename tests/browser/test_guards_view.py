"""Guards in a real browser (JupyterLab, headless Chromium): while an answer is held for its output
guards the view shows "checking…" and not one word of it; then the text, as the guards left it; a
blocked answer never shows and a red "blocked by <guard>" label stands in its place, with the
reason beside it and on hover; ``display(result)`` of the tripped run shows the same label. The
pictures go to tests/browser/artifacts."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))

SETUP = '''\
import asyncio
from nbagent import Agent
from nbagent.guards import Guard, block, rewrite
from nbagent.models import FunctionModel
from nbagent.store.memory import MemoryStore

gate = asyncio.Event()

async def slow(messages, request):  # writes slowly, and its last word waits for `gate`
    text = messages[-1].content
    words = (["call", "me", "at", "555-0100", "tomorrow"] if "call" in text
             else ["the", "key", "is", "sk-proj-" + "q" * 40])
    for i, word in enumerate(words):
        if i == len(words) - 1:
            await gate.wait()
        await asyncio.sleep(0.05)
        yield word + (" " if i < len(words) - 1 else "")

def no_keys(text):
    return block("an API key in the answer") if "sk-" in text else None

def mask_phone(text):
    return rewrite(text.replace("555-0100", "[phone]"))

agent = Agent(FunctionModel(stream_function=slow), store=MemoryStore(), name="support",
              guards=[Guard.output(no_keys, name="keys"), Guard.output(mask_phone, name="phones")])
view = agent.chat(thread="guarded")
view
'''
RELEASE = "gate.set()"
STATIC = '''\
gate.set()
result = await agent.run("what is the key?", thread="static")
result
'''

_HELD = """() => {
  const chat = document.querySelector('.jp-OutputArea .nbagent-chat');
  if (!chat) return null;
  const checking = Array.from(chat.querySelectorAll('.nbagent-checking')).filter(e => e.checkVisibility());
  const answers = Array.from(chat.querySelectorAll('.nbagent-answer')).map(a => a.innerText);
  const labels = Array.from(chat.querySelectorAll('.nbagent-blocked')).map(b => ({
    text: b.innerText, title: (b.querySelector('.nbagent-guard') || {}).title,
    visible: b.checkVisibility() && b.offsetWidth > 0}));
  return {checking: checking.map(e => e.innerText), answers, labels, text: chat.innerText};
}"""


def test_a_held_answer_shows_checking_then_its_text_and_a_blocked_one_its_label(
        jupyter_lab, make_notebook, page_factory) -> None:
    page = page_factory(jupyter_lab, make_notebook([SETUP, RELEASE, STATIC]))
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")

    # Held: "checking…" while the model writes, and none of its words.
    page.type_text("call me please")
    held = page.wait_for(lambda: (s := page.eval(_HELD)) and s["checking"] and s, "checking…", timeout=60)
    assert held["checking"] == ["checking…"], held
    assert "555-0100" not in held["text"] and "call me at" not in held["text"], held
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "guards-checking.png"))
    page.run_cell(1)  # the model's last word comes
    page.wait_text("call me at [phone] tomorrow", cell=0, timeout=60)
    shown = page.eval(_HELD)
    assert shown["checking"] == [] and "555-0100" not in shown["text"], shown

    # Blocked: never a word of it; the label and the reason where it would have been.
    page.type_text("what is the key?")
    page.wait_text("blocked by keys", cell=0, timeout=60)
    page.wait_text("stopped by guard 'keys'", cell=0, timeout=30)
    state = page.eval(_HELD)
    assert "sk-proj" not in state["text"] and state["checking"] == [], state
    [label] = state["labels"]
    assert label["visible"] and "answer withheld: an API key in the answer" in label["text"], label
    assert label["title"] == "an API key in the answer", label
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "guards-blocked.png"))

    # display(result): the static summary's head carries the same label.
    page.run_cell(2)
    page.wait_text("blocked by keys", cell=2, timeout=60)
    summary = page.output_text(cell=2)
    assert "sk-proj" not in summary and "answer withheld" in summary, summary
    time.sleep(0.3)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
