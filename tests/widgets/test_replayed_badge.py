"""The view marks the answers taken from a recording (`nbagent.models.replay`, issue #29) with a
small "replayed" badge: in the live chat view as they come, in the stored history when a view
opens, and in the static summary of a run. The recorded model text stays inert HTML."""

from __future__ import annotations

from typing import Any

from nbagent import Agent, tool
from nbagent.display.html import render_result_html
from nbagent.messages import Message
from nbagent.models import FunctionModel, record, replay, tool_call
from nbagent.store.memory import MemoryStore
from nbagent.widgets import ChatView

from .test_widgets import all_widgets, ask, view_text
from .test_widgets_static import assert_inert

BADGE = 'class="nbagent-replayed"'


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order}: shipped"


def answer(messages: list[Message], info: Any) -> Any:
    if messages[-1].kind == "user":
        return tool_call("lookup", order=42)
    return "**Shipped** <script>alert(1)</script> " + messages[-1].content  # type: ignore[union-attr]


async def recorded_store() -> MemoryStore:
    store = MemoryStore()
    first = await Agent(record(FunctionModel(answer)), tools=[lookup], store=store).run("Where is 42?", thread="rec")
    assert first.status == "completed" and first.steps == 2
    return store


def badges(view: ChatView) -> list[str]:
    return [w.value for w in view.run_log.children if BADGE in getattr(w, "value", "")]


async def test_the_live_view_badges_each_replayed_answer_just_above_it() -> None:
    store = await recorded_store()
    agent = Agent(replay(store, thread="rec"), tools=[lookup], store=store)
    view = agent.chat(thread="again")
    result = await ask(view, "Where is 42?")
    assert result.status == "completed" and all(r.replayed for r in result.usage.calls)
    assert len(badges(view)) == 2
    children = list(view.run_log.children)
    for i, child in enumerate(children):
        if BADGE in getattr(child, "value", ""):
            assert i + 1 < len(children) and BADGE not in getattr(children[i + 1], "value", "")  # the answer follows
    for fragment in badges(view):
        assert_inert(fragment, allow_style_attr=True)
    assert "&lt;script&gt;" in view_text(view)  # the recorded text is escaped as ever
    for w in all_widgets(view):
        state = w.get_state()
        assert not any("<script>" in str(state.get(key, "")) for key in ("value", "html"))


async def test_a_live_answer_after_the_recording_gets_no_badge() -> None:
    store = await recorded_store()
    live = FunctionModel(lambda m, i: "a live answer")
    view = Agent(replay(store, thread="rec", then=live), tools=[lookup], store=store).chat(thread="mixed")
    first = await ask(view, "Where is 42?")
    assert [r.replayed for r in first.usage.calls] == [True, True]
    second = await ask(view, "And order 7?")  # not in the recording: the live model answers
    assert second.output == "a live answer" and [r.replayed for r in second.usage.calls] == [False]
    assert len(badges(view)) == 2


async def test_stored_history_and_the_static_summary_show_the_badge() -> None:
    store = await recorded_store()
    result = await Agent(replay(store, thread="rec"), tools=[lookup], store=store).run("Where is 42?", thread="r2")
    reopened = Agent(FunctionModel(answer), tools=[lookup], store=store).chat(thread="r2")
    await reopened.wait_loaded()
    assert reopened.history.value.count(BADGE) == 2
    assert_inert(reopened.history.value, allow_style_attr=True)
    original = Agent(FunctionModel(answer), tools=[lookup], store=store).chat(thread="rec")
    await original.wait_loaded()
    assert BADGE not in original.history.value and "Shipped" in original.history.value

    html = render_result_html(result)
    assert "2 of 2 model calls" in html and html.count(BADGE) == 3  # the header and each model-call row
    assert_inert(html, allow_style_attr=True)
    assert BADGE not in render_result_html(await Agent(FunctionModel(answer), tools=[lookup]).run("Where is 42?"))
