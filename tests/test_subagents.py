"""Sub-agents (`Agent.as_tool`, ``Agent(agents=[...])``): an agent as a tool, with the child's
steps, approvals and cost in the parent's run.

The peers' bugs, each named in its test: an approval inside a child that is skipped, lost or
resumed wrongly (openai-agents-python PR #4414: two and three agent-tool edges; auxilia #301: a
child built without a checkpointer silently skipped its approval), usage that is not rolled up
(claude-agent-sdk-typescript #347), a child's events invisible while it streams
(openai-agents-python #864), a child re-run from scratch (langgraph #4796). Only the shipped fakes,
`MemoryStore` and `SQLiteStore`; the kill -9 cases are in tests/test_subagents_faults.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import nbagent
from nbagent import (
    Agent,
    ArgumentsMismatchError,
    InvalidArgumentsError,
    NotResumableError,
    PendingCall,
    RunResult,
    UnknownCallError,
    UserError,
    tool,
)
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import MemoryStore, SQLiteStore, Store
from tests.helpers import assert_valid_history


def delegate(to: str) -> Any:
    """A model that hands the prompt to the agent tool `to`, then reports what it said."""
    def answer(messages: list[Any], info: Any) -> Any:
        last = messages[-1]
        if last.kind == "user":
            return tool_call(to, task=last.content)
        return f"{to} said: {last.content}"
    return answer


class Tree:
    """boss -> (edges - 1 managers) -> researcher, whose ``delete_file`` needs approval.

    ``edges`` is the number of agent-tool edges between the top run and the protected tool
    (PR #4414's words): 1 is boss -> researcher. Counts every real run of the researcher's tools.
    """

    def __init__(self, edges: int = 1, store: Store | None = None) -> None:
        self.deleted: list[str] = []
        self.searched: list[str] = []
        self.researcher_saw: list[str] = []

        @tool(requires_approval=True)
        def delete_file(path: str) -> str:
            """Delete a file."""
            self.deleted.append(path)
            return f"deleted {path}"

        @tool
        def search(q: str) -> str:
            """Search the web."""
            self.searched.append(q)
            return f"found {q}"

        def research(messages: list[Any], info: Any) -> Any:
            last = messages[-1]
            if last.kind == "user":
                return [tool_call("search", q=last.content), tool_call("delete_file", path=f"/tmp/{last.content}")]
            results = [m.content for m in messages if m.kind == "tool-result"]
            self.researcher_saw.extend(results)
            return "researched: " + "; ".join(results)

        agent = Agent(FunctionModel(research), tools=[search, delete_file], name="researcher")
        self.names = ["researcher"]
        for level in range(1, edges):
            name = f"manager{level}"
            agent = Agent(FunctionModel(delegate(agent.name or "")), agents=[agent], name=name)
            self.names.insert(0, name)
        self.boss = Agent(FunctionModel(delegate(agent.name or "")), agents=[agent], name="boss",
                          store=store or MemoryStore())
        self.path = ("boss", *self.names)


async def run_tree(boss: Agent, *, stream: bool, prompt: str = "x", **resume: Any) -> tuple[RunResult, list[Any]]:
    """`run` (or `resume` with `resume` given) to the end, streamed or not: the result and events."""
    events: list[Any] = []
    if not stream:
        result = await (boss.resume(**resume) if resume else boss.run(prompt, thread="t"))
        return result, events
    source = boss.resume_stream(**resume) if resume else boss.stream(prompt, thread="t")
    async for event in source:
        events.append(event)
    return events[-1].result, events


# ---------------------------------------------------------------------------------- the tool itself
async def test_as_tool_is_named_after_the_agent_and_takes_one_task() -> None:
    researcher = Agent(ScriptedModel(["x"]), name="researcher")
    t = researcher.as_tool(description="Research one question")
    assert (t.name, t.description) == ("researcher", "Research one question")
    assert t.parameters["required"] == ["task"] and list(t.parameters["properties"]) == ["task"]
    assert researcher.as_tool(name="look_up").name == "look_up"
    assert "researcher" in researcher.as_tool().description
    with pytest.raises(UserError, match="needs a name"):
        Agent(ScriptedModel(["x"])).as_tool()
    with pytest.raises(UserError, match="max_depth"):
        researcher.as_tool(max_depth=0)
    boss = Agent(ScriptedModel(["x"]), agents=[researcher])
    assert list(boss.tools) == ["researcher"] and boss.tools["researcher"].continues
    with pytest.raises(UserError, match="agents= takes Agents"):
        Agent(ScriptedModel(["x"]), agents=["researcher"])  # type: ignore[list-item]


async def test_the_childs_answer_is_the_calls_result_and_a_structured_one_is_json() -> None:
    class Finding(BaseModel):
        topic: str
        score: int

    finder = Agent(ScriptedModel([tool_call("final_result", topic="tea", score=3)]), name="finder",
                   output_type=Finding)
    boss = Agent(FunctionModel(delegate("finder")), agents=[finder], name="boss", store=MemoryStore())
    result = await boss.run("tea?", thread="t")
    assert result.status == "completed"
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert json.loads(res.content) == {"topic": "tea", "score": 3} and not res.is_error
    assert result.output == 'finder said: {"topic": "tea", "score": 3}'
    assert result.subagents[res.call_id].output == Finding(topic="tea", score=3)


async def test_invalid_task_arguments_go_back_to_the_model() -> None:
    researcher = Agent(ScriptedModel(["never"]), name="researcher")
    boss = Agent(ScriptedModel([tool_call("researcher", task=3, id="c1"), "ok"]), agents=[researcher],
                 store=MemoryStore())
    result = await boss.run("go")
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.is_error and "task" in res.content and result.output == "ok"


async def test_called_outside_a_run_the_tool_runs_the_agent_on_its_own_store() -> None:
    researcher = Agent(ScriptedModel(["plain answer"]), name="researcher", store=MemoryStore())
    assert await researcher.as_tool().function(task="q") == "plain answer"  # type: ignore[misc]


# ----------------------------------------------------------------------- approvals (PR #4414's spec)
@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
@pytest.mark.parametrize("edges", [1, 2, 3])
async def test_pr4414_approve_a_call_behind_agent_tool_edges_runs_it_exactly_once(edges: int, stream: bool) -> None:
    tree = Tree(edges)
    paused, events = await run_tree(tree.boss, stream=stream)
    assert paused.status == "paused" and tree.deleted == [] and tree.searched == ["x"]
    [p] = paused.pending
    assert (p.name, p.args, p.path, p.reason) == ("delete_file", {"path": "/tmp/x"}, tree.path, "approval")
    assert p.label == " → ".join((*tree.names, "delete_file")) and p.id.count("/") == edges
    if stream:
        assert [e.kind for e in events][-2:] == ["approval-requested", "run-paused"]
        assert events[-2].pending == p and events[-2].path == tree.path and events[-1].path == ("boss",)

    done, events = await run_tree(tree.boss, stream=stream, thread="t", approve=[p])
    assert done.status == "completed" and tree.deleted == ["/tmp/x"] and tree.searched == ["x"]
    assert "deleted /tmp/x" in done.output
    if stream:
        assert events[-1].kind == "run-completed" and events[-1].path == ("boss",)
    # A second resume is refused and runs nothing again.
    with pytest.raises(NotResumableError):
        await tree.boss.resume(paused, approve=[p])
    with pytest.raises(NotResumableError):
        await tree.boss.resume(thread="t")
    assert tree.deleted == ["/tmp/x"]


@pytest.mark.parametrize("edges", [1, 2, 3])
async def test_pr4414_deny_behind_agent_tool_edges_reaches_the_childs_model(edges: int) -> None:
    tree = Tree(edges)
    paused = await tree.boss.run("x", thread="t")
    [p] = paused.pending
    done = await tree.boss.resume(paused, deny={p.id: "keep that file"})
    assert done.status == "completed" and tree.deleted == []
    assert any(seen.startswith("denied by the user: keep that file") for seen in tree.researcher_saw)
    assert "denied by the user: keep that file" in done.output


@pytest.mark.parametrize("edges", [1, 2, 3])
async def test_pr4414_edit_behind_agent_tool_edges_runs_the_edited_call_once(edges: int) -> None:
    tree = Tree(edges)
    paused = await tree.boss.run("x", thread="t")
    [p] = paused.pending
    with pytest.raises(InvalidArgumentsError):  # checked against the researcher's own tool
        await tree.boss.resume(paused, edit={p.id: {"path": 3}})
    done = await tree.boss.resume(paused, edit={p.id: {"path": "/tmp/safe"}})
    assert done.status == "completed" and tree.deleted == ["/tmp/safe"]


@pytest.mark.parametrize("edges", [1, 3])
async def test_pr4414_restart_between_pause_and_approval(tmp_path: Path, edges: int) -> None:
    """A new process (new agents, a new store object on the same file) finds the deep call
    waiting, with its path, and the decision reaches its owner."""
    first = Tree(edges, SQLiteStore(tmp_path / "t.db"))
    paused = await first.boss.run("x", thread="t")
    await first.boss.store.close()

    again = Tree(edges, SQLiteStore(tmp_path / "t.db"))
    [p] = await again.boss.pending("t")
    assert p == paused.pending[0] and p.path == again.path
    with pytest.raises(ArgumentsMismatchError):
        await again.boss.resume(thread="t", approve=[PendingCall(p.id, p.name, {"path": "/etc"}, path=p.path)])
    with pytest.raises(UnknownCallError):
        await again.boss.resume(thread="t", approve=[p.id + "x"])
    done = await again.boss.resume(thread="t", approve=[p.id])
    assert done.status == "completed" and again.deleted == ["/tmp/x"] and first.deleted == []
    loaded = await again.boss.store.load("t")
    assert loaded is not None and loaded.meta.decisions == {} and loaded.meta.pending == []
    await again.boss.store.close()


async def test_undecided_deep_calls_wait_on_and_own_calls_wait_beside_them() -> None:
    """Two waiting calls, the top agent's own and one two edges down: deciding one leaves the
    other waiting (the child's call is asked again, never run without a decision)."""
    tree = Tree(2)
    ran: list[str] = []

    @tool(requires_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append("pay")
        return "paid"

    tree.boss.model = FunctionModel(lambda m, i: [tool_call("manager1", task="x"), tool_call("pay", amount=3)]
                                    if m[-1].kind == "user" else "boss done")
    tree.boss.tools["pay"] = pay
    paused = await tree.boss.run("x", thread="t")
    assert sorted(p.label for p in paused.pending) == ["manager1 → researcher → delete_file", "pay"]
    own = next(p for p in paused.pending if p.name == "pay")
    assert own.path == ("boss",)
    deep = next(p for p in paused.pending if p.name == "delete_file")
    still = await tree.boss.resume(paused, approve=[own])
    assert still.status == "paused" and ran == ["pay"] and tree.deleted == []
    assert [p.id for p in still.pending] == [deep.id]
    done = await tree.boss.resume(still, approve=[deep])
    assert done.status == "completed" and tree.deleted == ["/tmp/x"] and ran == ["pay"]
    assert_valid_history(done.messages)


async def test_auxilia301_a_child_with_no_store_and_no_policy_of_its_own_still_pauses_the_top(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auxilia #301: a deepagents sub-agent built without a checkpointer silently skipped its
    approval. Here the child has no store and no approval settings: its gated tool pauses the
    top run, and its thread lives in the parent's store (no file of its own is made)."""
    monkeypatch.chdir(tmp_path)
    tree = Tree(1)
    sub = tree.boss.tools["researcher"].agent  # type: ignore[attr-defined]
    assert sub._store is None
    paused = await tree.boss.run("x", thread="t")
    assert paused.status == "paused" and tree.deleted == []
    assert sub._store is None and not (tmp_path / ".nbagent").exists()
    assert await tree.boss.store.load("t/" + paused.pending[0].id.split("/")[0]) is not None


async def test_a_blocking_run_sync_returns_paused_for_a_deep_call() -> None:
    tree = Tree(2)
    result = await asyncio.to_thread(tree.boss.run_sync, "x", thread="t")
    assert result.status == "paused" and tree.deleted == []


async def test_a_failing_approval_policy_inside_a_child_asks_the_person() -> None:
    def broken(args: Any) -> bool:
        raise RuntimeError("policy bug")

    ran: list[str] = []
    gated = tool(lambda: ran.append("x") or "ran", name="gated", requires_approval=broken)
    child = Agent(ScriptedModel([tool_call("gated", id="g1"), "child done"]), tools=[gated], name="child")
    boss = Agent(FunctionModel(delegate("child")), agents=[child], store=MemoryStore())
    paused = await boss.run("go")
    assert paused.status == "paused" and ran == [] and paused.pending[0].path == ("agent", "child")


# ------------------------------------------------------------------------------------------ events
async def test_openai864_the_childs_events_stream_live_with_their_path() -> None:
    """openai-agents-python #864: a child's events were invisible while it streamed."""
    @tool
    def search(q: str) -> str:
        """Search."""
        return f"r {q}"

    researcher = Agent(FunctionModel(lambda m, i: tool_call("search", q="a") if m[-1].kind == "user"
                                     else "found it all"), tools=[search], name="researcher")
    boss = Agent(FunctionModel(delegate("researcher")), agents=[researcher], name="boss", store=MemoryStore())
    events = [e async for e in boss.stream("q", thread="t")]
    kinds = [(e.kind, e.path) for e in events]
    child = ("boss", "researcher")
    agent_call = next(e.call for e in events if e.kind == "tool-call-started" and e.path == ("boss",))
    finished = kinds.index(("tool-call-finished", ("boss",)))
    # The child's steps come between the agent call's start and its end, in order.
    inside = [k for k in kinds[:finished] if k[1] == child]
    assert inside[:3] == [("model-response", child), ("usage", child), ("tool-call-started", child)]
    assert ("text-delta", child) in inside and inside[-1] == ("usage", child)
    child_calls = [e.call.id for e in events if e.kind == "tool-call-started" and e.path == child]
    assert all(i.startswith(agent_call.id + "/") for i in child_calls)
    assert "".join(e.delta for e in events if e.kind == "text-delta" and e.path == child) == "found it all"
    assert all(e.path for e in events) and events[-1].kind == "run-completed" and events[-1].path == ("boss",)
    assert [e.kind for e in events if e.kind.startswith("run-")] == ["run-started", "run-completed"]


async def test_every_event_has_a_path_even_for_an_agent_with_no_name() -> None:
    agent = Agent(ScriptedModel(["hi"]), store=MemoryStore())
    assert {e.path for e in [e async for e in agent.stream("x")]} == {("agent",)}


# ------------------------------------------------------------------------------------------- usage
async def test_claude347_usage_rolls_up_and_every_sum_agrees(tmp_path: Path) -> None:
    """claude-agent-sdk-typescript #347: usage stayed flat while cost grew. Here every row says
    whose it is, and the run's usage, the frame and the store agree to the token."""
    tree = Tree(2, SQLiteStore(tmp_path / "t.db"))
    for agent in (tree.boss, tree.boss.tools["manager1"].agent,  # type: ignore[attr-defined]
                  tree.boss.tools["manager1"].agent.tools["researcher"].agent):  # type: ignore[attr-defined]
        agent.model = FunctionModel(agent.model.function, model_name="gpt-4.1-mini")  # type: ignore[attr-defined]
        agent.prices = {"gpt-4.1-mini": {"input": 0.4, "output": 1.6}}
    paused = await tree.boss.run("x", thread="t")
    done = await tree.boss.resume(paused, approve=paused.pending)
    rows = done.usage.calls
    assert {(r.agent, r.depth) for r in rows} == {("boss", 0), ("manager1", 1), ("researcher", 2)}
    by_thread = {r.thread: r for r in rows}
    manager_call = next(r.parent_call_id for r in rows if r.agent == "manager1")
    assert by_thread["t"].parent_call_id is None and manager_call in {c.id for m in done.messages
                                                                      if m.kind == "assistant" for c in m.tool_calls}
    frame = nbagent.usage_frame(done)
    assert int(frame["input_tokens"].sum()) == done.usage.input_tokens
    assert int(frame["output_tokens"].sum()) == done.usage.output_tokens
    assert frame["cost_total"].sum() == pytest.approx(done.usage.cost_total)
    assert frame.groupby("agent", observed=True)["depth"].first().to_dict() == {
        "boss": 0, "manager1": 1, "researcher": 2}
    # The store holds the same rows, each in its own thread (both runs of the tree: the resume's
    # and the pause's).
    both = nbagent.usage_frame([paused, done])
    stored = nbagent.usage_frame(tree.boss)  # the agent's threads: its own and its sub-agents'
    assert sorted(tree.boss.own_threads()) == sorted({"t", *(r.thread for r in rows)})
    assert int(stored["input_tokens"].sum()) == int(both["input_tokens"].sum())
    assert stored["cost_total"].sum() == pytest.approx(both["cost_total"].sum())
    await tree.boss.store.close()


@pytest.mark.parametrize("budget", ["token_budget", "cost_budget"])
async def test_a_budget_counts_the_whole_tree(budget: str) -> None:
    """A child that keeps calling tools stops when the top's budget is spent; the top stops too."""
    loops: list[int] = []
    busy = tool(lambda: loops.append(1) or "more", name="busy")
    child = Agent(FunctionModel(lambda m, i: tool_call("busy")), tools=[busy], name="child", max_steps=100,
                  prices={"function": {"input": 1000, "output": 1000}})
    limit = {"token_budget": 200} if budget == "token_budget" else {"cost_budget": 0.2}
    boss = Agent(FunctionModel(delegate("child")), agents=[child], name="boss", store=MemoryStore(), **limit)
    result = await boss.run("loop please")
    assert result.status == "stopped" and result.stop_reason == budget
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.is_error and f"stopped before its answer ({budget})" in res.content
    child_rows = [r for r in result.usage.calls if r.agent == "child"]
    assert 1 < len(child_rows) < 100 and len(loops) == len(child_rows)
    if budget == "token_budget":
        before_last = result.usage.total_tokens - child_rows[-1].total_tokens
        assert before_last < 200 <= result.usage.total_tokens


# ------------------------------------------------------------------------------- parallel children
@pytest.mark.parametrize("depth", [1, 2])
async def test_parallel_children_run_concurrently_each_in_its_own_thread(depth: int) -> None:
    """Two agent calls of one answer run at once (each child's tool waits for the other's), at
    depth 1 and, below each of them, two more at depth 2."""
    inside: list[str] = []
    width = 2 if depth == 1 else 4
    everyone = asyncio.Event()

    @tool
    async def work(name: str) -> str:
        """Work."""
        inside.append(name)
        if len(inside) == width:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 10)  # only when all run together
        return f"{name} worked"

    def worker(messages: list[Any], info: Any) -> Any:
        last = messages[-1]
        return tool_call("work", name=last.content) if last.kind == "user" else f"done {last.content}"

    leaf = Agent(FunctionModel(worker), tools=[work], name="leaf")
    child = leaf
    if depth == 2:
        def fan(messages: list[Any], info: Any) -> Any:
            last = messages[-1]
            if last.kind == "user":
                return [tool_call("leaf", task=f"{last.content}.a"), tool_call("leaf", task=f"{last.content}.b")]
            return "; ".join(m.content for m in messages if m.kind == "tool-result")
        child = Agent(FunctionModel(fan), agents=[leaf], name="mid")
    boss = Agent(FunctionModel(lambda m, i: [tool_call(child.name or "", task="one"), tool_call(child.name or "",
                                             task="two")] if m[-1].kind == "user" else "all done"),
                 agents=[child], name="boss", store=MemoryStore())
    result = await asyncio.wait_for(boss.run("go", thread="t"), 30)
    assert result.status == "completed" and sorted(inside) == sorted(
        ["one", "two"] if depth == 1 else ["one.a", "one.b", "two.a", "two.b"])
    threads = {r.thread for r in result.usage.calls}
    assert len(threads) == 1 + 2 + (4 if depth == 2 else 0)
    assert len(result.subagents) == 2
    if depth == 2:
        assert all(len(r.subagents) == 2 for r in result.subagents.values())


# ---------------------------------------------------------------------------- cancel, limits, errors
async def test_cancelling_the_parent_cancels_the_child_and_the_ledgers_say_so() -> None:
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Slow."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    child = Agent(ScriptedModel([tool_call("slow", id="s1"), "x"]), tools=[slow], name="child")
    boss = Agent(ScriptedModel([tool_call("child", task="go", id="c1"), "x"]), agents=[child], name="boss",
                 store=MemoryStore())
    handle = boss.start("go", thread="t")
    await asyncio.wait_for(started.wait(), 10)
    handle.cancel()
    result = await asyncio.wait_for(handle.wait(), 10)
    assert result is not None and result.status == "cancelled"
    top = await boss.store.load("t")
    sub = await boss.store.load("t/c1")
    assert top is not None and sub is not None
    assert top.ledger["c1"].status == "cancelled" and sub.ledger["s1"].status == "cancelled"
    assert sub.meta.status == "cancelled"
    assert_valid_history(top.messages) and assert_valid_history(sub.messages)


async def test_an_agent_listing_itself_stops_at_the_depth_limit_cleanly() -> None:
    def again(messages: list[Any], info: Any) -> Any:
        last = messages[-1]
        return tool_call("me", task="deeper") if last.kind == "user" else f"up: {last.content[:60]}"

    me = Agent(FunctionModel(again), name="me", store=MemoryStore())
    me.tools["me"] = me.as_tool()
    result = await asyncio.wait_for(me.run("go", thread="t"), 30)
    assert result.status == "completed"
    depths = {r.depth for r in result.usage.calls}
    assert depths == {0, 1, 2, 3, 4, 5}
    deepest = result
    for _ in range(5):
        [deepest] = deepest.subagents.values()
    [res] = [m for m in deepest.messages if m.kind == "tool-result"]
    assert res.is_error and "nest 5 deep" in res.content
    shallow = Agent(FunctionModel(again), name="me", store=MemoryStore())
    shallow.tools["me"] = shallow.as_tool(max_depth=1)
    result = await shallow.run("go")
    assert {r.depth for r in result.usage.calls} == {0, 1}


async def test_a_failing_child_gives_the_parent_an_error_result_and_the_parent_goes_on() -> None:
    from nbagent.exceptions import AuthenticationError

    child = Agent(ScriptedModel([AuthenticationError("bad key", status_code=401)]), name="child")
    boss = Agent(FunctionModel(delegate("child")), agents=[child], name="boss", store=MemoryStore())
    result = await boss.run("go")
    assert result.status == "completed"
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.is_error and res.content.startswith("SubAgentError: child failed: AuthenticationError")
    assert result.output.startswith("child said: SubAgentError")
    assert result.subagents[res.call_id].status == "failed"


async def test_max_steps_retry_and_output_type_are_each_childs_own() -> None:
    looping = Agent(FunctionModel(lambda m, i: tool_call("noop")), tools=[tool(lambda: "ok", name="noop")],
                    name="looping", max_steps=2)
    boss = Agent(FunctionModel(delegate("looping")), agents=[looping], name="boss", max_steps=5,
                 store=MemoryStore())
    result = await boss.run("go")
    assert result.status == "completed" and result.steps == 2
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert "looping stopped before its answer (max_steps)" in res.content
    assert len([r for r in result.usage.calls if r.agent == "looping"]) == 2


# ----------------------------------------------------------------------------------- record, replay
async def test_record_and_replay_a_whole_tree(tmp_path: Path) -> None:
    """Each agent's model recorded (the child's calls kept with the child's thread, in the
    parent's store); replayed by new agents, the tree runs again from the recording alone."""
    from nbagent.models import record, replay

    def build(model_for: Any, store: Store) -> Agent:
        @tool
        def search(q: str) -> str:
            """Search."""
            return f"found {q}"

        def research(messages: list[Any], info: Any) -> Any:
            return tool_call("search", q="tea") if messages[-1].kind == "user" else f"notes: {messages[-1].content}"

        researcher = Agent(model_for(FunctionModel(research, model_name="r-model")), tools=[search],
                           name="researcher")
        return Agent(model_for(FunctionModel(delegate("researcher"), model_name="b-model")), agents=[researcher],
                     name="boss", store=store)

    recorded = await build(record, SQLiteStore(tmp_path / "rec.db")).run("tea?", thread="t")
    assert recorded.output == "researcher said: notes: found tea"
    source = SQLiteStore(tmp_path / "rec.db")
    assert {r["thread"] for r in await source.recordings()} == {"t", f"t/{next(iter(recorded.subagents))}"}
    replayed = await build(lambda model: replay(source), MemoryStore()).run("tea?", thread="t")
    assert replayed.output == recorded.output
    assert [r.replayed for r in replayed.usage.calls] == [True] * 4
    assert [(r.agent, r.depth) for r in replayed.usage.calls] == [(r.agent, r.depth) for r in recorded.usage.calls]
    await source.close()


async def test_a_client_tools_question_inside_a_child_is_answered_through_the_top() -> None:
    from nbagent import Tool

    ask = Tool.client("ask_user", "Ask the person a question.", {"type": "object", "properties": {
        "question": {"type": "string"}}, "required": ["question"]})
    child = Agent(FunctionModel(lambda m, i: tool_call("ask_user", question="Which colour?", id="q1")
                                if m[-1].kind == "user" else f"they like {m[-1].content}"),
                  tools=[ask], name="stylist")
    boss = Agent(FunctionModel(delegate("stylist")), agents=[child], name="boss", store=MemoryStore())
    paused = await boss.run("paint it", thread="t")
    [p] = paused.pending
    assert (p.reason, p.path, p.label) == ("client", ("boss", "stylist"), "stylist → ask_user")
    with pytest.raises(UserError, match="client tool"):
        await boss.resume(paused, approve=[p])
    done = await boss.resume(paused, results={p.id: "blue"})
    assert done.output == "stylist said: they like blue"
