"""Thread management (`nbagent.Threads`, ``agent.threads_api``) and the run entry points that
share one `RunStart`: the same thread operations from the agent, from its `Threads` and from a
`Threads` over a whole store; ``start(resume=...)``, ``resume`` and ``resume_stream`` continuing a
thread the same way; the blocking twins calling what a subclass overrides.

Only the shipped fakes, `MemoryStore` and SQLite files.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, Decisions, RunResult, Threads, UserError, tool
from nbagent.models import ScriptedModel, TestModel, tool_call
from nbagent.store import MemoryStore, SQLiteStore


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def _paused(store: Any, thread: str = "support") -> tuple[Agent[str], RunResult[str]]:
    agent = Agent(ScriptedModel([tool_call("refund", order=42, id="c1"), "Refunded."]), tools=[refund], store=store)
    return agent, agent.run_sync("refund 42", thread=thread)


def test_threads_of_a_store_lists_every_thread_and_an_agents_only_its_own() -> None:
    store = MemoryStore()
    weather = Agent(TestModel(text="sunny"), store=store)
    orders = Agent(TestModel(text="ok"), store=store)
    weather.run_sync("weather?", thread="w")
    orders.run_sync("order?", thread="o")
    assert sorted(t.thread for t in Threads(store).list_sync()) == ["o", "w"]
    assert [t.thread for t in weather.threads_api.list_sync()] == ["w"]
    assert weather.threads_api.list_sync() == weather.threads_sync()
    assert repr(weather.threads_api).endswith(", 1 thread)") and repr(Threads(store)).endswith(", every thread)")


def test_a_threads_over_a_file_reads_what_the_agent_reads(tmp_path: Path) -> None:
    """As a second notebook would: `Threads` on the same file sees the paused call, the usage and
    the checkpoints the agent's methods give."""
    path = tmp_path / "threads.db"
    agent, paused = _paused(str(path))
    other = Threads(str(path))
    assert isinstance(other.store, SQLiteStore)
    assert [p.id for p in other.pending_sync("support")] == [p.id for p in paused.pending] == ["c1"]
    assert other.pending_sync("support") == agent.pending_sync("support")
    assert other.usage_sync("support") == agent.thread_usage_sync("support")
    assert other.usage_sync("support").requests == 1
    assert other.checkpoints_sync("support") == agent.checkpoints_sync("support")
    assert other.pending_sync("no-such-thread") == []


def test_fork_and_delete_through_threads_api_change_the_agents_threads() -> None:
    agent, _ = _paused(MemoryStore())
    agent.resume_sync(thread="support", approve=["c1"])
    threads = agent.threads_api
    alt = threads.fork_sync("support", at_step=0, new_thread="support-alt", edit="refund 43")
    assert alt == "support-alt" and agent.own_threads() == ["support", "support-alt"]
    assert [t.thread for t in agent.threads_sync()] == ["support-alt", "support"]
    assert threads.delete_sync("support-alt") is True
    assert agent.own_threads() == ["support"] and threads.delete_sync("support-alt") is False
    # a Threads over the whole store has no scope to change
    everything = Threads(agent.store)
    everything.fork_sync("support", new_thread="copy")
    assert agent.own_threads() == ["support"] and {t.thread for t in everything.list_sync()} == {"support", "copy"}


def test_threads_takes_what_agent_store_takes() -> None:
    assert isinstance(Threads("memory").store, MemoryStore)
    with pytest.raises(UserError, match="store must be a Store, a file path or 'memory'"):
        Threads(42)  # type: ignore[arg-type]


def test_a_copied_agent_with_new_threads_has_a_threads_api_of_its_own() -> None:
    """``copy.copy(agent)`` with fresh ``_own_threads`` (what `compare` does for each model):
    its `threads_api` is scoped to the copy's threads, not the original's."""
    import copy

    agent = Agent(TestModel(text="ok"), store=MemoryStore())
    agent.run_sync("hi", thread="first")
    clone = copy.copy(agent)
    clone._own_threads = {}
    clone.run_sync("hi", thread="second")
    assert [t.thread for t in clone.threads_api.list_sync()] == ["second"]
    assert [t.thread for t in agent.threads_api.list_sync()] == ["first"]


def test_start_resume_and_resume_stream_continue_a_paused_thread_the_same_way() -> None:
    async def main() -> list[str]:
        outputs = []
        for way in ("start", "resume", "resume_stream"):
            agent, paused = _paused(MemoryStore(), thread=way)
            decisions = Decisions(by="ana").approve(*paused.pending)
            if way == "start":
                result = await agent.start(thread=way, resume=decisions)
            elif way == "resume":
                result = await agent.resume(thread=way, decisions=decisions)
            else:
                events = [e async for e in agent.resume_stream(thread=way, decisions=decisions)]
                result = events[-1].result
            tool_result = result.messages[2]
            outputs.append(f"{result.status} {result.output} {tool_result.decision} {tool_result.decided_by}")
        return outputs

    assert asyncio.run(main()) == ["completed Refunded. approved ana"] * 3


def test_bad_resume_arguments_fail_when_the_method_is_called() -> None:
    """A stream or a background run checks its decisions when it is made, not when first iterated."""
    agent = Agent(TestModel(), store=MemoryStore())
    with pytest.raises(UserError, match=r"decisions= takes a nbagent\.Decisions"):
        agent.resume_stream(thread="t", decisions={"approve": ["c1"]})  # type: ignore[arg-type]
    with pytest.raises(UserError, match="edit= must be a dict"):
        agent.resume_stream(thread="t", edit=["c1"])  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"start\(resume=\.\.\.\) takes a nbagent\.Decisions"):
        agent.start(thread="t", resume=["c1"])  # type: ignore[arg-type]


def test_a_sync_twin_calls_what_a_subclass_overrides() -> None:
    class Logged(Agent[str]):
        seen: list[str] = []

        async def run(self, prompt: Any = None, *, thread: str | None = None, state: Any = None) -> RunResult[str]:
            Logged.seen.append(f"run {prompt}")
            return await super().run(prompt, thread=thread, state=state)

        async def checkpoints(self, thread: str) -> Any:
            Logged.seen.append(f"checkpoints {thread}")
            return await super().checkpoints(thread)

    agent = Logged(TestModel(text="ok"), store=MemoryStore())
    assert agent.run_sync("hi", thread="t").output == "ok"
    assert len(agent.checkpoints_sync("t")) >= 2
    assert Logged.seen == ["run hi", "checkpoints t"]


def test_revoke_takes_back_always_allow_for_the_next_call_and_survives_a_new_store_object(tmp_path: Path) -> None:
    db = tmp_path / "threads.db"
    agent = Agent(ScriptedModel([tool_call("refund", order=1), "ok", tool_call("refund", order=2), "ok",
                                 tool_call("refund", order=3), "ok"]), tools=[refund], store=SQLiteStore(db))
    paused = agent.run_sync("refund 1", thread="t")
    assert agent.resume_sync(paused, always_allow=["refund"]).always_allowed == ["refund"]
    assert agent.run_sync("refund 2", thread="t").status == "completed"  # asked nothing
    assert Threads(SQLiteStore(db)).revoke_sync("t", "refund") == []  # another kernel's Threads
    assert agent.run_sync("refund 3", thread="t").status == "paused"


def test_revoke_with_no_tool_named_revokes_all_and_an_unknown_tool_changes_nothing() -> None:
    store = MemoryStore()
    agent, paused = _paused(store)
    agent.resume_sync(paused, always_allow=["refund"])
    before = store._threads["support"].version  # type: ignore[attr-defined]
    assert agent.revoke_sync("support", "not_allowed") == ["refund"]
    assert store._threads["support"].version == before  # type: ignore[attr-defined]  # nothing written
    assert agent.revoke_sync("support") == []
    with pytest.raises(UserError, match="not in the store"):
        agent.revoke_sync("no-such-thread", "refund")
