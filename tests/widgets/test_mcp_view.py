"""An MCP server's tools in the chat view and the static summary, without a kernel: a destructive
tool waits with its arguments, Approve runs it on the server, and text the server wrote (tool
descriptions, results) renders inert. The real-browser version: tests/browser/test_mcp_view.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent
from nbagent.mcp import MCPTools
from nbagent.models import FunctionModel, tool_call
from nbagent.store import MemoryStore
from nbagent.widgets import render_result_html

from .test_widgets import ask, click, view_text, waiting_rows
from .test_widgets_static import assert_inert

TESTS = Path(__file__).parent.parent
SERVER = TESTS / "mcp_servers" / "kitchen.py"
PAYLOADS: list[str] = json.loads((TESTS / "fixtures" / "injection_payloads.json").read_text("utf-8"))


@pytest.fixture(scope="module")
def kitchen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MCPTools]:
    log = tmp_path_factory.mktemp("kitchen-view") / "log.txt"
    tools = MCPTools.stdio(sys.executable, [str(SERVER)], env={"KITCHEN_LOG": str(log)})
    tools.log = log  # type: ignore[attr-defined]
    yield tools
    tools.close_sync()


def answer(messages: list[Any], request: Any) -> Any:
    last = messages[-1]
    if last.kind == "user":
        if last.content.startswith("untrusted"):
            return [tool_call("untrusted"), tool_call("echo", text="\n".join(PAYLOADS))]
        return tool_call("write_note", text="from the view")
    return "The server said: " + " | ".join(m.content for m in messages[-2:] if m.kind == "tool-result")


async def test_approve_in_the_view_runs_the_mcp_tool(kitchen: MCPTools) -> None:
    view = Agent(FunctionModel(answer), tools=[kitchen], store=MemoryStore()).chat(thread="t-mcp-view")
    result = await ask(view, "write a note")
    assert result.status == "paused"
    [row] = waiting_rows(view)
    assert row.status == "needs approval" and "&quot;text&quot;: &quot;from the view&quot;" in row.html.value
    await click(row.buttons["Approve"])
    result = await view.wait()
    assert result.status == "completed"
    assert row.status == "done" and "wrote &#x27;from the view&#x27;" in row.html.value
    assert "The server said: wrote 'from the view'" in view_text(view)
    assert kitchen.log.read_text() == "from the view\n"  # type: ignore[attr-defined]


async def test_server_text_renders_inert_in_the_view_and_the_summary(kitchen: MCPTools) -> None:
    untrusted = next(t for t in await kitchen.list_tools() if t.name == "untrusted")
    assert "<img src=x" in untrusted.description  # the server's words, kept as they are
    asking = MCPTools.stdio(sys.executable, [str(SERVER)], requires_approval={"untrusted": True})
    asking._session, asking._lock = kitchen._session, kitchen._lock  # the same server process
    view = Agent(FunctionModel(answer), tools=[asking], store=MemoryStore()).chat(thread="t-mcp-inert")
    result = await ask(view, "untrusted text please")
    assert result.status == "paused"  # the description the person reads is the server's text
    [row] = waiting_rows(view)
    [shown] = [w.value for w in row.actions.children if "Untrusted description" in getattr(w, "value", "")]
    assert "untrusted: Untrusted description &lt;img src=x" in shown
    assert_inert(shown, allow_style_attr=True)
    assert_inert(row.html.value, allow_style_attr=True)
    await click(row.buttons["Approve"])
    result = await view.wait()
    assert result.status == "completed"
    contents = {m.name: m.content for m in result.messages if m.kind == "tool-result"}
    assert "<script>window.__pwned=2</script>" in contents["untrusted"] and PAYLOADS[0] in contents["echo"]
    for row in view.rows.values():
        assert_inert(row.html.value, allow_style_attr=True)
    assert_inert(render_result_html(result), allow_style_attr=True)


async def test_an_image_from_the_server_shows_in_its_row(kitchen: MCPTools) -> None:
    def draw(messages: list[Any], request: Any) -> Any:
        return tool_call("picture") if messages[-1].kind == "user" else "a picture"

    view = Agent(FunctionModel(draw), tools=[kitchen], store=MemoryStore()).chat(thread="t-mcp-image")
    result = await ask(view, "draw")
    if result.status == "paused":  # the server does not mark it read-only: a person approves it
        [row] = waiting_rows(view)
        await click(row.buttons["Approve"])
        result = await view.wait()
    assert result.status == "completed"
    [row] = view.run_log.rows.values()
    assert row.status == "done"
    assert 'class="nbagent-image" src="data:image/png;base64,' in row.html.value  # the picture, under the row
