"""The chat view of a tree of agents (`Agent.as_tool`), without a kernel: the agent call's row
holds its sub-agent's steps (collapsed), a deep call that waits shows Approve / Deny / Edit in
the top view labelled ``manager1 → researcher → delete_file``, the footer agrees with the run's
usage, and a view opened after a restart shows the same tree from the store."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

import nbagent
from nbagent.store import MemoryStore
from nbagent.widgets import ChatView, StreamText
from tests.test_subagents import Tree

from .test_widgets import ask, click, waiting_rows


def _steps_shown(row: Any) -> bool:
    return row.steps is not None and row.steps.layout.display != "none"


async def test_the_agent_calls_row_holds_its_sub_agents_steps_and_a_deep_approval_runs_once() -> None:
    tree = Tree(2)
    view = tree.boss.chat(thread="t")
    paused = await ask(view, "x")
    assert paused.status == "paused"
    [agent_call] = [r for r in view.rows.values() if r.name == "manager1"]
    assert agent_call.status == "waiting" and agent_call.steps is not None
    [inner_call] = [r for r in view.rows.values() if r.name == "researcher"]
    assert inner_call.call_id.startswith(agent_call.call_id + "/")
    [search] = [r for r in view.rows.values() if r.name == "search"]
    assert search.status == "done" and "found x" in search.html.value
    # The deep call waits in the top view, its rows opened down to it, labelled with its path.
    [row] = waiting_rows(view)
    assert row.pending is not None and row.pending.path == ("boss", "manager1", "researcher")
    assert "manager1 → researcher → delete_file" in row.html.value
    assert {"Approve", "Deny", "Edit"} <= set(row.buttons) and "Always allow" not in row.buttons
    assert _steps_shown(agent_call) and _steps_shown(inner_call)
    await click(row.buttons["Approve"])
    done = await view.wait()
    assert done.status == "completed" and tree.deleted == ["/tmp/x"]
    assert row.status == "done" and agent_call.status == "done"
    # The footer counts the whole tree, as the run's usage does.
    assert view.controller.tally.thread.total_tokens == paused.usage.total_tokens + done.usage.total_tokens
    assert f"{view.controller.tally.thread.total_tokens:,} tokens" in view.footer.value


async def test_the_steps_open_and_close_and_the_childs_answer_streams_inside() -> None:
    tree = Tree(1)
    view = tree.boss.chat(thread="t")
    await ask(view, "x")
    [agent_call] = [r for r in view.rows.values() if r.name == "researcher"]
    toggle = agent_call.steps_toggle
    assert isinstance(toggle, widgets.Button) and toggle.description.endswith("steps of researcher")
    await click(toggle)
    assert not _steps_shown(agent_call) and toggle.description.startswith("▸")
    await click(toggle)
    assert _steps_shown(agent_call) and toggle.description.startswith("▾")
    [row] = waiting_rows(view)
    await click(row.buttons["Approve"])
    await view.wait()
    child = "researched: found x; deleted /tmp/x"
    inside = [w.text for w in agent_call.steps.children if isinstance(w, StreamText)]
    assert inside == [child]  # the child's streamed answer, in its steps
    top = [w.text for w in view.run_log.children if isinstance(w, StreamText)]
    assert top == [f"researcher said: {child}"]  # and not among the top agent's own answers


async def test_an_edit_of_a_deep_call_is_checked_against_the_sub_agents_tool() -> None:
    tree = Tree(2)
    view = tree.boss.chat(thread="t")
    await ask(view, "x")
    [row] = waiting_rows(view)
    await click(row.buttons["Edit"])
    row.edit_area.value = '{"path": 3}'
    await click(row.buttons["Approve edited"])
    assert "path" in row.edit_error.value and not row.decided  # refused inline, nothing sent
    row.edit_area.value = '{"path": "/tmp/safe"}'
    await click(row.buttons["Approve edited"])
    done = await view.wait()
    assert done.status == "completed" and tree.deleted == ["/tmp/safe"]


async def test_a_view_opened_after_a_restart_shows_the_tree_and_the_deep_call_waits_in_it() -> None:
    store = MemoryStore()
    first = Tree(2, store)
    paused = await first.boss.run("x", thread="t")
    again = Tree(2, store)  # a new process: new agents, no result in memory
    view = ChatView(again.boss, thread="t")
    await view.wait_loaded()
    assert "nbagent-subrun" in view.history.value and "steps of" not in view.history.value
    assert "manager1 · paused" in view.history.value and "researcher · paused" in view.history.value
    [row] = waiting_rows(view)
    assert "manager1 → researcher → delete_file" in row.html.value and "Always allow" not in row.buttons
    assert view.controller.tally.thread.total_tokens == paused.usage.total_tokens
    copy = view.saved_copy()["text/html"]
    assert "nbagent-subrun" in copy and "researcher · paused" in copy
    await click(row.buttons["Approve"])
    done = await view.wait()
    assert done.status == "completed" and again.deleted == ["/tmp/x"] and first.deleted == []
    assert "manager1 · completed" in view.saved_copy()["text/html"]
    frame = nbagent.usage_frame(again.boss)
    assert int(frame["input_tokens"].sum() + frame["output_tokens"].sum()) == view.controller.tally.thread.total_tokens
