"""Cancellation: a run stopped while a tool runs or while the model streams leaves a valid
conversation (every tool call has a result) and the next run on the thread works.

Covered: `RunHandle.cancel()`, cancelling the task of ``await agent.run()``, and closing
a stream early. (KeyboardInterrupt in sync mode is in test_core_sync.py.) Only the shipped fakes
and `MemoryStore`.
"""

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nbagent import Agent, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.store import MemoryStore
from tests.helpers import assert_valid_history


class SlowTools:
    """Two async tools that block until cancelled, recording that they were."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled: list[str] = []
        self.finished: list[str] = []

        async def wait_long(name: str) -> str:
            self.started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
            self.finished.append(name)
            return "finished"

        @tool
        async def crawl(site: str) -> str:
            """Crawl a site (slow)."""
            return await wait_long(site)

        self.crawl = crawl


def model_calling_crawl(*sites: str) -> FunctionModel:
    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user" and messages[-1].content != "again":
            return [tool_call("crawl", site=s) for s in sites]
        return "all good"

    return FunctionModel(answer)


async def check_thread_is_usable(agent: Agent, thread: str) -> None:
    stored = await agent.store.load(thread)
    assert stored is not None
    assert_valid_history(stored.messages)
    assert stored.meta.status == "cancelled"
    again = await agent.run("again", thread=thread)
    assert again.status == "completed" and again.output == "all good"
    assert_valid_history(again.messages)


@pytest.mark.parametrize("sites", [("a",), ("a", "b")], ids=["one-tool", "two-tools"])
async def test_handle_cancel_while_tools_run(sites: tuple[str, ...]) -> None:
    tools = SlowTools()
    agent = Agent(model_calling_crawl(*sites), tools=[tools.crawl], store=MemoryStore())
    kinds: list[str] = []
    handle = agent.start("crawl", thread="t", on_event=lambda e: kinds.append(e.kind))
    await asyncio.wait_for(tools.started.wait(), 5)
    await asyncio.sleep(0.01)  # let every call start
    handle.cancel()
    result = await asyncio.wait_for(handle.wait(), 5)

    assert result is not None and result.status == "cancelled"
    assert sorted(tools.cancelled) == sorted(sites) and tools.finished == []
    results = [m for m in result.messages if m.kind == "tool-result"]
    assert len(results) == len(sites)
    assert all(r.status == "cancelled" and r.is_error for r in results)
    assert results[0].content.startswith("cancelled:")
    assert_valid_history(result.messages)
    assert kinds[-1] == "run-cancelled"
    await check_thread_is_usable(agent, "t")


async def test_handle_cancel_from_another_thread() -> None:
    tools = SlowTools()
    agent = Agent(model_calling_crawl("a"), tools=[tools.crawl], store=MemoryStore())
    handle = agent.start("crawl", thread="t")
    await asyncio.wait_for(tools.started.wait(), 5)
    canceller = threading.Thread(target=handle.cancel)  # e.g. a widget's button handler
    canceller.start()
    canceller.join()
    result = await asyncio.wait_for(handle.wait(), 5)
    assert result is not None and result.status == "cancelled"
    await check_thread_is_usable(agent, "t")


async def test_handle_cancel_while_the_model_streams() -> None:
    first_delta = asyncio.Event()

    async def stream(messages: list[Any], request: Any) -> AsyncIterator[str]:
        if messages[-1].content == "again":
            yield "all good"
            return
        yield "Let me think"
        first_delta.set()
        for _ in range(300):
            await asyncio.sleep(0.1)
            yield "."

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore())
    deltas: list[str] = []
    handle = agent.start(
        "long answer", thread="t",
        on_event=lambda e: deltas.append(e.delta) if e.kind == "text-delta" else None,
    )
    await asyncio.wait_for(first_delta.wait(), 5)
    handle.cancel()
    result = await asyncio.wait_for(handle.wait(), 5)
    assert result is not None and result.status == "cancelled"
    assert deltas[0] == "Let me think"
    # The half-streamed answer is not in the conversation.
    assert [m.kind for m in result.messages] == ["user"]
    assert result.usage.requests == 0
    await check_thread_is_usable(agent, "t")


async def test_cancelling_the_task_of_await_run() -> None:
    tools = SlowTools()
    agent = Agent(model_calling_crawl("a", "b"), tools=[tools.crawl], store=MemoryStore())
    task = asyncio.ensure_future(agent.run("crawl", thread="t"))
    await asyncio.wait_for(tools.started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(tools.cancelled) == ["a", "b"]
    await check_thread_is_usable(agent, "t")


async def test_cancelling_await_run_with_one_tool() -> None:
    tools = SlowTools()
    agent = Agent(model_calling_crawl("a"), tools=[tools.crawl], store=MemoryStore())
    task = asyncio.ensure_future(agent.run("crawl", thread="t"))
    await asyncio.wait_for(tools.started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await check_thread_is_usable(agent, "t")


async def test_closing_a_stream_early_leaves_the_thread_valid_at_once() -> None:
    tools = SlowTools()
    agent = Agent(model_calling_crawl("a", "b"), tools=[tools.crawl], store=MemoryStore())
    stream = agent.stream("crawl", thread="t")
    async for event in stream:
        if event.kind == "tool-call-started":
            break
    await stream.aclose()
    # No sleep here: the conversation must be valid as soon as aclose() returns.
    await check_thread_is_usable(agent, "t")


async def test_closing_a_stream_while_the_model_streams() -> None:
    async def stream(messages: list[Any], request: Any) -> AsyncIterator[str]:
        if messages[-1].content == "again":
            yield "all good"
            return
        for word in ["one ", "two ", "three"]:
            yield word

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore())
    events = agent.stream("count", thread="t")
    async for event in events:
        if event.kind == "text-delta":
            break
    await events.aclose()
    stored = await agent.store.load("t")
    assert stored is not None and [m.kind for m in stored.messages] == ["user"]
    await check_thread_is_usable(agent, "t")


async def test_breaking_out_of_async_for_then_waiting_also_cleans_up() -> None:
    """Without aclose(), the event loop closes the abandoned stream a moment later."""
    tools = SlowTools()
    agent = Agent(model_calling_crawl("a"), tools=[tools.crawl], store=MemoryStore())

    async def consume() -> None:
        async for event in agent.stream("crawl", thread="t"):
            if event.kind == "tool-call-started":
                break

    await consume()
    for _ in range(50):
        stored = await agent.store.load("t")
        if stored is not None and stored.meta.status == "cancelled":
            break
        await asyncio.sleep(0.01)
    await check_thread_is_usable(agent, "t")


async def test_a_cancelled_run_can_be_resumed() -> None:
    tools = SlowTools()
    agent = Agent(model_calling_crawl("a"), tools=[tools.crawl], store=MemoryStore())
    handle = agent.start("crawl", thread="t")
    await asyncio.wait_for(tools.started.wait(), 5)
    handle.cancel()
    result = await handle
    assert result.status == "cancelled"
    resumed = await agent.resume(result)
    assert resumed.status == "completed" and resumed.output == "all good"


async def test_closing_a_stream_at_approval_requested_keeps_the_pause() -> None:
    """A view may stop listening as soon as it sees approval-requested: the run stays paused."""
    ran: list[str] = []

    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        ran.append(order_id)
        return "refunded"

    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            return tool_call("refund", order_id="1", id="r1")
        return f"model saw: {messages[-1].content}"

    agent = Agent(FunctionModel(answer), tools=[refund], store=MemoryStore())
    events = agent.stream("refund", thread="t")
    async for event in events:
        if event.kind == "approval-requested":
            break
    await events.aclose()
    stored = await agent.store.load("t")
    assert stored is not None and stored.meta.status == "paused"
    assert [p.id for p in stored.meta.pending] == ["r1"]
    done = await agent.resume(thread="t", approve=["r1"])
    assert done.status == "completed" and done.output == "model saw: refunded"
    assert ran == ["1"]


async def test_cancel_does_not_wait_for_a_blocking_sync_tool() -> None:
    import time

    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    @tool
    def blocking(seconds: float) -> str:
        """Blocks its worker thread."""
        loop.call_soon_threadsafe(started.set)
        time.sleep(seconds)
        return "finished"

    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user" and messages[-1].content == "go":
            return tool_call("blocking", seconds=3)
        return "all good"

    agent = Agent(FunctionModel(answer), tools=[blocking], store=MemoryStore())
    handle = agent.start("go", thread="t")
    await asyncio.wait_for(started.wait(), 5)
    clock = time.perf_counter()
    handle.cancel()
    result = await asyncio.wait_for(handle.wait(), 5)
    assert time.perf_counter() - clock < 2  # the stop did not wait for the 3 s call
    assert result is not None and result.status == "cancelled"
    # The function goes on in its thread: the result says so instead of claiming it was cancelled
    # (nbagent 0.1 recorded "cancelled", and the model might repeat a side effect that happened).
    assert result.messages[-1].status == "interrupted"
    assert "still running" in result.messages[-1].content
    await check_thread_is_usable(agent, "t")


async def test_cancelling_await_run_during_a_model_call() -> None:
    asked = asyncio.Event()

    async def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].content == "again":
            return "all good"
        asked.set()
        await asyncio.sleep(30)
        return "too late"

    agent = Agent(FunctionModel(answer), store=MemoryStore())
    task = asyncio.ensure_future(agent.run("slow", thread="t"))
    await asyncio.wait_for(asked.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await agent.store.load("t")
    assert stored is not None and [m.kind for m in stored.messages] == ["user"]
    await check_thread_is_usable(agent, "t")
