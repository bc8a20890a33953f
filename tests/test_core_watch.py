"""Following a thread in this process (`nbagent._watch`): what a view of a thread hears when a run
on it goes on elsewhere — a resume from code, `resume_sync`, another view — and when a blocking
tool that outlived its stopped run ends. Only the shipped fakes and `MemoryStore`."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest

from nbagent import Agent, tool
from nbagent._watch import ThreadChangedNotice, ToolOutcomeNotice, watch, watched
from nbagent.exceptions import StoreError
from nbagent.models import FunctionModel, tool_call
from nbagent.store import MemoryStore


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def answer(messages: list[Any], request: Any) -> Any:
    last = messages[-1]
    if last.kind == "user":
        return tool_call("refund", order=42) if "refund" in last.content else "hello"
    return "done: " + last.content


class Heard:
    """An observer that writes down (run_id, kind) of what it hears, and the items."""

    def __init__(self) -> None:
        self.items: list[tuple[str | None, Any]] = []
        self.threads: set[str] = set()

    def __call__(self, run_id: str | None, item: Any) -> None:
        self.items.append((run_id, item))
        self.threads.add(threading.current_thread().name)

    @property
    def kinds(self) -> list[str]:
        return [item.kind for _, item in self.items]


async def test_a_watcher_hears_every_event_of_a_run_but_the_deltas() -> None:
    agent = Agent(FunctionModel(answer), tools=[refund], store=MemoryStore())
    heard = Heard()
    unwatch = watch("w", heard)
    streamed = [e.kind async for e in agent.stream("hi", thread="w")]
    assert "text-delta" in streamed
    assert heard.kinds == ["run-started", "model-response", "usage", "run-completed"]
    started = heard.items[0][1]
    assert started.prompt is not None and started.prompt.content == "hi"  # what started the run
    run_ids = {run_id for run_id, _ in heard.items}
    assert run_ids == {started.run_id}
    unwatch()
    unwatch()  # twice is harmless
    await agent.run("again", thread="w")
    assert len(heard.items) == 4 and not watched("w")


async def test_a_resume_from_code_is_heard_with_its_decisions() -> None:
    agent = Agent(FunctionModel(answer), tools=[refund], store=MemoryStore())
    heard = Heard()
    watch("r", heard)
    paused = await agent.run("refund please", thread="r")
    assert heard.kinds[-2:] == ["approval-requested", "run-paused"]
    heard.items.clear()
    await agent.resume(paused, approve=paused.pending, decided_by="ada")
    assert heard.kinds == ["run-started", "tool-call-started", "tool-call-finished", "model-response", "usage",
                           "run-completed"]
    assert heard.items[0][1].prompt is None  # a resume: no new message
    finished = heard.items[2][1]
    assert finished.result.decision == "approved" and finished.result.decided_by == "ada"


async def test_resume_sync_is_heard_on_its_own_thread() -> None:
    agent = Agent(FunctionModel(answer), tools=[refund], store=MemoryStore())
    paused = await agent.run("refund please", thread="s")
    heard = Heard()
    watch("s", heard)
    # inside a running loop (as in a notebook cell) resume_sync runs on nbagent's private thread
    result = await asyncio.to_thread(lambda: agent.resume_sync(paused, approve=paused.pending))
    assert result.status == "completed"
    assert heard.kinds[0] == "run-started" and heard.kinds[-1] == "run-completed"
    assert threading.current_thread().name not in heard.threads  # observers must hand over to their loop


async def test_a_cancelled_run_tells_its_watchers_how_it_ended() -> None:
    gate = asyncio.Event()

    @tool
    async def wait() -> str:
        """Waits."""
        gate.set()
        await asyncio.sleep(30)
        return "never"

    def calls_wait(messages: list[Any], request: Any) -> Any:
        return tool_call("wait") if messages[-1].kind == "user" else "after"

    agent = Agent(FunctionModel(calls_wait), tools=[wait], store=MemoryStore())
    heard = Heard()
    watch("c", heard)
    handle = agent.start("go", thread="c")
    await asyncio.wait_for(gate.wait(), 5)
    handle.cancel()
    await handle
    assert heard.kinds[-1] == "run-cancelled"
    assert heard.items[-1][1].result.messages[-1].status == "cancelled"


async def test_a_blocking_tool_that_outlives_its_stopped_run_is_heard_when_it_ends() -> None:
    started = threading.Event()
    release = threading.Event()

    @tool
    def book(city: str) -> str:
        """Blocks its worker thread (a thread cannot be interrupted)."""
        started.set()
        release.wait(10)
        return f"booked in {city}"

    def calls_book(messages: list[Any], request: Any) -> Any:
        return tool_call("book", city="Rome") if messages[-1].kind == "user" else "after"

    agent = Agent(FunctionModel(calls_book), tools=[book], store=MemoryStore())
    heard = Heard()
    watch("b", heard)
    handle = agent.start("go", thread="b")
    await asyncio.to_thread(started.wait, 5)
    handle.cancel()
    result = await handle
    [interrupted] = [m for m in result.messages if m.kind == "tool-result"]
    assert interrupted.status == "interrupted" and "still running" in interrupted.content
    assert heard.kinds[-1] == "run-cancelled"
    release.set()
    for _ in range(200):
        if heard.kinds[-1] == "tool-outcome":
            break
        await asyncio.sleep(0.01)
    run_id, notice = heard.items[-1]
    assert isinstance(notice, ToolOutcomeNotice) and run_id is None
    assert (notice.call_id, notice.tool, notice.status, notice.content) == (
        interrupted.call_id, "book", "done", "booked in Rome")
    assert notice.duration_s is not None and notice.duration_s >= 0
    stored = await agent.store.load("b")
    assert stored is not None and stored.ledger[notice.call_id].status == "finished"


class FailingStore(MemoryStore):
    """Fails the append that records the model's answer."""

    async def append(self, thread: str, **kwargs: Any) -> int:
        if kwargs.get("usage"):
            raise StoreError("disk full")
        return await super().append(thread, **kwargs)


async def test_a_run_that_ends_with_an_error_tells_its_watchers_to_read_the_thread_again() -> None:
    agent = Agent(FunctionModel(answer), tools=[refund], store=FailingStore())
    heard = Heard()
    watch("f", heard)
    with pytest.raises(StoreError):
        await agent.run("hi", thread="f")
    assert heard.kinds == ["run-started", "thread-changed"]
    assert isinstance(heard.items[-1][1], ThreadChangedNotice)


async def test_a_bound_method_watcher_is_held_weakly_and_a_failing_one_does_not_break_the_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    agent = Agent(FunctionModel(answer), tools=[refund], store=MemoryStore())

    class View:
        def __init__(self) -> None:
            self.heard: list[str] = []

        def on(self, run_id: str | None, item: Any) -> None:
            self.heard.append(item.kind)
            raise RuntimeError("a bug in a view")

    view = View()
    watch("weak", view.on)
    result = await agent.run("hi", thread="weak")
    assert result.status == "completed" and view.heard[-1] == "run-completed"
    assert "a bug in a view" in capsys.readouterr().err
    del view
    gc.collect()
    await agent.run("again", thread="weak")  # nobody left: the registry forgets the thread
    assert not watched("weak")


async def test_a_denial_of_a_tool_the_agent_no_longer_has_is_a_denial() -> None:
    store = MemoryStore()
    paused = await Agent(FunctionModel(answer), tools=[refund], store=store).run("refund please", thread="d")
    after_restart = Agent(FunctionModel(answer), store=store)  # refund not registered
    clock = time.time()
    result = await after_restart.resume(thread="d", deny={paused.pending[0].id: "not now"}, decided_by="ada")
    [denied] = [m for m in result.messages if m.kind == "tool-result"]
    assert denied.status == "denied" and denied.content.startswith("denied by the user: not now\nrefund was not run.")
    assert denied.decided_by == "ada" and denied.decided_at is not None and denied.decided_at >= clock - 1


async def test_an_undecided_call_of_a_tool_the_agent_no_longer_has_waits_on() -> None:
    def two(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            return [tool_call("refund", order=1), tool_call("refund", order=2)]
        return "done"

    store = MemoryStore()
    paused = await Agent(FunctionModel(two), tools=[refund], store=store).run("go", thread="u")
    first, second = paused.pending
    after_restart = Agent(FunctionModel(two), store=store)  # refund not registered (yet)
    result = await after_restart.resume(thread="u", deny=[first.id])
    # only the decided call is answered; the other is not turned into an "unknown tool" error
    assert result.status == "paused" and [p.id for p in result.pending] == [second.id]
    assert [m.status for m in result.messages if m.kind == "tool-result"] == ["denied"]
    done = await Agent(FunctionModel(two), tools=[refund], store=store).resume(thread="u", approve=[second.id])
    assert done.status == "completed"
    assert [m.content for m in done.messages if m.kind == "tool-result"][-1] == "refunded 2"
