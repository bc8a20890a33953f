"""`nbagent.notebook.settle`: the last cell of a notebook executed headless waits until the runs
started in the background have ended and every chat view shows its thread as stored, and sends
each view's saved copy again from that cell, so the saved file holds the whole conversation.

The first tests drive the registry on one loop, as a kernel's cells would; the last one executes
a notebook with a plain nbclient `NotebookClient` in a real kernel (marked ``notebooks``): a view's
run ends after its cell, and only the settle cell gets its saved copy into the file.
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

import pytest

from nbagent import Agent
from nbagent._settle import on_settle
from nbagent.models import FunctionModel
from nbagent.notebook import settle


def slow_agent(delay: float = 0.2) -> Agent:
    async def answer(messages: Any, info: Any) -> str:
        await asyncio.sleep(delay)
        return f"answered {messages[-1].content}"

    return Agent(FunctionModel(answer), store="memory")


async def test_settle_waits_for_the_runs_started_in_the_background() -> None:
    agent = slow_agent()
    handles = [agent.start("one", thread="a"), agent.start("two", thread="b")]
    await settle()
    assert all(h.done for h in handles)
    assert [h.result.output for h in handles] == ["answered one", "answered two"]  # type: ignore[union-attr]
    await settle()  # nothing going on: returns at once


async def test_hooks_run_after_the_runs_and_a_run_a_hook_starts_is_waited_for() -> None:
    agent = slow_agent(0.05)
    seen: list[str] = []
    later: list[Any] = []

    async def hook() -> None:
        seen.append(f"hook, run done: {first.done}")
        if not later:  # a view sending its queued message: a new run, after the first
            later.append(agent.start("queued", thread="q"))

    remove = on_settle(hook)
    try:
        first = agent.start("first", thread="q")
        await settle()
    finally:
        remove()
    assert seen == ["hook, run done: True", "hook, run done: True"]  # called again after the new run
    assert later[0].done and later[0].result.output == "answered queued"
    await settle()
    assert len(seen) == 2  # removed


async def test_a_hook_of_an_object_that_is_gone_is_dropped() -> None:
    calls: list[str] = []

    class View:
        async def settled(self) -> None:
            calls.append("settled")

    view = View()
    on_settle(view.settled)  # held weakly, as a view's own hook
    await settle()
    del view
    gc.collect()
    await settle()
    assert calls == ["settled"]


async def test_a_view_settles_showing_its_thread_and_sends_its_saved_copy_again(monkeypatch) -> None:
    import IPython.display

    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    monkeypatch.setattr(IPython.display, "update_display",
                        lambda bundle, raw, display_id: sent.append((display_id, bundle["text/plain"])))
    view = slow_agent().chat(thread="t-view")
    view._ipython_display_()  # the live view, then its saved copy (with a display id)
    view.ask("Hello?")
    await settle()
    assert view.result is not None and view.result.status == "completed"
    sent.clear()
    await settle()  # nothing changed: the copy is sent again all the same, from this "cell"
    assert len(sent) == 1 and "you: Hello?" in sent[0][1] and "assistant: answered Hello?" in sent[0][1]
    view.close()
    sent.clear()
    await settle()
    assert sent == []  # a closed view no longer settles



def test_a_view_of_another_loop_is_not_sent_again_by_this_loops_settle(monkeypatch) -> None:
    """A view made on one loop (an earlier test's, a closed kernel's) is left alone by a settle on
    another: it was sent again there, printing its copy into an unrelated run's output."""
    import IPython.display

    sent: list[str] = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    monkeypatch.setattr(IPython.display, "update_display", lambda bundle, raw, display_id: sent.append(display_id))

    async def shown_view() -> Any:
        view = slow_agent(0).chat(thread="t-other-loop")
        view._ipython_display_()
        view.ask("Hello?")
        await settle()
        return view

    view = asyncio.run(shown_view())
    sent.clear()
    asyncio.run(settle())  # another loop: the view is not its to send
    assert sent == []
    view.close()

SETUP = '''\
import asyncio
from nbagent import Agent
from nbagent.models import FunctionModel

async def answer(messages, info):
    await asyncio.sleep(0.5)                  # the run ends after its cell has
    return "The answer, after a while."

agent = Agent(FunctionModel(answer), store="memory")'''


@pytest.mark.notebooks
@pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_NOTEBOOKS") == "1", reason="NBAGENT_SKIP_NOTEBOOKS=1")
def test_a_notebook_executed_headless_saves_the_whole_conversation_with_settle(tmp_path) -> None:
    import nbformat
    from nbclient import NotebookClient

    cells = [SETUP, "view = agent.chat(thread='t1')\nview", "handle = view.ask('Hello?')",
             "later = agent.start('Another?', thread='t2')   # no view, no await",
             "from nbagent.notebook import settle\nawait settle()",
             "print(handle.done, later.done, later.result.output)"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    copy = [o for o in nb.cells[1].outputs if "nbagent-transcript" in o.get("data", {}).get("text/html", "")]
    assert len(copy) == 1, nb.cells[1].outputs
    text = copy[0]["data"]["text/plain"]
    assert "you: Hello?" in text and "assistant: The answer, after a while." in text, text
    assert nb.cells[-1].outputs[0]["text"] == "True True The answer, after a while.\n"
