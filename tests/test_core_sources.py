"""Tool sources in the core (`nbagent.ToolSource`): tools listed when a run first needs them,
merged with the agent's Python tools, listed again when the source says its list changed (also
during a run), with clear errors for clashing names and for a source that cannot list.

A plain in-memory source stands in for an MCP server here (tests/test_mcp*.py use real ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nbagent import Agent, Tool, ToolDefinitionError, ToolSource, ToolSourceError, tool
from nbagent.exceptions import DuplicateToolError
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import MemoryStore


class ListSource:
    """A `ToolSource` whose tools are a list the test changes; counts its listings."""

    def __init__(self, tools: Sequence[Tool], fail: bool = False) -> None:
        self.tools = list(tools)
        self.listed = 0
        self.fail = fail
        self._cached: tuple[Tool, ...] | None = None

    def cached_tools(self) -> Sequence[Tool] | None:
        return self._cached

    async def list_tools(self) -> Sequence[Tool]:
        self.listed += 1
        if self.fail:
            raise ToolSourceError("the server is down", source="ListSource")
        self._cached = tuple(self.tools)
        return self._cached

    def change(self, tools: Sequence[Tool]) -> None:
        """What a list_changed notification does: the list is known to be stale."""
        self.tools = list(tools)
        self._cached = None

    def __repr__(self) -> str:
        return "ListSource()"


def _tool(name: str, reply: str = "ok", **kwargs: Any) -> Tool:
    async def call(**args: Any) -> str:
        return f"{reply} {args}"

    return Tool(name, f"the {name} tool", {"type": "object", "properties": {}}, function=call, **kwargs)


@tool
def local(x: int) -> str:
    """A Python tool."""
    return f"local {x}"


def test_a_source_is_a_tool_source_and_kept_apart_from_python_tools() -> None:
    source = ListSource([_tool("remote")])
    assert isinstance(source, ToolSource)
    agent = Agent(ScriptedModel(["hi"]), tools=[local, source], store=MemoryStore())
    assert list(agent.tools) == ["local"]
    assert agent.tool_sources == (source,)
    assert agent.config().sources is not None
    assert "sources=[ListSource()]" in repr(agent)
    assert source.listed == 0  # nothing is listed before a run needs it
    assert Agent(ScriptedModel(["hi"]), tools=[local]).config().sources is None  # Python only: no work


async def test_tools_are_listed_on_first_run_and_cached_after() -> None:
    source = ListSource([_tool("remote", "from the source")])
    seen: list[list[str]] = []

    def answer(messages: list[Any], request: Any) -> Any:
        seen.append([t["name"] for t in request.tools])
        if messages[-1].kind == "user":
            return [tool_call("remote", q=1), tool_call("local", x=2)]
        return "done: " + " | ".join(m.content for m in messages if m.kind == "tool-result")

    agent = Agent(FunctionModel(answer), tools=[local, source], store=MemoryStore())
    result = await agent.run("go")
    assert result.output == "done: from the source {'q': 1} | local 2"
    assert seen == [["local", "remote"], ["local", "remote"]]
    await agent.run("again")
    assert source.listed == 1  # listed once, reused by the later steps and runs


async def test_a_changed_list_reaches_the_next_model_call_of_the_same_run() -> None:
    source = ListSource([_tool("first")])
    seen: list[list[str]] = []

    def answer(messages: list[Any], request: Any) -> Any:
        seen.append([t["name"] for t in request.tools])
        if len(seen) == 1:
            source.change([_tool("first"), _tool("second")])  # the server said its list changed
            return tool_call("first")
        return "done"

    result = await Agent(FunctionModel(answer), tools=[source], store=MemoryStore()).run("go")
    assert result.status == "completed"
    assert seen == [["first"], ["first", "second"]]
    assert source.listed == 2


async def test_a_source_tool_named_like_another_tool_is_a_clear_error() -> None:
    agent = Agent(ScriptedModel(["hi"]), tools=[local, ListSource([_tool("local")])], store=MemoryStore())
    with pytest.raises(ToolDefinitionError, match=r"named 'local'.*prefix"):
        await agent.run("go")
    two = Agent(ScriptedModel(["hi"]), tools=[ListSource([_tool("x")]), ListSource([_tool("x")])],
                store=MemoryStore())
    with pytest.raises(DuplicateToolError, match="'x'"):
        await two.run("go")


async def test_a_source_tool_may_not_take_the_structured_answers_name() -> None:
    agent = Agent(ScriptedModel(["{}"]), tools=[ListSource([_tool("final_result")])], output_type=dict,
                  store=MemoryStore())
    with pytest.raises(DuplicateToolError, match="final_result"):
        await agent.run("go")


async def test_the_same_source_twice_is_refused() -> None:
    source = ListSource([])
    with pytest.raises(DuplicateToolError, match="given twice"):
        Agent(ScriptedModel(["hi"]), tools=[source, source])


async def test_a_source_that_cannot_list_fails_the_run_before_anything_is_stored() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["hi"]), tools=[ListSource([], fail=True)], store=store)
    with pytest.raises(ToolSourceError, match="the server is down"):
        await agent.run("go", thread="t")
    assert await store.load("t") is None
    with pytest.raises(ToolSourceError):
        agent.run_sync("go")
    events = agent.stream("go")
    with pytest.raises(ToolSourceError):
        async for _ in events:
            pass


async def test_a_source_failing_during_a_run_keeps_the_tools_it_had() -> None:
    source = ListSource([_tool("first")])

    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            source.change([_tool("first")])
            source.fail = True  # the next listing fails: the run goes on with what it had
            return tool_call("first")
        return "done " + messages[-1].content

    result = await Agent(FunctionModel(answer), tools=[source], store=MemoryStore()).run("go")
    assert result.output == "done ok {}"


async def test_source_tools_pause_for_approval_and_resume_like_python_tools() -> None:
    ran: list[dict[str, Any]] = []

    async def write(**args: Any) -> str:
        ran.append(args)
        return "written"

    source = ListSource([Tool("write", "Write.", {"type": "object"}, function=write, requires_approval=True)])
    agent = Agent(ScriptedModel([tool_call("write", path="a.txt"), "done"]), tools=[source], store=MemoryStore())
    paused = await agent.run("write it")
    assert paused.status == "paused" and [p.name for p in paused.pending] == ["write"]
    assert ran == []
    result = await agent.resume(paused, approve=[paused.pending[0]], always_allow=["write"])
    assert result.status == "completed" and ran == [{"path": "a.txt"}]
    assert result.messages[-2].decision == "approved"
