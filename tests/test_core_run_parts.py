"""The run's parts: a planner that changes nothing, a config frozen for real, and the three
parts of the run state (what is stored, the machinery, the outcome)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nbagent import Agent, Decisions, tool
from nbagent._run.plan import plan
from nbagent._run.state import RunOutcome, RunState, RunWork, StoredThread
from nbagent.approvals import Decision, PendingCall, args_hash
from nbagent.messages import AssistantMessage, ToolCall, UserMessage
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import MemoryStore
from nbagent.store.base import LedgerEntry


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


@tool(requires_approval=True)
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


def _thread_with(calls: list[ToolCall], **fields: Any) -> StoredThread:
    return StoredThread("t", [UserMessage("go"), AssistantMessage(tool_calls=calls)], **fields)


def test_plan_changes_nothing_and_returns_every_write() -> None:
    agent = Agent(ScriptedModel(["ok"]), tools=[lookup, book], store=MemoryStore())
    config = agent.config()
    started = ToolCall.of("lookup", {"city": "Rome"}, id="c0")  # started before a crash
    denied = ToolCall.of("book", {"city": "Oslo"}, id="c1")
    waiting = ToolCall.of("book", {"city": "Paris"}, id="c2")
    runs = ToolCall.of("lookup", {"city": "Paris"}, id="c3")
    unknown = ToolCall.of("gone", {}, id="c4")
    calls = [started, denied, waiting, runs, unknown]
    thread = _thread_with(
        calls,
        ledger={"c0": LedgerEntry("c0", "lookup", args_hash(started.args), "started")},
        decisions={"c1": Decision("deny", args_hash(denied.args), reason="not now")},
    )
    before = copy.deepcopy(thread)

    decided = plan(config, thread, calls)

    assert thread == before  # pure: the stored thread is as it was
    assert [r.call_id for r in decided.results] == ["c0", "c1", "c4"]
    assert [r.status for r in decided.results] == ["interrupted", "denied", "failed"]
    assert [p.id for p in decided.pending] == ["c2"]
    assert [item.call.id for item in decided.to_run] == ["c3"]
    assert decided.used == ["c1"]
    assert [(e.call_id, e.status) for e in decided.ledger] == [
        ("c0", "interrupted"), ("c1", "denied"), ("c3", "started")]
    assert not decided.completes


def test_plan_of_a_structured_answer_completes_and_changes_nothing() -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str

    agent = Agent(ScriptedModel(["ok"]), tools=[lookup], output_type=City, store=MemoryStore())
    calls = [ToolCall.of("final_result", {"name": "Rome"}, id="f"), ToolCall.of("lookup", {"city": "x"}, id="l")]
    thread = _thread_with(calls)
    before = copy.deepcopy(thread)
    decided = plan(agent.config(), thread, calls)
    assert thread == before
    assert decided.completes and decided.answer == City(name="Rome")
    assert [r.status for r in decided.results] == ["done", "cancelled"]
    assert decided.to_run == [] and decided.ledger == []


def test_an_invalid_final_answer_beside_a_tool_call_is_answered_and_the_tool_runs() -> None:
    """Both calls of the answer get a result (the invalid final_result one an error the model can
    correct), in one run, with no error escaping the loop."""
    from pydantic import BaseModel

    class City(BaseModel):
        name: str

    model = ScriptedModel([
        [tool_call("final_result", wrong=1), tool_call("lookup", city="Rome")],
        [tool_call("final_result", name="Rome")],
    ])
    agent = Agent(model, tools=[lookup], output_type=City, store=MemoryStore())
    result = agent.run_sync("where?")
    assert result.status == "completed" and result.output == City(name="Rome")
    results = [m for m in result.messages if m.kind == "tool-result"]
    assert [(r.name, r.is_error) for r in results] == [
        ("final_result", True), ("lookup", False), ("final_result", False)]


def test_the_run_state_has_three_parts() -> None:
    run = RunState("run_1", StoredThread("t"))
    assert isinstance(run.work, RunWork) and isinstance(run.outcome, RunOutcome)
    assert run.thread == "t" and run.outcome.status == "running"
    meta = run.meta()
    assert meta.status == "running" and meta.thread_step == 0
    stored_fields = {"messages", "version", "step", "ledger", "decisions", "pending", "always_allowed", "state"}
    assert stored_fields <= set(StoredThread.__dataclass_fields__)
    assert {"tasks", "blocking", "call_ids", "dirty"} <= set(RunWork.__dataclass_fields__)
    assert {"status", "stop_reason", "error", "output"} <= set(RunOutcome.__dataclass_fields__)


def test_the_config_is_frozen_for_real() -> None:
    agent = Agent(ScriptedModel(["ok"]), tools=[lookup], settings={"temperature": 0.5}, store=MemoryStore())
    config = agent.config()
    with pytest.raises(TypeError):
        config.request_settings["temperature"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        config.tools["other"] = book  # type: ignore[index]
    assert isinstance(config.tool_definitions, tuple)


def test_a_setting_changed_in_place_applies_to_the_next_run_never_to_the_one_going_on() -> None:
    seen: list[Any] = []
    agent: Agent[str]

    def answer(messages: list[Any], info: Any) -> Any:
        seen.append(info.settings.get("temperature"))
        if len(seen) == 1:
            agent.settings["temperature"] = 0.9  # changed while this run goes on
            return [tool_call("lookup", city="Rome")]
        return "done"

    agent = Agent(FunctionModel(answer), tools=[lookup], settings={"temperature": 0.1}, store=MemoryStore())
    agent.run_sync("first")
    assert seen == [0.1, 0.1]  # the run that started with 0.1 kept it
    agent.run_sync("second")
    assert seen[-1] == 0.9  # the next run sees the change


def test_a_tool_added_in_place_reaches_the_next_run() -> None:
    agent = Agent(ScriptedModel([[tool_call("book", city="Rome")], "ok"]), tools=[lookup], store=MemoryStore())
    agent.config()
    agent.tools["book"] = book
    result = agent.run_sync("go")
    assert result.status == "paused" and [p.name for p in result.pending] == ["book"]
    assert agent.resume_sync(result, decisions=Decisions().approve(result.pending[0])).status == "completed"


def test_pending_calls_are_plain_data() -> None:
    call = PendingCall("c", "book", {"city": "Rome"}, "approval", "Book a trip.")
    assert copy.deepcopy(call) == call


async def test_a_run_is_live_from_its_first_write_so_a_second_start_is_refused_before_writing() -> None:
    """Right after a run's first write marks the thread running (before its loop starts), a
    second run on that thread in this process is refused and writes nothing; it used to take the
    thread over as if the first run had died, and the first run then failed with its prompt left
    behind."""
    from nbagent.exceptions import ConflictError
    from nbagent.store import MemoryStore

    seen: list[BaseException | None] = []

    class Racing(MemoryStore):
        async def create_or_load(self, thread, **kwargs):  # type: ignore[no-untyped-def]
            got = await super().create_or_load(thread, **kwargs)
            if not seen:  # the first run has just written its prompt: a second run starts now
                seen.append(None)
                try:
                    await Agent(FunctionModel(lambda m, i: "second"), store=self).run("prompt-2", thread=thread)
                except ConflictError as exc:
                    seen[0] = exc
            return got

    store = Racing()
    result = await Agent(FunctionModel(lambda m, i: "first"), store=store).run("prompt-1", thread="t")
    assert isinstance(seen[0], ConflictError) and "being run right now" in str(seen[0])
    assert result.status == "completed" and result.output == "first"
    stored = await store.load("t")
    assert stored is not None and [getattr(m, "content", None) or m.text for m in stored.messages] == [
        "prompt-1", "first"]
