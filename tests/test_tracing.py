"""Tracing (nbagent.tracing): the span tree of a run, its attribute names checked against the
GenAI semantic conventions, content off by default, no secret in any span, a trace continued by a
resume in another process, idempotence, the usage frame's trace columns, and no OpenTelemetry
import at all while tracing is off.

Spans are read with opentelemetry-sdk's InMemorySpanExporter; models are the shipped fakes, or
`OpenAIModel` against a loopback server; MCP servers are the test kitchen server.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import nbagent
import nbagent.tracing
from nbagent import Agent, Retry, tool
from nbagent.exceptions import RateLimitError
from nbagent.models import ScriptedModel, tool_call
from nbagent.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
FAST = Retry(initial_delay=0.01)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on (content off) into an in-memory exporter; off again afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    nbagent.tracing.instrument(tracer_provider=provider)
    exporter.provider = provider  # type: ignore[attr-defined]
    yield exporter
    nbagent.tracing.uninstrument()


def content_on(exporter: InMemorySpanExporter) -> None:
    nbagent.tracing.instrument(tracer_provider=exporter.provider, include_content=True)  # type: ignore[attr-defined]


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def weather_tools() -> list[Any]:
    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        return f"refunded {order}"

    return [get_weather, refund]


def semconv_names() -> set[str]:
    """The GenAI attribute names the installed semantic conventions define, less the ones they
    replaced or removed (names that only "moved" to the GenAI repository keep their meaning)."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes

    source = Path(gen_ai_attributes.__file__).read_text()
    names = set()
    for match in re.finditer(r'^(GEN_AI_\w+): Final = "([^"]+)"\n"""\n(.*?)"""', source, re.M | re.S):
        doc = match.group(3)
        if "Replaced by" in doc or "Removed" in doc:
            continue
        names.add(match.group(2))
    for match in re.finditer(r'@deprecated\(\s*"The attribute (\S+) is deprecated - (Replaced|Removed)', source):
        names.discard(match.group(1))
    return names


def all_attributes(exporter: InMemorySpanExporter) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for span in exporter.get_finished_spans():
        out.extend((span.attributes or {}).items())
        for event in span.events:
            out.extend((event.attributes or {}).items())
        if span.status.description:
            out.append(("status", span.status.description))
    return out


# ---------------------------------------------------------------------------------------- the tree


async def test_the_span_tree_of_a_run_with_a_tool_an_approval_and_a_retry(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel([RateLimitError("slow down", status_code=429),
                           [tool_call("get_weather", city="Paris"), tool_call("refund", order=42)], "done"])
    agent = Agent(model, tools=weather_tools(), store=MemoryStore(), name="support", retry=FAST)
    paused = await agent.run("Weather, then refund 42")
    assert paused.status == "paused"
    done = await agent.resume(paused, approve=paused.pending)
    assert done.output == "done"

    runs = named(spans, "invoke_agent")
    assert [s.name for s in runs] == ["invoke_agent support", "invoke_agent support"]
    first, second = runs
    assert first.kind == trace.SpanKind.INTERNAL and first.parent is None
    assert second.context.trace_id == first.context.trace_id  # the resume continues the trace
    assert second.parent is not None and second.parent.span_id == first.context.span_id
    attrs = first.attributes or {}
    assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["gen_ai.agent.name"] == "support"
    assert attrs["gen_ai.provider.name"] == model.provider and attrs["gen_ai.request.model"] == model.model_name
    assert attrs["gen_ai.conversation.id"] == paused.thread == attrs["nbagent.thread"]
    assert attrs["nbagent.run_id"] == paused.run_id and attrs["nbagent.status"] == "paused"
    assert (second.attributes or {})["nbagent.status"] == "completed"
    assert [e.name for e in first.events] == ["nbagent.retry", "nbagent.approval.requested"]
    retry = first.events[0].attributes or {}
    assert retry["nbagent.attempt"] == 1 and retry["nbagent.step"] == 1
    requested = first.events[1].attributes or {}
    assert requested["gen_ai.tool.name"] == "refund" and requested["nbagent.reason"] == "approval"
    decided = [e for e in second.events if e.name == "nbagent.approval.decided"]
    assert decided and (decided[0].attributes or {})["nbagent.decision"] == "approved"

    chats = named(spans, "chat ")
    assert len(chats) == 3  # the failed attempt, the answer with calls, the final answer
    failed, asked, final = sorted(chats, key=lambda s: s.start_time or 0)
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "RateLimitError"
    for chat, parent in ((failed, first), (asked, first), (final, second)):
        assert chat.kind == trace.SpanKind.CLIENT and chat.parent is not None
        assert chat.parent.span_id == parent.context.span_id
    a = asked.attributes or {}
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert a["gen_ai.provider.name"] == model.provider  # on every chat span, as the conventions ask
    assert a["gen_ai.usage.input_tokens"] == paused.usage.calls[0].input_tokens
    assert a["gen_ai.usage.output_tokens"] == paused.usage.calls[0].output_tokens
    assert a["nbagent.step"] == 1 and a["nbagent.purpose"] == "run"

    tools = {s.name: s for s in named(spans, "execute_tool")}
    assert set(tools) == {"execute_tool get_weather", "execute_tool refund"}
    weather, refund = tools["execute_tool get_weather"], tools["execute_tool refund"]
    assert weather.parent is not None and weather.parent.span_id == first.context.span_id
    assert refund.parent is not None and refund.parent.span_id == second.context.span_id  # it ran on resume
    w = weather.attributes or {}
    assert w["gen_ai.tool.name"] == "get_weather" and w["gen_ai.tool.call.id"] == asked_call_id(paused, "get_weather")
    assert w["nbagent.status"] == "done" and (refund.attributes or {})["nbagent.decision"] == "approved"


def asked_call_id(result: Any, name: str) -> str:
    return next(c.id for m in result.messages if m.kind == "assistant" for c in m.tool_calls if c.name == name)


async def test_every_gen_ai_attribute_is_a_name_of_the_conventions(spans: InMemorySpanExporter) -> None:
    content_on(spans)
    model = ScriptedModel([RateLimitError("slow", status_code=429), [tool_call("get_weather", city="Oslo")], "ok"])
    agent = Agent(model, tools=weather_tools(), store=MemoryStore(), system="Be brief.", retry=FAST,
                  settings={"temperature": 0.2, "max_tokens": 50})
    async for _ in agent.stream("weather?"):
        pass
    known = semconv_names()
    used = {k for k, _ in all_attributes(spans) if k.startswith("gen_ai.")}
    assert used - known == set()
    assert {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
            "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.request.temperature",
            "gen_ai.request.max_tokens", "gen_ai.response.time_to_first_chunk"} <= used
    others = {k for k, _ in all_attributes(spans) if not k.startswith(("gen_ai.", "nbagent.")) and k != "status"}
    assert others <= {"error.type", "server.address", "server.port"}
    chat = named(spans, "chat ")[-1].attributes or {}
    messages = json.loads(str(chat["gen_ai.input.messages"]))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["parts"][0] == {"type": "tool_call", "id": messages[2]["parts"][0]["id"],
                                       "name": "get_weather", "arguments": {"city": "Oslo"}}
    assert json.loads(str(chat["gen_ai.system_instructions"])) == [{"type": "text", "content": "Be brief."}]
    assert chat["gen_ai.request.stream"] is True


def test_provider_names_follow_the_conventions_well_known_values() -> None:
    from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import GenAiProviderNameValues

    from nbagent.models import OpenAIModel
    from nbagent.tracing._spans import PROVIDER_NAMES, provider_name

    assert set(PROVIDER_NAMES.values()) <= {v.value for v in GenAiProviderNameValues}
    for given, expected in (("openai", "openai"), ("google", "gcp.gemini"), ("mistral", "mistral_ai"),
                            ("ollama", "ollama")):
        model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api_key="x", provider=given)
        assert provider_name(model) == expected


async def test_content_is_off_by_default(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel([[tool_call("get_weather", city="Atlantis")], "It is sunny in Atlantis"])
    agent = Agent(model, tools=weather_tools(), store=MemoryStore(), system="SYSTEM-PROMPT")
    await agent.run("PROMPT-TEXT about Atlantis")
    text = json.dumps([v for _, v in all_attributes(spans)], default=str)
    for word in ("PROMPT-TEXT", "Atlantis", "SYSTEM-PROMPT", "Sunny"):
        assert word not in text
    assert not {k for k, _ in all_attributes(spans)} & {
        "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}


async def test_a_denied_call_and_a_failing_tool_are_error_spans(spans: InMemorySpanExporter) -> None:
    @tool
    def broken() -> str:
        """Fails."""
        raise ValueError("no")

    model = ScriptedModel([[tool_call("refund", order=1), tool_call("broken")], "ok"])
    agent = Agent(model, tools=[*weather_tools(), broken], store=MemoryStore())
    paused = await agent.run("go")
    await agent.resume(paused, deny={paused.pending[0].id: "not today"})
    tools = {s.name: s for s in named(spans, "execute_tool")}
    denied, failed = tools["execute_tool refund"], tools["execute_tool broken"]
    assert (denied.attributes or {})["nbagent.decision"] == "denied"
    assert denied.status.status_code == trace.StatusCode.ERROR and (denied.attributes or {})["error.type"] == "denied"
    assert failed.status.status_code == trace.StatusCode.ERROR and (failed.attributes or {})["error.type"] == "failed"
    assert "no" not in (failed.status.description or "")  # the error text is content: off


async def test_tool_spans_are_current_in_concurrent_sync_and_async_tools_and_nest_an_inner_agent(
    spans: InMemorySpanExporter,
) -> None:
    tracer = spans.provider.get_tracer("user")  # type: ignore[attr-defined]
    inner = Agent(ScriptedModel(["inner answer"]), store=MemoryStore(), name="helper")

    @tool
    async def ask_helper(question: str) -> str:
        """Ask another agent."""
        with tracer.start_as_current_span("user work async"):
            await asyncio.sleep(0.01)
        return (await inner.run(question)).output

    @tool
    def lookup(key: str) -> str:
        """Look something up (a sync tool: it runs in a worker thread)."""
        with tracer.start_as_current_span("user work sync"):
            return key

    model = ScriptedModel([[tool_call("ask_helper", question="q"), tool_call("lookup", key="k")], "ok"])
    await Agent(model, tools=[ask_helper, lookup], store=MemoryStore()).run("go")
    by_name = {s.name: s for s in spans.get_finished_spans()}
    for child, parent in (("user work async", "execute_tool ask_helper"), ("user work sync", "execute_tool lookup"),
                          ("invoke_agent helper", "execute_tool ask_helper")):
        assert by_name[child].parent is not None, child
        assert by_name[child].parent.span_id == by_name[parent].context.span_id, child
    assert len({s.context.trace_id for s in spans.get_finished_spans()}) == 1


async def test_instrument_is_idempotent_and_uninstrument_stops(spans: InMemorySpanExporter) -> None:
    provider = spans.provider  # type: ignore[attr-defined]
    nbagent.tracing.instrument(tracer_provider=provider)
    nbagent.tracing.instrument(tracer_provider=provider)
    assert nbagent.tracing.is_instrumented()
    agent = Agent(ScriptedModel(["a", "b"]), store=MemoryStore())
    await agent.run("one")
    assert len(named(spans, "invoke_agent")) == 1 and len(named(spans, "chat ")) == 1
    nbagent.tracing.uninstrument()
    assert not nbagent.tracing.is_instrumented()
    await agent.run("two")
    assert len(named(spans, "invoke_agent")) == 1


async def test_a_cancelled_run_ends_its_spans(spans: InMemorySpanExporter) -> None:
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Takes long."""
        started.set()
        await asyncio.sleep(30)
        return "late"

    agent = Agent(ScriptedModel([[tool_call("slow")], "never"]), tools=[slow], store=MemoryStore())
    handle = agent.start("go")
    await asyncio.wait_for(started.wait(), 10)
    handle.cancel()
    result = await handle
    assert result is not None and result.status == "cancelled"
    (run,) = named(spans, "invoke_agent")
    assert (run.attributes or {})["nbagent.status"] == "cancelled"
    (call,) = named(spans, "execute_tool")
    assert call.end_time is not None


async def test_a_stream_closed_mid_answer_ends_its_chat_span_as_cancelled(spans: InMemorySpanExporter) -> None:
    import contextlib

    from nbagent.models import FunctionModel

    async def deltas(messages: list[Any], request: Any) -> Any:
        for word in ("one ", "two ", "three "):
            yield word
            await asyncio.sleep(0.01)

    agent = Agent(FunctionModel(lambda m, r: "x", stream_function=deltas), store=MemoryStore())
    async with contextlib.aclosing(agent.stream("count")) as events:
        async for event in events:
            if event.kind == "text-delta":
                break
    (chat,) = named(spans, "chat ")
    assert (chat.attributes or {})["nbagent.status"] == "cancelled"
    assert (chat.attributes or {})["gen_ai.response.time_to_first_chunk"] >= 0
    (run,) = named(spans, "invoke_agent")
    assert (run.attributes or {})["nbagent.status"] == "cancelled"


async def test_a_traced_model_still_asks_its_provider_to_manage_the_context(spans: InMemorySpanExporter) -> None:
    from nbagent import Compaction
    from nbagent.context import NativeContext
    from nbagent.models import FunctionModel

    class Managing(FunctionModel):
        native_context = True

    model = Managing(lambda messages, request: "ok", context_window=1_000)
    await Agent(model, store=MemoryStore(), compaction=Compaction.native(at=0.5, keep_last=2)).run("hi")
    assert named(spans, "chat ") and [r.context_management for r in model.requests] == [NativeContext(500, 1)]


async def test_a_compaction_and_a_fallback_are_span_events(spans: InMemorySpanExporter) -> None:
    from nbagent import Compaction
    from nbagent.models import FunctionModel

    @tool
    def get_rows(n: int) -> str:
        """Rows."""
        return "\n".join(f"row {i}: " + "x" * 60 for i in range(n))

    def answer(messages: list[Any], request: Any) -> Any:
        if not request.tools:
            return "a summary"
        return tool_call("get_rows", n=20) if messages[-1].kind == "user" else "done"

    agent = Agent(FunctionModel(answer, context_window=800), tools=[get_rows], store=MemoryStore(),
                  compaction=Compaction(at=0.5, keep_last=2))
    thread = None
    for turn in range(8):
        thread = (await agent.run(f"turn {turn}", thread=thread)).thread
    events = [e for s in named(spans, "invoke_agent") for e in s.events if e.name == "nbagent.compaction"]
    assert events and (events[0].attributes or {})["nbagent.compaction.policy"] == "summary"
    summaries = [s for s in named(spans, "chat ") if (s.attributes or {}).get("nbagent.purpose") == "compaction"]
    assert len(summaries) == len(events)

    from dataclasses import dataclass

    from nbagent.tracing._spans import RunTrace

    @dataclass
    class ModelFallbackEvent:  # the shape a fallback model's event has: plain fields and a kind
        failed_model: str
        model: str
        error: str
        kind: str = "model-fallback"

    run_trace = RunTrace.__new__(RunTrace)
    run_trace.span, run_trace.content = FakeSpan(), False
    run_trace.on_event(ModelFallbackEvent("primary", "second", "ServerError: 503 key=sk-abcdefghijkl"))  # type: ignore[arg-type]
    name, attributes = run_trace.span.events[0]  # type: ignore[attr-defined]
    assert name == "nbagent.fallback" and attributes["nbagent.fallback.model"] == "second"
    assert "sk-abcdefghijkl" not in attributes["nbagent.fallback.error"]


class FakeSpan:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def add_event(self, name: str, attributes: dict[str, Any]) -> None:
        self.events.append((name, attributes))


async def test_every_model_call_of_an_agent_with_a_tool_source_is_traced(spans: InMemorySpanExporter) -> None:
    # The source's merged config is cached; a traced run's model must survive it at every step.
    class Source:
        def __init__(self) -> None:
            self.tools: tuple[Any, ...] | None = None

        def cached_tools(self) -> tuple[Any, ...] | None:
            return self.tools

        async def list_tools(self) -> tuple[Any, ...]:
            self.tools = (weather_tools()[0],)
            return self.tools

    script = [[tool_call("get_weather", city="Oslo")], [tool_call("get_weather", city="Rome")], "ok"]
    agent = Agent(ScriptedModel(script * 2), tools=[Source()], store=MemoryStore())
    for _ in range(2):
        assert (await agent.run("weather twice")).output == "ok"
    assert len(named(spans, "invoke_agent")) == 2
    assert len(named(spans, "chat ")) == 6 and len(named(spans, "execute_tool")) == 4


async def test_a_client_tool_is_requested_and_its_result_decided(spans: InMemorySpanExporter) -> None:
    from nbagent import Tool

    ask = Tool.client("ask_user", "Ask the person a question.", {"question": str})
    agent = Agent(ScriptedModel([[tool_call("ask_user", question="colour?")], "blue it is"]), tools=[ask],
                  store=MemoryStore())
    paused = await agent.run("pick a colour")
    await agent.resume(paused, results={paused.pending[0].id: "blue"})
    first, second = named(spans, "invoke_agent")
    (requested,) = first.events
    assert requested.name == "nbagent.approval.requested"
    assert (requested.attributes or {})["nbagent.reason"] == "client"
    (decided,) = second.events
    assert (decided.attributes or {})["gen_ai.tool.name"] == "ask_user"
    (call,) = named(spans, "execute_tool")
    assert (call.attributes or {})["nbagent.decision"] == (decided.attributes or {})["nbagent.decision"]


async def test_a_failure_of_the_tracing_never_reaches_the_run(spans: InMemorySpanExporter,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.tracing import _spans

    def broken(*args: Any) -> Any:
        raise RuntimeError("exporter bug")

    monkeypatch.setattr(_spans, "_warned", False)
    monkeypatch.setitem(_spans._HANDLERS, "tool-call-started", broken)
    agent = Agent(ScriptedModel([[tool_call("get_weather", city="Oslo")], "ok"]), tools=weather_tools(),
                  store=MemoryStore())
    with pytest.warns(RuntimeWarning, match="a span could not be recorded"):
        result = await agent.run("go")
    assert result.output == "ok" and len(named(spans, "invoke_agent")) == 1


class _Raising(SimpleSpanProcessor):
    """A span processor with a bug in `on_start` or `on_end` (for the spans named `prefix`)."""

    def __init__(self, where: str, prefix: str = "") -> None:
        super().__init__(InMemorySpanExporter())
        self.where, self.prefix = where, prefix

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.where == "on_start" and span.name.startswith(self.prefix):
            raise RuntimeError("processor bug in on_start")

    def on_end(self, span: ReadableSpan) -> None:
        if self.where == "on_end" and span.name.startswith(self.prefix):
            raise RuntimeError("processor bug in on_end")


@pytest.mark.parametrize("where", ["on_start", "on_end"])
@pytest.mark.parametrize("prefix", ["", "invoke_agent", "chat", "execute_tool"])
def test_a_span_processor_that_raises_never_reaches_the_run(where: str, prefix: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A processor's ``on_start`` or ``on_end`` that raises (for every span, or one kind) is
    handled as a raising exporter is: one warning, the run completes, the other spans are kept."""
    from nbagent.tracing import _spans

    kept = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    provider.add_span_processor(_Raising(where, prefix))
    monkeypatch.setattr(_spans, "_warned", False)
    nbagent.tracing.instrument(tracer_provider=provider)
    try:
        script = [[tool_call("get_weather", city="Oslo")], "ok"]
        agent = Agent(ScriptedModel(script * 2), tools=weather_tools(), store=MemoryStore())
        with pytest.warns(RuntimeWarning, match=f"a span could not be recorded .*processor bug in {where}"):
            result = agent.run_sync("go")
        streamed = agent.run_sync("again", thread=result.thread)  # warned once; still fine
    finally:
        nbagent.tracing.uninstrument()
    assert (result.status, result.output, streamed.status) == ("completed", "ok", "completed")
    names = {s.name.split()[0] for s in kept.get_finished_spans()}
    unstarted = {n for n in ("invoke_agent", "chat", "execute_tool") if where == "on_start" and n.startswith(prefix)}
    assert names == {"invoke_agent", "chat", "execute_tool"} - unstarted  # the others are kept


def test_a_processor_whose_on_end_raises_leaves_a_retried_call_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``chat`` span of a call that failed ends inside the model call: a processor's error
    there must not replace the call's own (which is retried), nor fail the run."""
    from nbagent.models import FunctionModel
    from nbagent.tracing import _spans

    calls: list[int] = []

    def busy_once(messages: Any, info: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RateLimitError("429 slow down", status_code=429, retry_after=0)
        return "ok"

    provider = TracerProvider()
    provider.add_span_processor(_Raising("on_end", "chat"))
    monkeypatch.setattr(_spans, "_warned", False)
    nbagent.tracing.instrument(tracer_provider=provider)
    try:
        with pytest.warns(RuntimeWarning, match="processor bug in on_end"):
            result = Agent(FunctionModel(busy_once), store=MemoryStore(), retry=FAST).run_sync("go")
    finally:
        nbagent.tracing.uninstrument()
    assert (result.status, result.output, len(calls)) == ("completed", "ok", 2)


# ---------------------------------------------------------------------------------------- frames


async def test_the_usage_frame_has_trace_and_span_ids_when_tracing_is_on(spans: InMemorySpanExporter) -> None:
    pytest.importorskip("pandas")
    store = MemoryStore()
    agent = Agent(ScriptedModel([[tool_call("get_weather", city="Rome")], "sunny"]), tools=weather_tools(),
                  store=store)
    result = await agent.run("weather?")
    for frame in (nbagent.usage_frame(result), nbagent.usage_frame(store)):
        assert list(frame.columns[-2:]) == ["trace_id", "span_id"]
        chats = {format(s.context.span_id, "016x"): s for s in named(spans, "chat ")}
        for trace_id, span_id, step in zip(frame["trace_id"], frame["span_id"], frame["step"], strict=True):
            assert re.fullmatch("[0-9a-f]{32}", trace_id) and re.fullmatch("[0-9a-f]{16}", span_id)
            assert format(chats[span_id].context.trace_id, "032x") == trace_id
            assert (chats[span_id].attributes or {})["nbagent.step"] == step
    nbagent.tracing.uninstrument()
    assert "trace_id" not in nbagent.usage_frame(result).columns


# ---------------------------------------------------------------------------------------- secrets

SECRET = "sk-test-0123456789abcdef"


def _completion(message: dict[str, Any], finish: str) -> tuple[str, bytes]:
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
    return ("application/json", json.dumps(body).encode())


def _calls(*calls: tuple[str, dict[str, Any]]) -> tuple[str, bytes]:
    return _completion({"content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)]}, "tool_calls")


async def test_no_key_and_no_mcp_secret_in_any_span_even_with_content(
    spans: InMemorySpanExporter, tmp_path: Path, mcp_http_url: str,
) -> None:
    pytest.importorskip("openai")
    from nbagent.mcp import MCPTools
    from nbagent.models import OpenAIModel
    from tests.loopback import answering

    content_on(spans)
    kitchen = ROOT / "tests" / "mcp_servers" / "kitchen.py"
    local = MCPTools.stdio(sys.executable, [str(kitchen)], env={"KITCHEN_LOG": "", "KITCHEN_SECRET": SECRET})
    remote = MCPTools.http(mcp_http_url, headers={"Authorization": f"Bearer {SECRET}"}, prefix="remote_")
    leak = json.dumps({"error": {"message": f"Incorrect API key provided: {SECRET}", "type": "server_error"}})
    replies = [("application/json", leak.encode(), {}, 500),
               _calls(("env_value", {"name": "KITCHEN_SECRET"}), ("remote_authorization", {})),
               _completion({"content": "all done"}, "stop")]
    try:
        with answering(*replies) as url:
            model = OpenAIModel("gpt-4o-mini", base_url=f"{url}/v1", api_key=SECRET)
            agent = Agent(model, tools=[local, remote], store=MemoryStore(), retry=FAST)
            result = await agent.run("check the secrets")
    finally:
        await local.close()
        await remote.close()
    assert result.status == "completed", result.error
    assert len(named(spans, "execute_tool")) == 2 and named(spans, "chat ")[0].status.status_code.name == "ERROR"
    text = json.dumps(all_attributes(spans), default=str)
    assert SECRET not in text and SECRET[3:] not in text
    assert "Incorrect API key provided" in text  # the provider's error text is kept, without the key
    chat = named(spans, "chat ")[-1].attributes or {}
    assert chat["server.address"] == "127.0.0.1" and chat["nbagent.cost"] == result.usage.calls[-1].cost_total


@pytest.fixture(scope="module")
def mcp_http_url() -> Iterator[str]:
    """The kitchen MCP server over streamable HTTP on 127.0.0.1 (a subprocess)."""
    pytest.importorskip("mcp")
    import socket
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "mcp_servers" / "kitchen.py"), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
        except urllib.error.HTTPError:
            break  # it answers (404 at /)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the HTTP MCP server did not start")
            time.sleep(0.2)
        else:
            break
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(timeout=10)


# ---------------------------------------------------------------------------------------- processes

CHILD = """
import asyncio, json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import nbagent.tracing
from nbagent import Agent, tool
from nbagent.models import ScriptedModel

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
nbagent.tracing.instrument(tracer_provider=provider)

@tool(requires_approval=True)
def refund(order: int) -> str:
    '''Refund an order.'''
    return f"refunded {order}"

async def main():
    agent = Agent(ScriptedModel(["refund done"]), tools=[refund], store=sys.argv[1])
    pending = await agent.pending(sys.argv[2])
    result = await agent.resume(thread=sys.argv[2], approve=pending)
    assert result.status == "completed", result.error

asyncio.run(main())
print(json.dumps([{"name": s.name, "trace": format(s.context.trace_id, "032x"),
                   "parent": format(s.parent.span_id, "016x") if s.parent else None,
                   "remote_parent": bool(s.parent and s.parent.is_remote),
                   "events": [e.name for e in s.events]} for s in exporter.get_finished_spans()]))
"""


async def test_a_resume_in_another_process_continues_the_trace(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    store = str(tmp_path / "threads.db")

    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        return f"refunded {order}"

    paused = await Agent(ScriptedModel([[tool_call("refund", order=7)]]), tools=[refund], store=store).run("refund 7")
    assert paused.status == "paused"
    (run,) = named(spans, "invoke_agent")
    proc = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", textwrap.dedent(CHILD), store, paused.thread],
                                   capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    child = {s["name"]: s for s in json.loads(proc.stdout)}
    resumed = child["invoke_agent agent"]
    assert resumed["trace"] == format(run.context.trace_id, "032x")
    assert resumed["parent"] == format(run.context.span_id, "016x") and resumed["remote_parent"]
    assert resumed["events"] == ["nbagent.approval.decided"]
    assert child["execute_tool refund"]["trace"] == resumed["trace"]
    assert child["chat scripted"]["trace"] == resumed["trace"]


def test_the_trace_context_is_part_of_the_meta_record_and_old_records_read_without_it() -> None:
    from nbagent.store.meta import ThreadMeta

    carrier = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    record = ThreadMeta(status="paused", trace=carrier).to_dict()
    assert record["trace"] == carrier and ThreadMeta.from_dict(record).trace == carrier
    assert "trace" not in ThreadMeta(status="paused").to_dict()
    assert ThreadMeta.from_dict({"version": 1, "status": "paused"}).trace is None


def test_with_tracing_off_no_opentelemetry_is_imported() -> None:
    code = textwrap.dedent("""
        import sys
        import nbagent, nbagent.tracing
        from nbagent import Agent, tool
        from nbagent.models import ScriptedModel, tool_call
        from nbagent._run import hooks

        @tool
        def get_weather(city: str) -> str:
            '''Weather.'''
            return "sunny"

        agent = Agent(ScriptedModel([[tool_call("get_weather", city="Paris")], "ok"]), tools=[get_weather],
                      store="memory")
        assert agent.run_sync("go").output == "ok"
        assert hooks.run_hook is None and not nbagent.tracing.is_instrumented()
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        assert not loaded, loaded
        print("clean")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "clean", proc.stderr


async def test_a_traced_run_keeps_recording_and_replays_recorded_tool_results(spans: InMemorySpanExporter) -> None:
    """Tracing wraps the run's model (`TracedModel`); the wrapper forwards the model's powers, so
    `record` still keeps each call and ``replay(tools="recorded")`` still stands in for the tool."""
    from nbagent.models import FunctionModel, record, replay

    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"Sunny in {city}"

    def answer(messages: Any, request: Any) -> Any:
        return tool_call("get_weather", city="Oslo") if messages[-1].kind == "user" else messages[-1].content

    store = MemoryStore()
    recorded = await Agent(record(FunctionModel(answer)), tools=[get_weather], store=store).run("Oslo?", thread="t")
    assert len(await store.recordings(["t"])) == 2 and ran == ["Oslo"]
    again = await Agent(replay(store, thread="t", tools="recorded"), tools=[get_weather], store=MemoryStore()).run(
        "Oslo?")
    assert (recorded.output, again.output, ran) == ("Sunny in Oslo", "Sunny in Oslo", ["Oslo"])
    assert len(named(spans, "chat")) == 4


async def test_a_sub_agent_is_an_invoke_agent_span_under_its_parents_tool_span(spans: InMemorySpanExporter) -> None:
    """`Agent.as_tool`: the child's run nests under the parent's ``execute_tool`` span, its own
    model and tool calls under it (the parent's span reads only its own events), also when the
    child is continued after a pause."""
    @tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    child = Agent(ScriptedModel([tool_call("delete_file", path="/tmp/x", id="d1"), "child done"]),
                  tools=[delete_file], name="researcher")
    boss = Agent(ScriptedModel([tool_call("researcher", task="go", id="c1"), "boss done"]), agents=[child],
                 name="boss", store=MemoryStore())
    paused = await boss.run("go", thread="t")
    done = await boss.resume(paused, approve=paused.pending)
    assert done.status == "completed"
    tools = {(s.attributes or {}).get("gen_ai.tool.call.id"): s for s in named(spans, "execute_tool")}
    assert set(tools) == {"c1", "d1"}  # (c1 twice: the paused call, and its continuation)
    runs = named(spans, "invoke_agent")
    children = [s for s in runs if s.name == "invoke_agent researcher"]
    assert len(children) == 2 and len([s for s in runs if s.name == "invoke_agent boss"]) == 2
    parents = {s.context.span_id: s for s in named(spans, "execute_tool researcher")}
    assert all(s.parent is not None and s.parent.span_id in parents for s in children)
    paused_call = next(s for s in parents.values() if (s.attributes or {}).get("nbagent.status") == "paused")
    assert paused_call.end_time is not None
    delete = tools["d1"]
    assert delete.parent is not None and delete.parent.span_id in {s.context.span_id for s in children}
