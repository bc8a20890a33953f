"""The chat view's widgets keep true without a kernel: a resume
from code disables the buttons on screen, Enter works in the deny reason boxes, an unregistered
tool's row offers only Deny, a running call's time is a ticking span, one restart notice and its
stylesheet, and the copy of the conversation saved with the notebook."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nbagent import Agent
from nbagent.models import FunctionModel
from nbagent.store.memory import MemoryStore
from nbagent.widgets import ChatView
from nbagent.widgets.frame import ViewFrame

from .test_widgets import ask, click, make_agent, press_enter, refund_calls, settle, waiting_rows
from .test_widgets_static import assert_inert


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    refund_calls.clear()


async def test_a_resume_from_code_disables_the_buttons_on_screen_and_shows_the_result() -> None:
    agent = make_agent()
    view = agent.chat(thread="w-code")
    await ask(view, "refund please")
    [row] = waiting_rows(view)
    approve = row.buttons["Approve"]
    assert not approve.disabled and row.actions.layout.display == "flex"
    await agent.resume(thread="w-code", approve=[row.call_id])  # a later cell
    await settle()
    assert approve.disabled and row.actions.layout.display == "none" and row.status == "done"
    assert "refunded 9.5 on order 42" in row.html.value
    await click(approve)  # a click that was already on its way
    assert refund_calls == [(42, 9.5)] and "was already approved" in view.status_line.value
    assert "Error" not in view.status_line.value


async def test_enter_in_the_deny_reason_box_denies_with_the_reason() -> None:
    view = make_agent().chat(thread="w-enter")
    await ask(view, "refund please")
    [row] = waiting_rows(view)
    await click(row.buttons["Deny"])
    row.deny_reason.value = "too expensive"
    press_enter(row.deny_reason)
    await settle()
    result = await view.wait()
    assert result is not None and result.output == "The tool said: denied by the user: too expensive"
    assert refund_calls == []


async def test_enter_in_the_deny_all_reason_box_confirms() -> None:
    view = make_agent().chat(thread="w-enter-all")
    await ask(view, "two refunds")
    await click(view.buttons["Deny all"])
    view.deny_all_reason.value = "no refunds today"
    press_enter(view.deny_all_reason)
    await settle()
    result = await view.wait()
    assert result is not None
    assert result.output == "The tool said: denied by the user: no refunds today | denied by the user: no refunds today"


async def test_the_row_of_a_tool_not_registered_here_offers_only_deny_and_says_why() -> None:
    store = MemoryStore()
    await make_agent(store).run("refund please", thread="w-missing")
    view = Agent(FunctionModel(lambda m, r: "ok"), store=store).chat(thread="w-missing")  # after a restart
    await view.wait_loaded()
    [row] = waiting_rows(view)
    assert set(row.buttons) == {"Deny", "Confirm deny"}
    labels = [getattr(w, "description", "") for w in row.actions.children[1].children]
    assert labels == ["Deny"]
    assert "refund is not a tool of this agent in this kernel" in row.actions.children[0].value


async def test_a_running_call_shows_a_ticking_time_and_a_finished_one_its_duration() -> None:
    view = make_agent().chat(thread="w-tick")
    view.message_box.value = "slow please"
    await click(view.buttons["Send"])
    for _ in range(100):
        await settle()
        if any(r.status == "running" for r in view.rows.values()):
            break
    [row] = view.rows.values()
    assert re.search(r'<span class="nbagent-tick" data-elapsed="\d+\.\d{3}"', row.html.value)
    view.stop()
    await view.wait()
    assert row.status == "cancelled" and "nbagent-tick" not in row.html.value


async def test_one_restart_notice_and_the_stylesheet_that_hides_the_broken_link_icons() -> None:
    view = make_agent().chat(thread="w-frame")
    frame = view.children[0]
    assert isinstance(frame, ViewFrame) and "nbagent-frame" in frame._dom_classes
    assert frame.notice == "kernel restarted: run this cell again to continue thread 'w-frame'"
    css = ViewFrame._css
    assert ".nbagent-chat .jupyter-widgets-disconnected::before" in css and "display: none !important" in css
    assert ".nbagent-chat.jupyter-widgets-disconnected .nbagent-restart-notice" in css
    assert "nbagent-tick" in ViewFrame._esm and "textContent" in ViewFrame._esm and "innerHTML" not in ViewFrame._esm


async def test_the_notebook_keeps_a_readable_copy_of_the_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    shown: list[tuple[str, dict[str, Any], str | None]] = []
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw=False, display_id=None: shown.append(("display", data, display_id)))
    monkeypatch.setattr(IPython.display, "update_display",
                        lambda data, raw=False, display_id=None: shown.append(("update", data, display_id)))
    store = MemoryStore()
    await make_agent(store).run("<img src=x onerror=alert(1)> hello", thread="w-copy")
    view: ChatView = make_agent(store).chat(thread="w-copy")
    view._ipython_display_()  # what a cell ending in `view` does
    (kind1, live, _), (kind2, copy, display_id) = shown
    assert kind1 == kind2 == "display" and display_id is not None
    assert "application/vnd.jupyter.widget-view+json" in live
    assert live["text/plain"] == "nbagent chat view of thread 'w-copy' (live in Jupyter; copy below)"
    assert "ChatView(" not in live["text/plain"]
    await view.wait_loaded()  # the stored conversation arrives: the copy follows
    kind, copy, same_id = shown[-1]
    assert kind == "update" and same_id == display_id
    assert "You said: &lt;img src=x onerror=alert(1)&gt; hello" in copy["text/html"]
    assert_inert(copy["text/html"], allow_style_attr=True)
    assert 'class="nbagent-transcript mathjax_ignore"' in copy["text/html"]
    assert copy["text/plain"].splitlines()[1:] == ["you: <img src=x onerror=alert(1)> hello",
                                                   "assistant: You said: <img src=x onerror=alert(1)> hello"]
    await ask(view, "refund please")  # a run that pauses: the copy shows the call waiting
    kind, copy, _ = shown[-1]
    assert kind == "update" and "refund waits for a decision" in copy["text/plain"]
    assert "waiting" in copy["text/html"]
