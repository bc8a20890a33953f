"""`OpenAIModel`'s deadline: the time limit of a whole model call, over real HTTP.

The replay server's ``keep-alive`` fault keeps a stream open forever with SSE comments or empty
deltas, so the per-read timeout never fires; the call must end at its deadline with a retryable
`ModelTimeoutError`, which the run loop retries.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from nbagent import Agent, exceptions
from nbagent.exceptions import ModelTimeoutError
from nbagent.models.base import ModelResponse
from nbagent.models.openai import OpenAIModel
from nbagent.retry import Retry
from nbagent.store.memory import MemoryStore
from tests.provider_calls import GUARD, call, failure, model_at, request
from tests.wire.replay_server import ReplayServer


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


# ----------------------------------------------------------------------------- the deadline
def test_the_deadline_has_a_documented_default() -> None:
    from nbagent.models.openai import DEFAULT_DEADLINE, DEFAULT_TIMEOUT

    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1")
    assert model.deadline == DEFAULT_DEADLINE == 600.0
    assert DEFAULT_DEADLINE > DEFAULT_TIMEOUT  # a slow first byte alone never hits it
    assert "deadline" in (OpenAIModel.__doc__ or "")
    assert OpenAIModel("m", base_url="http://127.0.0.1:9/v1", deadline=None).deadline is None
    for bad in (0, -1):
        with pytest.raises(exceptions.UserError, match="deadline"):
            OpenAIModel("m", base_url="http://127.0.0.1:9/v1", deadline=bad)


@pytest.mark.parametrize("how", ["comment", "delta"])
async def test_a_stream_kept_alive_forever_ends_at_the_deadline(server: Any, how: str) -> None:
    """``: keep-alive`` comments (or empty deltas) every 0.2 s never let the 2 s read timeout
    fire: the 1 s deadline of the whole call ends it."""
    model = model_at(server.fault_base_url("keep-alive", arg=f"0.2,{how}"), timeout=2, deadline=1)
    t0 = time.perf_counter()
    err = await failure(model, stream=True)
    elapsed = time.perf_counter() - t0
    assert isinstance(err, ModelTimeoutError), repr(err)
    assert err.retryable and "deadline" in str(err) and "1 s" in str(err)
    assert err.__cause__ is None and err.__context__ is None
    assert 0.9 <= elapsed < 2.0, elapsed
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the deadline's cancellation was taken back
    await asyncio.sleep(0.01)  # and the task goes on as usual


async def test_a_whole_answer_that_takes_too_long_ends_at_the_deadline(server: Any) -> None:
    model = model_at(server.fault_base_url("slow", "openai_plain_text", arg=5), timeout=10, deadline=1)
    t0 = time.perf_counter()
    err = await failure(model, stream=False)
    elapsed = time.perf_counter() - t0
    assert isinstance(err, ModelTimeoutError) and err.retryable and "deadline" in str(err), repr(err)
    assert 0.9 <= elapsed < 2.0, elapsed


async def test_the_loop_retries_a_call_that_hit_its_deadline(server: Any) -> None:
    model = model_at(server.fault_base_url("keep-alive", arg="0.1"), timeout=2, deadline=0.5)
    agent = Agent(model, store=MemoryStore(), retry=Retry(attempts=2, initial_delay=0.01, jitter=0))
    t0 = time.perf_counter()
    try:
        events = await asyncio.wait_for(_events(agent), GUARD)
    finally:
        await model.aclose()
    elapsed = time.perf_counter() - t0
    retries = [e for e in events if e.kind == "model-retry"]
    assert len(retries) == 1 and "deadline" in retries[0].error
    result = events[-1].result
    assert result.status == "failed" and isinstance(result.exception, ModelTimeoutError)
    assert 0.9 <= elapsed < 2.5, elapsed  # two attempts of 0.5 s


async def _events(agent: Agent) -> list[Any]:
    return [e async for e in agent.stream("hi")]


async def test_a_slow_consumer_gets_the_timeout_from_the_stream_not_a_cancellation(server: Any) -> None:
    """The deadline counts the consumer's time too, but it never cancels the consumer's own
    awaits: the expired call fails at its next read."""
    # A deadline long enough for the first delta to arrive on a loaded machine (0.5 s was not,
    # once, under a full test run on two busy cores), then a consumer that sleeps past it.
    model = model_at(server.fault_base_url("event-delay", "openai_stream_text_usage", arg=0.05), deadline=2.0)
    items: list[Any] = []
    try:
        with pytest.raises(ModelTimeoutError):
            async for item in model.request_stream(request()):
                items.append(item)
                if len(items) == 1:
                    await asyncio.sleep(2.3)  # past the deadline, inside the consumer
    finally:
        await model.aclose()
    assert len(items) == 1


async def test_a_call_within_its_deadline_is_untouched(server: Any) -> None:
    model = model_at(server.fault_base_url("event-delay", "openai_stream_text_usage", arg=0.01), deadline=5)
    items = await call(model, stream=True)
    assert isinstance(items[-1], ModelResponse) and items[-1].message.text
    unlimited = model_at(server.base_url_for("openai_plain_text"), deadline=None)
    assert (await call(unlimited, stream=False))[-1].message.text == "This is a test."


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
async def test_cancelling_a_call_is_still_a_cancellation(server: Any, stream: bool) -> None:
    """Someone else's cancellation (a cancelled run) while the call waits is not taken for the
    deadline: it propagates as ``CancelledError``."""
    url = server.fault_base_url("keep-alive", arg="0.1") if stream else server.fault_base_url("slow", arg=5)
    model = model_at(url, deadline=5)
    task = asyncio.ensure_future(call(model, stream))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
