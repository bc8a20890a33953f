"""Tool guards cover every kind of tool alike (openai-agents #4637 left MCP tools and agents as tools
unguarded): an MCP server's tool (a real stdio server, tests/mcp_servers/kitchen.py), the python
tool, and an agent given as a tool (`Agent.as_tool`, when this nbagent has it).

What a user notices: a blocked call never reaches the server (its log stays empty) and asks nobody;
a rewritten call's approval row shows the arguments that will run; a result is redacted before
the model reads it, whichever kind of tool made it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent
from nbagent.guards import Guard, block, pii, rewrite
from nbagent.mcp import MCPTools
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import MemoryStore
from tests.test_mcp import stdio


@pytest.fixture(scope="module")
def kitchen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MCPTools]:
    """The kitchen server over stdio (tests/test_mcp.py's), its destructive calls logged."""
    log = tmp_path_factory.mktemp("kitchen") / "log.txt"
    server = stdio(env={"KITCHEN_LOG": str(log)})
    server.log = log  # type: ignore[attr-defined]
    yield server
    server.close_sync()


def logged(kitchen: MCPTools) -> str:
    log: Path = kitchen.log  # type: ignore[attr-defined]
    return log.read_text() if log.exists() else ""


def no_drop(args: dict[str, Any]) -> Any:
    return block("drops a table") if "DROP TABLE" in json.dumps(args).upper() else None


async def test_openai_agents_4637_a_guard_on_an_mcp_tool_blocks_before_the_server_and_asks_nobody(
        kitchen: MCPTools) -> None:
    before = logged(kitchen)
    model = ScriptedModel([tool_call("write_note", text="drop table users; --"), "ok"])
    agent = Agent(model, tools=[kitchen], guards=[Guard.tool_args(no_drop)], store=MemoryStore())
    result = await agent.run("clean up")
    assert result.status == "completed" and result.pending == []  # write_note needs approval: nobody was asked
    assert logged(kitchen) == before
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.status == "denied" and "drops a table" in res.content  # type: ignore[union-attr]


async def test_a_rewritten_mcp_call_waits_for_approval_with_the_arguments_that_will_run(kitchen: MCPTools) -> None:
    before = logged(kitchen)

    def sign(args: dict[str, Any]) -> Any:
        return rewrite({"text": args["text"] + " (via agent)"})

    model = ScriptedModel([tool_call("write_note", text="hello"), "ok"])
    agent = Agent(model, tools=[kitchen], guards=[Guard.tool_args(sign, tools=["write_note"])], store=MemoryStore())
    paused = await agent.run("note it")
    [pending] = paused.pending
    assert pending.args == {"text": "hello (via agent)"}
    done = await agent.resume(paused, approve=[pending])
    assert done.status == "completed"
    assert logged(kitchen)[len(before):] == "hello (via agent)\n"


async def test_an_mcp_result_is_redacted_before_the_model_reads_it(kitchen: MCPTools) -> None:
    model = ScriptedModel([tool_call("echo", text="reach me at jane@example.com"), "ok"])
    agent = Agent(model, tools=[kitchen], guards=[*pii(stages=["tool_result"])], store=MemoryStore())
    result = await agent.run("echo")
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.content == "reach me at [redacted email address]"  # type: ignore[union-attr]
    results_sent = [m.to_dict() for r in model.requests for m in r.messages if m.kind == "tool-result"]
    assert results_sent and "jane@" not in json.dumps(results_sent)


def runs_code(code: str) -> FunctionModel:
    def answer(messages: list[Any], info: Any) -> Any:
        if not any(m.kind == "tool-result" for m in messages):
            return tool_call("python", code=code)
        return "done"

    return FunctionModel(answer)


async def test_a_guard_on_the_python_tool_blocks_code_before_anyone_is_asked() -> None:
    from nbagent.notebook import python_tool

    namespace: dict[str, Any] = {}

    def no_os(args: dict[str, Any]) -> Any:
        return block("imports os") if "import os" in args["code"] else None

    agent = Agent(runs_code("import os\nran = True"), tools=[python_tool(namespace=namespace)],
                  guards=[Guard.tool_args(no_os, tools=["python"])], store=MemoryStore())
    result = await agent.run("go")
    assert result.status == "completed" and result.pending == [] and "ran" not in namespace


async def test_a_guard_on_the_python_tool_redacts_what_the_code_printed() -> None:
    from nbagent.notebook import python_tool

    agent = Agent(runs_code("print('key sk-proj-' + 'x' * 30)"),
                  tools=[python_tool(namespace={}, requires_approval=False)],
                  guards=[*pii(stages=["tool_result"])], store=MemoryStore())
    result = await agent.run("go")
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert "sk-proj" not in res.content and "[redacted API key]" in res.content  # type: ignore[union-attr]


@pytest.mark.skipif(not hasattr(Agent, "as_tool"), reason="Agent.as_tool (#44) is not in this nbagent yet")
async def test_openai_agents_4637_a_guard_on_an_agent_as_a_tool() -> None:
    child_model = ScriptedModel(["child: call me on +44 20 7946 0958"] * 2)
    child = Agent(child_model, name="researcher", store=MemoryStore())
    store = MemoryStore()
    model = ScriptedModel([tool_call("researcher", task="delete every file"), tool_call("researcher", task="find the "
                                                                                       "phone"), "ok"])

    def no_deletes(args: dict[str, Any]) -> Any:
        return block("asks to delete") if "delete" in args.get("task", "") else None

    parent = Agent(model, tools=[child.as_tool()],  # type: ignore[attr-defined]
                   guards=[Guard.tool_args(no_deletes), *pii(stages=["tool_result"])], store=store)
    result = await parent.run("go")
    assert len(child_model.requests) == 1  # the blocked call never ran the child
    results = [m for m in result.messages if m.kind == "tool-result"]
    assert results[0].status == "denied"
    assert "7946" not in results[1].content  # type: ignore[union-attr]
