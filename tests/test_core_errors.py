"""Model failures: answers cut off at the output limit, retries with backoff (and what a failed
attempt leaves behind: nothing), Retry-After, errors that fail at once, and failed runs resumed.

Only the shipped fakes and `MemoryStore`.
"""

import time

import pytest

from nbagent import Agent, AssistantMessage, ModelError, Retry, ToolCall, UserError, tool
from nbagent.exceptions import (
    AuthenticationError,
    BadRequestError,
    ModelConnectionError,
    ModelResponseError,
    ModelTimeoutError,
    RateLimitError,
    ServerError,
    error_for_status,
)
from nbagent.models import ScriptedModel, tool_call
from nbagent.store import MemoryStore
from tests.helpers import assert_valid_history

FAST = Retry(initial_delay=0.01)



@tool
def get_weather(city: str) -> str:
    """Weather."""
    return f"Sunny in {city}"


# ---------------------------------------------------------------------- finish_reason length
async def test_text_cut_off_at_the_limit_completes_truncated() -> None:
    cut = AssistantMessage(text="The answer is a long story that", finish_reason="length")
    result = await Agent(ScriptedModel([cut]), store=MemoryStore()).run("tell me")
    assert result.status == "completed"
    assert result.truncated is True
    assert result.output == "The answer is a long story that"
    assert result.usage.calls[0].finish_reason == "length"


async def test_a_normal_answer_is_not_truncated() -> None:
    result = await Agent(ScriptedModel(["short"]), store=MemoryStore()).run("hi")
    assert result.truncated is False


async def test_cut_off_inside_a_tool_call_fails_clearly_and_keeps_the_conversation_valid() -> None:
    half_call = ToolCall("c1", "get_weather", '{"city": "Par')
    cut = AssistantMessage(tool_calls=[half_call], finish_reason="length")
    model = ScriptedModel([cut, "It is sunny."])
    agent = Agent(model, tools=[get_weather], store=MemoryStore())
    result = await agent.run("Weather?", thread="t")
    assert result.status == "failed"
    assert result.error is not None
    assert "cut off at the output token limit inside a tool call" in result.error
    assert "max_tokens" in result.error
    assert isinstance(result.exception, ModelResponseError)
    assert result.output is None
    # The half call is not in the history; the call was counted.
    assert [m.kind for m in result.messages] == ["user"]
    assert result.usage.requests == 1 and result.usage.calls[0].finish_reason == "length"
    stored = await agent.store.load("t")
    assert stored is not None and len(stored.usage) == 1
    assert_valid_history(stored.messages)
    # The next request on this thread is valid.
    again = await agent.run("Try again, briefly.", thread="t")
    assert again.status == "completed" and again.output == "It is sunny."
    assert [m.kind for m in again.messages] == ["user", "user", "assistant"]


# ---------------------------------------------------------------------- retries
@pytest.mark.parametrize(
    "error",
    [
        RateLimitError("slow down", status_code=429),
        ServerError("bad gateway", status_code=502),
        error_for_status(503, "unavailable"),
        ModelConnectionError("connection refused"),
        ModelTimeoutError("timed out"),
    ],
    ids=["429", "502", "503", "connection", "timeout"],
)
async def test_retryable_errors_are_retried_and_leave_no_trace(error: ModelError) -> None:
    model = ScriptedModel([error, error, "finally"])
    agent = Agent(model, retry=FAST, store=MemoryStore())
    events = [e async for e in agent.stream("hi")]
    result = events[-1].result
    assert result.status == "completed" and result.output == "finally"
    assert len(model.requests) == 3
    # Failed attempts add no message and no usage.
    assert [(m.kind, getattr(m, "text", None)) for m in result.messages] == [("user", None),
                                                                            ("assistant", "finally")]
    assert result.usage.requests == 1 and len(result.usage.rows()) == 1
    retries = [e for e in events if e.kind == "model-retry"]
    assert [r.attempt for r in retries] == [1, 2]
    assert all(str(error) in r.error for r in retries)
    assert all(r.step == 1 for r in retries)
    stored = await agent.store.load(result.thread)
    assert stored is not None and len(stored.usage) == 1 and len(stored.messages) == 2


async def test_retries_back_off_exponentially() -> None:
    err = ServerError("down", status_code=500)
    model = ScriptedModel([err, err, err, "ok"])
    retry = Retry(attempts=4, initial_delay=0.02, multiplier=2.0, jitter=0.0)
    events = [e async for e in Agent(model, retry=retry, store=MemoryStore()).stream("hi")]
    assert [e.delay_s for e in events if e.kind == "model-retry"] == pytest.approx([0.02, 0.04, 0.08])
    assert events[-1].result.status == "completed"


async def test_retries_give_up_after_the_attempts_and_the_run_fails() -> None:
    err = error_for_status(503, "overloaded")
    model = ScriptedModel([err, err, "never reached"])
    result = await Agent(model, retry=Retry(attempts=2, initial_delay=0.01), store=MemoryStore()).run("hi")
    assert result.status == "failed"
    assert len(model.requests) == 2
    assert result.error == "ServerError: 503 overloaded"
    assert result.exception is err
    assert result.usage.requests == 0


async def test_retry_after_is_honoured_and_capped() -> None:
    model = ScriptedModel([RateLimitError("wait", status_code=429, retry_after=0.15), "ok"])
    clock = time.perf_counter()
    events = [e async for e in Agent(model, retry=FAST, store=MemoryStore()).stream("hi")]
    elapsed = time.perf_counter() - clock
    (retry,) = [e for e in events if e.kind == "model-retry"]
    assert retry.delay_s == 0.15  # not the 0.01 s backoff
    assert elapsed >= 0.15

    model = ScriptedModel([RateLimitError("wait", status_code=429, retry_after=60), "ok"])
    capped = Retry(initial_delay=0.01, max_delay=0.05)
    events = [e async for e in Agent(model, retry=capped, store=MemoryStore()).stream("hi")]
    (retry,) = [e for e in events if e.kind == "model-retry"]
    assert retry.delay_s == 0.05  # capped: it waited 0.05 s, not the 60 s the server asked for
    assert events[-1].result.output == "ok"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (BadRequestError("invalid 'messages'", status_code=400), "400"),
        (error_for_status(422, "unprocessable"), "422"),
        (AuthenticationError("invalid api key", status_code=401), "401"),
        (error_for_status(403, "forbidden", provider="openai"), "403"),
    ],
    ids=["400", "422", "401", "403"],
)
async def test_non_retryable_errors_fail_at_once(error: ModelError, status: str) -> None:
    model = ScriptedModel([error, "never"])
    agent = Agent(model, retry=FAST, store=MemoryStore())
    events = [e async for e in agent.stream("hi")]
    assert [e.kind for e in events] == ["run-started", "run-failed"]  # no model-retry
    result = events[-1].result
    assert result.status == "failed"
    assert len(model.requests) == 1
    assert result.error is not None and status in result.error
    assert type(error).__name__ in result.error
    assert result.exception is error
    assert result.output is None
    assert [m.kind for m in result.messages] == ["user"]


async def test_a_failing_model_never_raises_out_of_run() -> None:
    model = ScriptedModel([RuntimeError("a bug in a custom model")])
    result = await Agent(model, store=MemoryStore()).run("hi")
    assert result.status == "failed"
    assert result.error == "RuntimeError: a bug in a custom model"


async def test_a_failed_run_can_be_resumed() -> None:
    model = ScriptedModel([tool_call("get_weather", city="Oslo"), BadRequestError("flaky", status_code=400),
                           "Oslo is sunny."])
    agent = Agent(model, tools=[get_weather], retry=FAST, store=MemoryStore())
    failed = await agent.run("Weather in Oslo?")
    assert failed.status == "failed"
    assert [m.kind for m in failed.messages] == ["user", "assistant", "tool-result"]
    resumed = await agent.resume(failed)
    assert resumed.status == "completed" and resumed.output == "Oslo is sunny."
    assert [m.kind for m in resumed.new_messages] == ["assistant"]


async def test_a_fake_model_returning_nonsense_fails_the_run_with_a_clear_error() -> None:
    result = await Agent(ScriptedModel([42]), store=MemoryStore()).run("hi")
    assert result.status == "failed"
    assert result.error is not None and "must return a str" in result.error
    assert isinstance(result.exception, UserError)


async def test_retry_call_makes_the_attempts_waits_as_retry_says_and_raises_the_last_error() -> None:
    failures: list[Exception] = [RateLimitError("wait", status_code=429, retry_after=60),
                                 ServerError("down", status_code=500)]

    async def attempt() -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    clock = time.perf_counter()
    assert await Retry(attempts=3, initial_delay=0.01, max_delay=0.05, jitter=0).call(attempt) == "ok"
    assert time.perf_counter() - clock >= 0.07  # 0.05 (Retry-After 60 s, capped), then 0.02
    failures[:] = [ServerError("down", status_code=500)] * 2
    with pytest.raises(ServerError):
        await Retry(attempts=2, initial_delay=0).call(attempt)
    assert failures == []  # two attempts in all
    failures[:] = [BadRequestError("no", status_code=400), ServerError("down", status_code=500)]
    with pytest.raises(BadRequestError):
        await Retry(initial_delay=0).call(attempt)
    assert len(failures) == 1  # not retried


def test_an_attempt_keeps_a_failure_that_is_retried_and_lets_the_others_out() -> None:
    from nbagent.exceptions import StreamInterruptedError

    policy = Retry(attempts=3, initial_delay=0.01, max_delay=0.05, jitter=0)
    failures: list[Exception] = [RateLimitError("wait", status_code=429, retry_after=60),
                                 ServerError("down", status_code=500)]
    seen = []
    for attempt in policy.tries():
        with attempt:
            if failures:
                raise failures.pop(0)
            break
        seen.append((attempt.number, type(attempt.error).__name__, attempt.delay))
    assert seen == [(1, "RateLimitError", 0.05), (2, "ServerError", 0.02)]
    with pytest.raises(ServerError):  # the last attempt's failure
        for attempt in policy.tries():
            with attempt:
                raise ServerError("down", status_code=500)
    assert attempt.number == 3
    with pytest.raises(StreamInterruptedError):  # a retryable failure the attempt says not to retry
        for attempt in policy.tries():
            with attempt:
                attempt.retryable = False
                raise StreamInterruptedError("dropped after text was shown")
    assert attempt.number == 1


def test_retry_rejects_zero_attempts() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Retry(attempts=0)
