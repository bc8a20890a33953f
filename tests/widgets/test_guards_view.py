"""Guards in the chat view and the static summary, without a kernel.

What a person sees: while an answer is held for the output guards, "checking…" where it will
show, then the text (as the guards left it); a blocked answer never shows a word of its text, a
red "blocked by <guard>" label with the reason stands in its place, and the status line says
which guard stopped the run; a blocked prompt is marked in the conversation, also after the view
is opened again; ``display(result)`` shows the trip's label.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ipywidgets as widgets

from nbagent import Agent
from nbagent.display.html import render_result_html
from nbagent.guards import Guard, block, rewrite
from nbagent.messages import Message
from nbagent.models import FunctionModel, ScriptedModel
from nbagent.store.memory import MemoryStore
from nbagent.widgets import StreamText

from .test_widgets import all_widgets, ask, view_text

SECRET = "sk-proj-" + "q" * 40


def no_keys(text: str) -> Any:
    return block("an API key in the answer") if "sk-" in text else None


def slow_words(*answers: str, gate: asyncio.Event | None = None) -> FunctionModel:
    """A model that streams each answer word by word; with `gate`, it waits for it before its last word."""
    count = [0]

    async def stream(messages: list[Message], request: Any) -> Any:
        text = answers[min(count[0], len(answers) - 1)]
        count[0] += 1
        words = text.split(" ")
        for i, word in enumerate(words):
            if gate is not None and i == len(words) - 1:
                await gate.wait()
            await asyncio.sleep(0.001)
            yield word + (" " if i < len(words) - 1 else "")

    return FunctionModel(stream_function=stream)


async def test_a_held_answer_shows_checking_then_its_text() -> None:
    gate = asyncio.Event()
    agent = Agent(slow_words("call me at 555-0100 please", gate=gate), store=MemoryStore(),
                  guards=[Guard.output(lambda t: rewrite(t.replace("555-0100", "[phone]")))])
    view = agent.chat(thread="t-held")
    await view.wait_loaded()
    view.message_box.value = "hi"
    view.buttons["Send"].click()
    for _ in range(200):
        await asyncio.sleep(0.005)
        if "checking…" in view_text(view):
            break
    shown = view_text(view)
    assert "checking…" in shown and "call me" not in shown  # held: not one word shown
    gate.set()
    result = await view.wait()
    assert result is not None and result.output == "call me at [phone] please"
    shown = view_text(view)
    assert "checking…" not in shown and "555-0100" not in shown
    [st] = [w for w in all_widgets(view) if isinstance(w, StreamText)]
    assert st.text == "call me at [phone] please"


async def test_a_blocked_answer_never_shows_and_its_label_says_why() -> None:
    agent = Agent(slow_words(f"the key is {SECRET}"), guards=[Guard.output(no_keys, name="keys")], store=MemoryStore())
    view = agent.chat(thread="t-blocked")
    await view.wait_loaded()
    result = await ask(view, "what is the key?")
    assert result is not None and result.status == "stopped"
    shown = view_text(view)
    assert SECRET not in shown and "sk-proj" not in shown and "checking…" not in shown
    assert "blocked by keys" in shown and "answer withheld: an API key in the answer" in shown
    assert "stopped by guard &#x27;keys&#x27;" in shown or "stopped by guard 'keys'" in shown
    assert not [w for w in all_widgets(view) if isinstance(w, StreamText) and w.text]
    saved = view.saved_copy()  # what the saved notebook shows
    assert "answer withheld: blocked by keys" in saved["text/plain"] and SECRET not in saved["text/plain"]
    assert "blocked by keys" in saved["text/html"] and SECRET not in saved["text/html"]
    # Opened again (a new view of the stored thread): the same label, still no text.
    again = agent.chat(thread="t-blocked")
    await again.wait_loaded()
    assert "blocked by keys" in again.history.value and SECRET not in again.history.value


async def test_a_blocked_prompt_is_marked_in_the_view_and_in_the_history() -> None:
    model = ScriptedModel(["never"])
    agent = Agent(model, guards=[Guard.input(lambda t: block("a customer id") if "C-" in t else None, name="ids")],
                  store=MemoryStore())
    view = agent.chat(thread="t-prompt")
    await view.wait_loaded()
    result = await ask(view, "refund C-1234")
    assert result is not None and result.status == "stopped" and model.requests == []
    blocked = [w for w in all_widgets(view) if isinstance(w, widgets.HTML) and "nbagent-blocked" in w.value]
    assert len(blocked) == 1 and "not sent to the model: a customer id" in blocked[0].value
    again = agent.chat(thread="t-prompt")
    await again.wait_loaded()
    assert "you · blocked" in again.history.value and "blocked by ids" in again.history.value


async def test_the_static_summary_shows_the_trip() -> None:
    agent = Agent(ScriptedModel([f"key {SECRET}"]), guards=[Guard.output(no_keys, name="keys")], store=MemoryStore())
    result = await agent.run("key?")
    html = render_result_html(result)
    assert "blocked by keys" in html and "an API key in the answer" in html and SECRET not in html
    assert "answer withheld" in html
