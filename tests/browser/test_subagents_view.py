"""A tree of agents in the chat view, in a real browser (JupyterLab 4, headless Chromium).

A boss hands the question to its sub-agent ``researcher`` (`Agent(agents=[...])`), whose
``delete_file`` needs approval. The boss's call of the researcher is one row; under it, the
researcher's own steps (its rows and its answer), indented and collapsible; the researcher's call
waits in the top cell labelled ``researcher → delete_file``, and clicking its Approve runs it
once, the researcher answers, then the boss does.
"""

from __future__ import annotations

import os
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE

SETUP = '''\
from nbagent import Agent, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.store.memory import MemoryStore

deleted = []

@tool
def read_note(topic: str) -> str:
    """The note about a topic."""
    return "Tides follow the moon."

@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    deleted.append(path)
    return f"deleted {path}"

def research(messages, request):
    last = messages[-1]
    if last.kind == "user":
        return [tool_call("read_note", topic="tides"), tool_call("delete_file", path="/tmp/tides.old")]
    return "Found: " + " and ".join(m.content for m in messages if m.kind == "tool-result")

def lead(messages, request):
    last = messages[-1]
    if last.kind == "user":
        return tool_call("researcher", task=last.content)
    return "BOSS SAYS " + last.content

researcher = Agent(FunctionModel(research), tools=[read_note, delete_file], name="researcher")
boss = Agent(FunctionModel(lead), agents=[researcher], name="boss", store=MemoryStore())
view = boss.chat(thread="tree-browser")
view
'''

_ROWS = """() => Array.from(document.querySelectorAll('.nbagent-tool-row')).map(e => ({
    text: e.innerText, nested: !!e.closest('.nbagent-subrun'),
    shown: e.offsetParent !== null}))"""


def test_nested_rows_and_a_deep_approval_clicked_in_jupyterlab(jupyter_lab, make_notebook, page_factory):
    page = page_factory(jupyter_lab, make_notebook([SETUP, "print(deleted, view.result.status)"]))
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")

    page.type_text("Research tides")
    page.wait_for(lambda: "researcher → delete_file" in page.output_text(0), "the deep call, labelled", timeout=90)
    rows = page.eval(_ROWS)
    [agent_call] = [r for r in rows if r["text"].startswith("researcher") and not r["nested"]]
    assert "waiting" in agent_call["text"]
    nested = [r for r in rows if r["nested"]]
    assert [r for r in nested if "read_note" in r["text"] and "Tides follow the moon." in r["text"] and r["shown"]]
    [deep] = [r for r in nested if "delete_file" in r["text"]]
    assert deep["shown"] and "needs approval" in deep["text"] and '"path": "/tmp/tides.old"' in deep["text"]
    assert page.output_buttons("Always allow delete_file").count() == 0  # a sub-agent's call: one by one
    if os.environ.get("NBAGENT_BROWSER_SHOTS"):  # a picture to look at, on request
        page.eval("() => document.querySelector('.nbagent-steps-toggle').scrollIntoView()")
        page.screenshot(Path(os.environ["NBAGENT_BROWSER_SHOTS"]) / "subagents_waiting.png", full_page=False)

    page.click("Approve")
    page.wait_text("BOSS SAYS Found: Tides follow the moon. and deleted /tmp/tides.old", timeout=60)
    page.wait_for(lambda: all("done" in r["text"] for r in page.eval(_ROWS)), "every row done")

    # The steps fold away under their row, and come back.
    page.click("▾ steps of researcher")
    page.wait_for(lambda: not any(r["shown"] for r in page.eval(_ROWS) if r["nested"]), "the steps folded")
    page.click("▸ steps of researcher")
    page.wait_for(lambda: all(r["shown"] for r in page.eval(_ROWS) if r["nested"]), "the steps shown again")

    page.run_cell(1)
    page.wait_idle()
    assert "['/tmp/tides.old'] completed" in page.output_text(1)  # the approved call ran once
    assert "Traceback" not in page.output_text()
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
