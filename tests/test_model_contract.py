"""The `Model` contract: every optional power is a member of `Model` with a default, and
`WrappedModel` forwards each, so a user's own wrapper keeps replay, recording and native
compaction; the run loop and `Agent` never probe a model with ``getattr``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, Compaction, tool
from nbagent.messages import AssistantMessage, CompactionMessage, ToolCall
from nbagent.models import FunctionModel, Model, WrappedModel, record, replay, tool_call
from nbagent.models.base import ModelRequest, ModelResponse
from nbagent.store import MemoryStore
from nbagent.usage import TokenCounts

ROOT = Path(__file__).resolve().parent.parent / "nbagent"


class Counting(WrappedModel):
    """A user's wrapper: counts the requests, overrides nothing else."""

    def __init__(self, inner: Model) -> None:
        super().__init__(inner)
        self.calls = 0

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return await self.inner.request(request)


@tool
def charge(amount: float) -> str:
    """Charge the card."""
    charged.append(amount)
    return f"charged {amount}"


charged: list[float] = []


def pay(messages: Any, request: Any) -> Any:
    return tool_call("charge", amount=9.5) if messages[-1].kind == "user" else messages[-1].content


def test_wrapped_model_forwards_every_member_of_model() -> None:
    powers = {name for name in vars(Model) if not name.startswith("_")}
    assert {"context_window", "native_context", "native_compaction", "compact", "keep_recording",
            "recorded_result", "request", "request_stream"} <= powers
    assert sorted(powers - set(vars(WrappedModel))) == []


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_a_users_wrapper_that_overrides_only_request_keeps_recording(stream: bool) -> None:
    store = MemoryStore()
    wrapper = Counting(record(FunctionModel(pay)))
    agent = Agent(wrapper, tools=[charge], store=store)
    if stream:
        async for _ in agent.stream("Pay", thread="t"):
            pass
    else:
        await agent.run("Pay", thread="t")
    assert wrapper.calls == 2  # streamed or not, the wrapper's own request answered
    assert [r["step"] for r in await store.recordings(["t"])] == [1, 2]


async def test_a_users_wrapper_that_overrides_only_request_keeps_replay_with_recorded_tools() -> None:
    store = MemoryStore()
    await Agent(record(FunctionModel(pay)), tools=[charge], store=store).run("Pay", thread="pay")
    charged.clear()
    wrapper = Counting(replay(store, thread="pay", tools="recorded"))
    result = await Agent(wrapper, tools=[charge], store=MemoryStore()).run("Pay")
    assert (result.output, charged, wrapper.calls) == ("charged 9.5", [], 2)  # the tool did not run again
    assert [row.replayed for row in result.usage.calls] == [True, True]


class Compacting(FunctionModel):
    """A fake whose provider compacts a conversation itself (as `OpenAIResponsesModel` does)."""

    native_compaction = True

    async def compact(self, request: ModelRequest) -> ModelResponse:
        self.compacted = len(request.messages)
        item = {"type": "compaction", "encrypted_content": "opaque"}
        return ModelResponse(AssistantMessage(thinking_blocks=[item]), TokenCounts(input_tokens=50, output_tokens=5))


async def test_a_users_wrapper_that_overrides_only_request_keeps_native_compaction() -> None:
    def answer(messages: Any, request: Any) -> str:
        return "ok " + "fine " * 50

    inner = Compacting(answer, context_window=400)
    wrapper = Counting(inner)
    agent = Agent(wrapper, store=MemoryStore(), compaction=Compaction.native(at=0.3, keep_last=1))
    first = await agent.run("one " + "word " * 300)
    result = await agent.run("two", thread=first.thread)
    [compacted] = [m for m in result.messages if isinstance(m, CompactionMessage)]
    assert compacted.policy == "native" and compacted.items == [{"type": "compaction", "encrypted_content": "opaque"}]
    assert inner.compacted >= 2 and wrapper.calls == 2
    assert [r.purpose for r in result.usage.calls] == ["compaction", "run"]


async def test_a_wrapper_that_overrides_nothing_streams_its_inner_models_deltas() -> None:
    async def deltas(messages: Any, request: Any) -> Any:
        for piece in ("It ", "is ", "sunny."):
            yield piece

    wrapped = WrappedModel(FunctionModel(stream_function=deltas))
    texts = [e.delta async for e in Agent(wrapped, store=MemoryStore()).stream("hi") if e.kind == "text-delta"]
    assert texts == ["It ", "is ", "sunny."]
    assert repr(wrapped) == "WrappedModel(FunctionModel('function'))"


async def test_a_model_without_the_powers_answers_with_their_defaults() -> None:
    plain = FunctionModel(lambda m, r: "hi")
    assert plain.recorded_result(ToolCall("c", "t", "{}")) is None
    assert not plain.native_compaction and not plain.native_context
    await plain.keep_recording(MemoryStore(), "t", ModelResponse(AssistantMessage(text="hi")))
    with pytest.raises(Exception, match="cannot compact a conversation itself"):
        await plain.compact(ModelRequest([]))


def _model_power_probes(path: Path) -> list[str]:
    powers = {name for name in vars(Model) if not name.startswith("__")}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in powers):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_run_and_the_agent_never_probe_a_model_for_a_power() -> None:
    paths = [*sorted((ROOT / "_run").glob("*.py")), ROOT / "agent.py"]
    assert [probe for path in paths for probe in _model_power_probes(path)] == []


def test_no_model_wrapper_forwards_with_getattr() -> None:
    pytest.importorskip("opentelemetry")
    # Every Model subclass the package has: the providers and tracing's wrapper.
    import nbagent.models.anthropic
    import nbagent.models.openai
    import nbagent.tracing._spans  # noqa: F401

    def subclasses(cls: type) -> list[type]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    mine = [c for c in subclasses(Model) if c.__module__.startswith("nbagent.")]
    assert "TracedModel" in {c.__name__ for c in mine}
    assert [c.__name__ for c in mine if "__getattr__" in vars(c)] == []
    assert all(inspect.isclass(c) for c in mine)


async def test_record_keeps_its_calls_in_any_sink_and_replay_reads_any_source() -> None:
    from nbagent.exceptions import UserError
    from nbagent.messages import UserMessage

    class Jar:
        """Neither a Store nor from nbagent: the two methods of the recording protocols."""

        def __init__(self) -> None:
            self.kept: list[dict[str, Any]] = []

        async def add_recording(self, thread: str, entry: Any) -> None:
            self.kept.append(dict(entry))

        async def recordings(self, threads: Any = None) -> list[dict[str, Any]]:
            return [e for e in self.kept if threads is None or e["thread"] in threads]

    jar, model = Jar(), record(FunctionModel(pay))
    ask = ModelRequest([UserMessage("Pay")])
    await model.keep_recording(jar, "t", await model.request(ask))
    assert [e["thread"] for e in jar.kept] == ["t"]
    answer = await replay(jar, thread="t").request(ask)
    assert answer.replayed and [c.name for c in answer.message.tool_calls] == ["charge"]
    with pytest.raises(UserError, match=r"a store, a store's path or URL, or a \.jsonl file; got object"):
        replay(object())
