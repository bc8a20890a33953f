"""FallbackModel (#28): the next model answers when one fails in the named ways, streamed and not."""

from __future__ import annotations

import pytest

import nbagent
from nbagent import Agent, Retry
from nbagent.exceptions import (
    AuthenticationError,
    ContentFilterError,
    ContextOverflowError,
    RateLimitError,
    ServerError,
)
from nbagent.messages import AssistantMessage
from nbagent.models import FallbackModel, FunctionModel
from nbagent.models.base import ModelResponse

NO_WAIT = Retry(attempts=1)


def failing(error: Exception, name: str = "primary") -> FunctionModel:
    def answer(messages, info):
        raise error

    return FunctionModel(answer, model_name=name)


def second() -> FunctionModel:
    return FunctionModel(lambda m, i: "from second", model_name="second")


@pytest.mark.parametrize("error", [
    RateLimitError("429 slow down", status_code=429),
    ServerError("500 oops", status_code=500),
    ServerError("529 overloaded", status_code=529),
    ContextOverflowError("too long"),
    ContentFilterError("blocked"),
])
def test_each_trigger_moves_to_the_next_model(error: Exception) -> None:
    model = FallbackModel([failing(error), second()], retry=NO_WAIT)
    agent = Agent(model, store="memory", retry=NO_WAIT)
    result = agent.run_sync("hi")
    assert result.output == "from second"
    assert result.usage.calls[0].model == "second"  # the usage row names the model that answered
    assert [(f.failed, f.next) for f in model.fallbacks] == [("primary", "second")]
    assert nbagent.usage_frame(agent)["model"].tolist() == ["second"]


def test_an_error_not_named_in_on_fails_at_once() -> None:
    model = FallbackModel([failing(AuthenticationError("401 bad key", status_code=401)), second()], retry=NO_WAIT)
    result = Agent(model, store="memory", retry=NO_WAIT).run_sync("hi")
    assert result.status == "failed" and "bad key" in (result.error or "")
    only_retryable = FallbackModel([failing(ContentFilterError("blocked")), second()], on=["retryable"],
                                   retry=NO_WAIT)
    assert Agent(only_retryable, store="memory", retry=NO_WAIT).run_sync("hi").status == "failed"


def test_the_first_model_is_retried_before_the_chain_moves_on() -> None:
    calls = []

    def flaky(messages, info):
        calls.append(1)
        if len(calls) < 3:
            raise ServerError("503 busy", status_code=503, retry_after=0)
        return "primary after retries"

    model = FallbackModel([FunctionModel(flaky, model_name="primary"), second()], retry=Retry(attempts=3))
    assert Agent(model, store="memory").run_sync("hi").output == "primary after retries"
    assert len(calls) == 3 and model.fallbacks == []


def test_a_billed_content_filtered_answer_falls_back() -> None:
    def refused(messages, info):
        return ModelResponse(AssistantMessage(text="", finish_reason="refusal"), error=ContentFilterError("refusal"))

    model = FallbackModel([FunctionModel(refused, model_name="primary"), second()], retry=NO_WAIT)
    assert Agent(model, store="memory").run_sync("hi").output == "from second"


def test_a_content_filter_finish_falls_back_whole_and_streamed() -> None:
    """OpenAI-compatible providers (Azure) say it with finish_reason content_filter only."""
    def filtered(messages, info):
        return ModelResponse(AssistantMessage(text="", finish_reason="content_filter"))

    async def filtered_stream(messages, info):
        yield ModelResponse(AssistantMessage(text="", finish_reason="content_filter"))

    async def streamed(agent: Agent) -> object:
        return next(e.result for e in [e async for e in agent.stream("hi")] if e.kind == "run-completed")

    from nbagent._sync import run_sync

    for primary, stream in ((FunctionModel(filtered, model_name="primary"), False),
                            (FunctionModel(stream_function=filtered_stream, model_name="primary"), True)):
        model = FallbackModel([primary, second()], retry=NO_WAIT)
        agent = Agent(model, store="memory", retry=NO_WAIT)
        result = run_sync(lambda agent=agent: streamed(agent)) if stream else agent.run_sync("hi")
        assert (result.status, result.output) == ("completed", "from second")  # type: ignore[attr-defined]
        assert [(f.failed, f.next) for f in model.fallbacks] == [("primary", "second")]
        assert "content_filter" in model.fallbacks[0].error
    only_retryable = FallbackModel([FunctionModel(filtered, model_name="primary"), second()], on=["retryable"],
                                   retry=NO_WAIT)
    assert Agent(only_retryable, store="memory", retry=NO_WAIT).run_sync("hi").status == "failed"


def test_streaming_falls_back_unseen_before_the_first_delta() -> None:
    async def dead(messages, info):
        raise ServerError("500 down", status_code=500)
        yield ""  # pragma: no cover

    model = FallbackModel([FunctionModel(stream_function=dead, model_name="primary"), second()], retry=NO_WAIT)
    agent = Agent(model, store="memory", retry=NO_WAIT)

    async def run() -> list[str]:
        deltas = []
        async for event in agent.stream("hi"):
            if type(event).__name__ == "TextDeltaEvent":
                deltas.append(event.delta)
        return deltas

    from nbagent._sync import run_sync

    deltas = run_sync(run)
    assert "".join(deltas) == "from second"


def test_streaming_fails_the_step_after_deltas_were_shown() -> None:
    async def halfway(messages, info):
        yield "half an ans"
        raise ServerError("500 cut", status_code=500)

    model = FallbackModel([FunctionModel(stream_function=halfway, model_name="primary"), second()], retry=NO_WAIT)
    agent = Agent(model, store="memory", retry=NO_WAIT)

    async def run() -> tuple[list[str], str]:
        deltas, status = [], ""
        async for event in agent.stream("hi"):
            if type(event).__name__ == "TextDeltaEvent":
                deltas.append(event.delta)
            if type(event).__name__ == "RunEndedEvent":
                status = event.result.status
        return deltas, status

    from nbagent._sync import run_sync

    deltas, status = run_sync(run)
    assert "from second" not in "".join(deltas)  # never two half answers
    assert status == "failed"


async def test_a_failure_after_deltas_is_not_retried_even_with_attempts_left() -> None:
    calls = []

    async def halfway(messages, info):
        calls.append(1)
        yield "half an ans"
        raise ServerError("500 cut", status_code=500)

    model = FallbackModel([FunctionModel(stream_function=halfway, model_name="primary"), second()],
                          retry=Retry(attempts=3, initial_delay=0))
    events = [e async for e in Agent(model, store="memory", retry=NO_WAIT).stream("hi")]
    assert events[-1].result.status == "failed" and len(calls) == 1


@pytest.mark.timeout(60)
async def test_a_stream_that_ends_without_an_answer_fails_instead_of_asking_again() -> None:
    from nbagent.models import Model

    class Unfinished(Model):
        model_name = "unfinished"
        asked = 0

        async def request_stream(self, request):
            self.asked += 1
            yield "half"

    primary = Unfinished()
    model = FallbackModel([primary, second()], retry=Retry(initial_delay=0))
    events = [e async for e in Agent(model, store="memory", retry=NO_WAIT).stream("hi")]
    result = events[-1].result
    assert result.status == "failed" and "ended without a complete answer" in (result.error or "")
    assert primary.asked == 1  # it used to ask again and again, for ever


def test_the_chain_needs_a_model_and_known_triggers() -> None:
    with pytest.raises(nbagent.UserError):
        FallbackModel([])
    with pytest.raises(nbagent.UserError):
        FallbackModel([second()], on=["sometimes"])


def test_each_move_is_a_model_fallback_event() -> None:
    model = FallbackModel([failing(ServerError("503 busy", status_code=503)), second()], retry=NO_WAIT)
    agent = Agent(model, store="memory", retry=NO_WAIT)

    async def kinds() -> list[object]:
        return [e async for e in agent.stream("hi")]

    from nbagent._sync import run_sync

    events = run_sync(kinds)
    [moved] = [e for e in events if e.kind == "model-fallback"]
    assert isinstance(moved, nbagent.ModelFallbackEvent)
    assert (moved.failed, moved.model, moved.step) == ("primary", "second", 1)
    assert "503 busy" in moved.error
    kinds_in_order = [e.kind for e in events]
    assert kinds_in_order.index("model-fallback") < kinds_in_order.index("usage")


async def test_the_view_says_which_model_answered() -> None:
    from nbagent.messages import UserMessage
    from nbagent.widgets._controller import ChatController
    from tests.widgets.test_chat_controller import controller_for

    model = FallbackModel([failing(ServerError("503 busy", status_code=503)), second()], retry=NO_WAIT)
    controller, _ = await controller_for(Agent(model, store="memory", retry=NO_WAIT), "c-fallback")
    said: list[str] = []
    original = ChatController.say

    def spy(self: ChatController, text: str, **kwargs: object) -> None:
        said.append(text)
        original(self, text, **kwargs)  # type: ignore[arg-type]

    controller.say = spy.__get__(controller)  # type: ignore[method-assign]
    controller.send(UserMessage("hi"))
    result = await controller.wait()
    assert result is not None and result.output == "from second"
    assert any(s.startswith("answered by second (primary: ") and "503 busy" in s for s in said)


# --------------------------------------------------------------- recorded errors, real SDKs
WIRE_ERRORS = [
    ("anthropic", "anthropic_error_429", False),
    ("anthropic", "anthropic_error_500", False),
    ("anthropic", "anthropic_error_529_overloaded", False),
    ("anthropic", "anthropic_stream_error_429", True),
    ("openai", "openrouter_error_429", False),
    ("openai", "openrouter_error_429", True),
    # the other triggers, as recorded: a prompt over the window, a filtered answer
    ("anthropic", "anthropic_error_400_prompt_too_long", False),
    ("openai", "azure_content_filter", False),
]


@pytest.fixture(scope="module")
def wire_server():  # type: ignore[no-untyped-def]
    from tests.wire.replay_server import ReplayServer

    with ReplayServer() as srv:
        yield srv


@pytest.mark.parametrize(("provider", "case", "stream"), WIRE_ERRORS, ids=[f"{c}-{'stream' if s else 'whole'}"
                                                                          for _, c, s in WIRE_ERRORS])
def test_recorded_provider_errors_fall_back(wire_server, provider: str, case: str, stream: bool) -> None:
    """The real SDKs read the recorded 429 / 500 / 529 replies over loopback HTTP; the chain moves on."""
    if provider == "anthropic":
        from nbagent.models import AnthropicModel

        primary: object = AnthropicModel("claude-sonnet-4-5", base_url=wire_server.anthropic_base_url_for(case),
                                         api_key="sk-test", max_retries=0)
    else:
        from nbagent.models import OpenAIModel

        primary = OpenAIModel("gpt-4o-mini", base_url=wire_server.base_url_for(case), api_key="sk-test",
                              max_retries=0)
    model = FallbackModel([primary, second()], retry=NO_WAIT)  # type: ignore[list-item]
    agent = Agent(model, store="memory", retry=NO_WAIT, prices={"*": {"input": 0, "output": 0}})

    async def run() -> tuple[list[str], str | None]:
        kinds, output = [], None
        if stream:
            async for event in agent.stream("hi"):
                kinds.append(event.kind)
                if event.kind == "run-completed":
                    output = event.result.output  # type: ignore[union-attr]
        else:
            output = (await agent.run("hi")).output
        return kinds, output

    from nbagent._sync import run_sync

    kinds, output = run_sync(run)
    assert output == "from second"
    assert model.fallbacks and model.fallbacks[0].next == "second"
    if stream:
        assert "model-fallback" in kinds


# ----------------------------------------------------------------------------- billed refusals are rows
def refusing(name: str, stream: bool = False, shown: str = "") -> FunctionModel:
    """A model whose answers are billed (50 in, 7 out) and stopped by the content filter."""
    from nbagent.usage import TokenCounts

    def refused() -> ModelResponse:
        return ModelResponse(AssistantMessage(text=shown, finish_reason="content_filter"),
                             TokenCounts(input_tokens=50, output_tokens=7))

    async def streamed(messages, info):
        if shown:
            yield shown
        yield refused()

    if stream:
        return FunctionModel(stream_function=streamed, model_name=name)
    return FunctionModel(lambda m, i: refused(), model_name=name)


def run_rows(model: object, stream: bool) -> tuple[str, list[tuple[str, int, int, str | None]], list[object]]:
    """The run's status, its usage rows (model, in, out, finish) and the rows its store kept."""
    from nbagent._sync import run_sync

    agent = Agent(model, store="memory", retry=NO_WAIT, prices={n: {"input": 1, "output": 2}  # type: ignore[arg-type]
                                                                for n in ("primary", "second", "third")})

    async def go() -> object:
        if not stream:
            return await agent.run("hi", thread="t")
        return [e async for e in agent.stream("hi", thread="t")][-1].result  # type: ignore[attr-defined]

    result = run_sync(go)
    stored = run_sync(lambda: agent.store.load("t"))
    rows = [(r.model, r.input_tokens, r.output_tokens, r.finish_reason) for r in result.usage.calls]  # type: ignore[attr-defined]
    assert all(r.cost_total for r in result.usage.calls if r.input_tokens == 50)  # type: ignore[attr-defined]
    return result.status, rows, [(r.model, r.input_tokens) for r in stored.usage]  # type: ignore[attr-defined,union-attr]


REFUSED = ("primary", 50, 7, "content_filter")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_refused_primary_the_chain_moved_on_from_keeps_its_row(stream: bool) -> None:
    status, rows, stored = run_rows(FallbackModel([refusing("primary", stream), second()], retry=NO_WAIT), stream)
    assert status == "completed"
    assert rows[0] == REFUSED and [r[0] for r in rows] == ["primary", "second"]
    assert stored == [("primary", 50), ("second", rows[1][1])]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_refused_last_model_and_a_chain_of_one_keep_the_row_as_the_model_alone_does(stream: bool) -> None:
    alone = run_rows(refusing("primary", stream), stream)
    assert alone == ("failed", [REFUSED], [("primary", 50)])
    assert run_rows(FallbackModel([refusing("primary", stream)], retry=NO_WAIT), stream) == alone
    last = FallbackModel([failing(ServerError("503 busy", status_code=503), "third"), refusing("primary", stream)],
                         retry=NO_WAIT)
    assert run_rows(last, stream) == alone
    both = FallbackModel([refusing("primary", stream), refusing("primary", stream)], retry=NO_WAIT)
    assert run_rows(both, stream) == ("failed", [REFUSED, REFUSED], [("primary", 50), ("primary", 50)])


def test_a_refusal_after_deltas_were_shown_fails_the_step_with_its_row() -> None:
    model = FallbackModel([refusing("primary", stream=True, shown="I will not"), second()], retry=NO_WAIT)
    assert run_rows(model, stream=True) == ("failed", [("primary", 50, 7, "content_filter")], [("primary", 50)])
