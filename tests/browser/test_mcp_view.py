"""An MCP server's tool in the chat view, in a real browser (JupyterLab 4, headless Chromium).

The kernel starts the real test server (tests/mcp_servers/kitchen.py) over stdio; the agent's
scripted model asks for ``write_note``, which the server marks destructive, so the row waits
with its arguments and the buttons; clicking Approve runs it on the server and its result shows
in the tool table. The server's untrusted description under the buttons stays text.
"""

from __future__ import annotations

from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE

SERVER = Path(__file__).resolve().parents[1] / "mcp_servers" / "kitchen.py"

SETUP = f'''\
import sys
from nbagent import Agent
from nbagent.mcp import MCPTools
from nbagent.models import FunctionModel, tool_call
from nbagent.store.memory import MemoryStore

kitchen = MCPTools.stdio(sys.executable, [{str(SERVER)!r}], requires_approval={{"untrusted": True}})

def answer(messages, request):
    last = messages[-1]
    if last.kind == "user":
        if "note" in last.content:
            return tool_call("write_note", text="a note from the browser")
        return tool_call("untrusted")
    return "The server said: " + last.content + " " + last.name.upper() + "DONE"

agent = Agent(FunctionModel(answer), tools=[kitchen], store=MemoryStore())
view = agent.chat(thread="mcp-browser")
view
'''


def _rows_text(page) -> str:
    return str(page.eval("() => Array.from(document.querySelectorAll('.nbagent-tool-row'))"
                         ".map(e => e.innerText).join('\\n')"))


def test_approve_an_mcp_tool_in_jupyterlab(jupyter_lab, make_notebook, page_factory):
    page = page_factory(jupyter_lab, make_notebook([SETUP, "kitchen.close_sync()"]))
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")

    page.type_text("write a note")
    page.wait_for(lambda: "needs approval" in _rows_text(page), "the call waiting for approval", timeout=90)
    rows = _rows_text(page)
    assert "write_note" in rows and '"text": "a note from the browser"' in rows
    page.output_buttons("Approve").first.wait_for(state="visible", timeout=30_000)
    page.click("Approve")
    page.wait_text("The server said: wrote 'a note from the browser' WRITE_NOTEDONE", timeout=60)
    page.wait_for(lambda: "wrote 'a note from the browser'" in _rows_text(page), "the result in the table")
    assert "done" in _rows_text(page)

    # the server's description of a tool is shown as text under the buttons, never as markup
    page.type_text("untrusted")
    page.wait_for(lambda: "Untrusted description" in page.output_text(0), "the description", timeout=60)
    assert "<img src=x" in page.output_text(0)  # the markup, as text
    assert page.eval("() => window.__pwned === undefined")
    assert page.eval("() => !document.querySelector('.nbagent-chat img, .nbagent-chat script')")
    page.click("Approve")
    page.wait_text("UNTRUSTEDDONE", timeout=60)
    assert page.eval("() => window.__pwned === undefined")

    page.run_cell(1)  # the server is stopped from the notebook
    page.wait_idle()
    assert "Traceback" not in page.output_text()
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
