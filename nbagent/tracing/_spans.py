"""The spans of one run, made from its events: `Tracing` (the run hook) and `RunTrace`.

Owns the span tree and its attributes (see the package docstring for the tree and the names).
`Tracing` is what `instrument()` installs as `nbagent._run.hooks.run_hook`: for each run it makes a
`RunTrace`, which opens the ``invoke_agent`` span, gives the run its model wrapped in `TracedModel`
(a ``chat`` span per call, current while the call goes on, so an HTTP client's own spans nest in
it), sets `RunWork.wrap_tool` (the ``execute_tool`` span is current while the tool runs, so a tool's
own spans, or an agent run inside a tool, nest in it), and reads every event of the run as it
passes. Imports OpenTelemetry's API, the core's events, messages, models and run state, and
`_content`; loaded only by `instrument()`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .._run.config import RunConfig
from .._run.state import RunState
from ..events import Event, RunEndedEvent
from ..messages import AssistantMessage, ToolCall, ToolResultMessage
from ..models.base import Model, ModelRequest, ModelResponse, StreamItem, WrappedModel
from ..result import RunResult
from ._content import input_messages, output_messages, scrub, system_instructions
from ._index import remember

__all__ = ["RunTrace", "TracedModel", "Tracing"]

_PROPAGATOR = TraceContextTextMapPropagator()
_SETTINGS = {"temperature": "gen_ai.request.temperature", "max_tokens": "gen_ai.request.max_tokens",
             "top_p": "gen_ai.request.top_p", "seed": "gen_ai.request.seed",
             "frequency_penalty": "gen_ai.request.frequency_penalty",
             "presence_penalty": "gen_ai.request.presence_penalty"}


@dataclasses.dataclass(slots=True)
class Settings:
    """What `instrument()` was given."""

    tracer: trace.Tracer
    include_content: bool = False


class Tracing:
    """The run hook `instrument()` installs: each run gets a `RunTrace`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def __call__(self, config: RunConfig, run: RunState,
                 start: Callable[[RunConfig], AsyncGenerator[Event, None]]) -> AsyncGenerator[Event, None]:
        return RunTrace(self.settings, config, run).events(start)


PROVIDER_NAMES = {
    "google": "gcp.gemini", "gemini": "gcp.gemini", "google-gla": "gcp.gemini", "vertex": "gcp.vertex_ai",
    "google-vertex": "gcp.vertex_ai", "mistral": "mistral_ai", "x-ai": "x_ai", "xai": "x_ai", "grok": "x_ai",
    "azure": "azure.ai.openai", "bedrock": "aws.bedrock", "aws": "aws.bedrock", "watsonx": "ibm.watsonx.ai",
}
"""nbagent's provider names (genai-prices' ids, what users pass) -> the conventions' well-known
``gen_ai.provider.name`` values where they differ; any other name is used as it is."""


def provider_name(model: Model) -> str:
    """``gen_ai.provider.name`` of a model."""
    name = model.provider
    return PROVIDER_NAMES.get(name, name)


def _server(model: Model) -> dict[str, Any]:
    """``server.address`` / ``server.port`` from a model's base URL (never its user or query)."""
    url = getattr(model, "base_url", None)
    if not isinstance(url, str) or not url:
        return {}
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return {}
    out: dict[str, Any] = {"server.address": host} if host else {}
    if port:
        out["server.port"] = port
    return out


class RunTrace:
    """One run's spans (see the module)."""

    own: tuple[str, ...] = ()
    """The run's `path`: the events it reads are those of its own agent."""

    def __init__(self, settings: Settings, config: RunConfig, run: RunState) -> None:
        self.tracer = settings.tracer
        self.content = settings.include_content
        self.config = config
        self.run = run
        self.own = run.path
        self.span: Span | None = None
        self.ctx: otel_context.Context | None = None
        self.tools: dict[str, Span] = {}
        """The ``execute_tool`` spans of the calls running, by call id."""
        self.calling: set[Span] = set()
        """``chat`` spans of model calls going on (a run closed meanwhile ends them)."""
        self.answered: list[tuple[Span, int]] = []
        """``chat`` spans answered and not ended yet: each ends with its usage row (its cost), at the
        time its answer came."""
        self.ended = False

    # ------------------------------------------------------------------ the run
    async def events(self, start: Callable[[RunConfig], AsyncGenerator[Event, None]]) -> AsyncGenerator[Event, None]:
        """The run's events, passed on as they come, each read on the way."""
        self.begin()
        config = self.config
        traced = dataclasses.replace(
            config, model=TracedModel(config.model, self),
            summarizer=TracedModel(config.summarizer, self) if config.summarizer is not None else None)
        self.run.work.wrap_tool = self.wrap_tool
        inner = start(traced)
        try:
            async for event in inner:
                self.on_event(event)
                yield event
        finally:
            try:
                await inner.aclose()  # closing this stream closes the run now (see Agent._events)
            finally:
                self.close()

    def start(self, name: str, kind: SpanKind, attributes: dict[str, Any],
              parent: otel_context.Context | None) -> Span:
        """A span started with `attributes`; one that records nothing when the SDK cannot start
        it (a span processor's ``on_start`` raised): reported once, like a failing exporter,
        never reaching the run."""
        try:
            return self.tracer.start_span(name, context=parent, kind=kind, attributes=attributes)
        except Exception as exc:
            _tracing_failed(exc)
            return trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)

    def base(self) -> dict[str, Any]:
        run = self.run
        return {"gen_ai.conversation.id": run.stored.id, "nbagent.thread": run.stored.id, "nbagent.run_id": run.run_id}

    def begin(self) -> None:
        """Open the ``invoke_agent`` span: a child of the paused run's (a resume, in any process),
        else of the current span; its context is stored with the thread (`ThreadMeta.trace`)."""
        run, config, stored = self.run, self.config, self.run.stored
        parent = None
        prompted = len(stored.messages) > run.new_message_index
        if not prompted and stored.trace and run.parent is None:  # (a sub-agent: under its parent's call)
            parent = _PROPAGATOR.extract(stored.trace)
        name = config.name or "agent"
        model = config.model
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": provider_name(model),
                      "gen_ai.agent.name": name, "gen_ai.request.model": model.model_name, **self.base(),
                      "nbagent.resumed": not prompted}
        if self.content:
            if config.system:
                attributes["gen_ai.system_instructions"] = system_instructions_of(config.system)
            if prompted:
                attributes["gen_ai.input.messages"] = input_messages(stored.messages[run.new_message_index:])
        self.span = span = self.start(f"invoke_agent {name}", SpanKind.INTERNAL, attributes, parent)
        self.ctx = set_span_in_context(span)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=self.ctx)
        if carrier:
            stored.trace = carrier
            run.work.dirty = True  # the next checkpoint's meta record carries it

    def on_event(self, event: Event) -> None:
        """Read one event of the run (text deltas cost one dict lookup). A failure here is
        reported once and never reaches the run. A sub-agent's events, passed up this run's stream
        (another `path`), are its own run's spans' business."""
        handler = _HANDLERS.get(event.kind)
        own = self.own
        path = getattr(event, "path", own)
        if handler is not None and (path is own or path == own):
            try:
                handler(self, event)
            except Exception as exc:
                _tracing_failed(exc)

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        if self.span is not None:
            self.span.add_event(name, {k: v for k, v in attributes.items() if v is not None})

    def finish(self, result: RunResult[Any]) -> None:
        """The run ended: its outcome and totals on the ``invoke_agent`` span, which ends."""
        span = self.span
        if span is None or self.ended:
            return
        usage = result.usage
        attributes: dict[str, Any] = {
            "nbagent.status": result.status, "nbagent.steps": result.steps,
            "gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens,
        }
        if usage.cost_total is not None:
            attributes["nbagent.cost"] = usage.cost_total
        if result.stop_reason:
            attributes["nbagent.stop_reason"] = result.stop_reason
        if self.content and result.status == "completed":
            last = next((m for m in reversed(result.messages) if isinstance(m, AssistantMessage)), None)
            if last is not None:
                attributes["gen_ai.output.messages"] = output_messages(last)
        span.set_attributes(attributes)
        if result.status == "failed":
            exc = result.exception
            span.set_attribute("error.type", type(exc).__name__ if exc is not None else "failed")
            span.set_status(Status(StatusCode.ERROR, scrub(result.error or "failed")))
        self.close()

    def close(self) -> None:
        """End every span still open (the run ended, or was cancelled or closed early)."""
        if self.ended:
            return
        self.ended = True
        self.run.work.wrap_tool = None
        for span, end in self.answered:
            _end(span, end)
        self.answered.clear()
        for span in list(self.calling):  # the model's stream was abandoned with the run
            self.chat_failed(span, None)
        paused = self.run.outcome.status == "paused"  # an agent call whose sub-agent waits
        for span in self.tools.values():
            span.set_attribute("nbagent.status", "paused" if paused else "cancelled")
            _end(span)
        self.tools.clear()
        if self.span is not None:
            outcome = self.run.outcome
            if outcome.status in ("running", "cancelled"):
                self.span.set_attribute("nbagent.status", "cancelled")
            _end(self.span)

    # ------------------------------------------------------------------ model calls
    def chat_start(self, model: Model, request: ModelRequest, stream: bool) -> Span:
        """Open a ``chat`` span for one model call (the caller makes it current)."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider_name(model),
            "gen_ai.request.model": model.model_name, "nbagent.step": request.step, **self.base(),
            **_server(model),
        }
        if stream:
            attributes["gen_ai.request.stream"] = True
        settings = request.settings
        for key, name in _SETTINGS.items():
            value = settings.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attributes[name] = value
        if self.content:
            attributes["gen_ai.input.messages"] = input_messages(request.messages)
            system = system_instructions(request.messages)
            if system is not None:
                attributes["gen_ai.system_instructions"] = system
        span = self.start(f"chat {model.model_name}", SpanKind.CLIENT, attributes, self.ctx)
        self.calling.add(span)
        return span

    def chat_answered(self, span: Span, model: Model, response: ModelResponse) -> None:
        """The call's answer; the span ends with its usage row (`on_usage`)."""
        message, counts = response.message, response.usage
        attributes: dict[str, Any] = {"gen_ai.response.model": response.model or model.model_name}
        if response.request_id:
            attributes["gen_ai.response.id"] = response.request_id
        if message.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = (message.finish_reason,)
        if counts.reported:
            attributes.update({
                "gen_ai.usage.input_tokens": counts.input_tokens, "gen_ai.usage.output_tokens": counts.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": counts.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": counts.cache_write_tokens,
                "gen_ai.usage.reasoning.output_tokens": counts.reasoning_tokens,
            })
        if self.content:
            attributes["gen_ai.output.messages"] = output_messages(message)
        self.calling.discard(span)
        span.set_attributes(attributes)
        if response.error is not None:
            span.set_attribute("error.type", type(response.error).__name__)
            span.set_status(Status(StatusCode.ERROR, scrub(str(response.error))))
        self.answered.append((span, time.time_ns()))

    def chat_failed(self, span: Span, exc: BaseException | None) -> None:
        """The call raised (it may be retried: a retry is a new ``chat`` span), or was cancelled."""
        if span not in self.calling:
            return  # ended already (the run was closed before the model's stream)
        self.calling.discard(span)
        if exc is None or not isinstance(exc, Exception):
            span.set_attribute("nbagent.status", "cancelled")
        else:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, scrub(f"{type(exc).__name__}: {exc}")))
        _end(span)

    def on_usage(self, event: Any) -> None:
        row = event.call
        if not self.answered:
            return
        span, end = self.answered.pop(0)
        span.set_attribute("nbagent.purpose", row.purpose)
        if row.cost_total is not None:
            span.set_attribute("nbagent.cost", row.cost_total)
        context = span.get_span_context()
        if context.is_valid:
            remember(row, context.trace_id, context.span_id)
        _end(span, end)

    # ------------------------------------------------------------------ tool calls
    def tool_start(self, call: ToolCall, step: int) -> Span:
        tool = self.config.tools.get(call.name)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function", "nbagent.step": step, **self.base(),
        }
        if tool is not None and tool.description:
            attributes["gen_ai.tool.description"] = tool.description
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = call.args_json
        return self.start(f"execute_tool {call.name}", SpanKind.INTERNAL, attributes, self.ctx)

    def tool_finished(self, call: ToolCall, result: ToolResultMessage, step: int) -> None:
        """End the call's span (a call that never ran, e.g. denied, gets one of no duration)."""
        span = self.tools.pop(call.id, None) or self.tool_start(call, step)
        span.set_attribute("nbagent.status", result.status)
        if result.duration_s is not None:
            span.set_attribute("nbagent.duration_s", result.duration_s)
        if result.decision is not None:
            span.set_attribute("nbagent.decision", result.decision)
            decided = {"gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.id,
                       "nbagent.decision": result.decision, "nbagent.step": step}
            if self.content and result.decided_by:
                decided["nbagent.decided_by"] = result.decided_by
            self.event("nbagent.approval.decided", decided)
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", result.content)
        if result.is_error:
            span.set_attribute("error.type", result.status if result.status != "done" else "tool_error")
            span.set_status(Status(StatusCode.ERROR, scrub(result.content) if self.content else result.status))
        _end(span)

    def wrap_tool(self, call: ToolCall, fn: Callable[[], Any], is_async: bool) -> Callable[[], Any]:
        """`RunWork.wrap_tool`: run the tool with its ``execute_tool`` span current."""
        span = self.tools.get(call.id)
        if span is None:
            return fn
        ctx = set_span_in_context(span)
        if is_async:
            async def traced_async() -> Any:
                token = otel_context.attach(ctx)
                try:
                    return await fn()
                finally:
                    otel_context.detach(token)

            return traced_async

        def traced() -> Any:
            token = otel_context.attach(ctx)
            try:
                return fn()
            finally:
                otel_context.detach(token)

        return traced


_warned = False


def _tracing_failed(exc: Exception) -> None:
    global _warned
    if not _warned:
        _warned = True
        import warnings

        warnings.warn(f"nbagent.tracing: a span could not be recorded ({type(exc).__name__}: {exc}); "
                      "the run goes on", RuntimeWarning, stacklevel=2)


def _end(span: Span, end_time: int | None = None) -> None:
    """End `span`; a span processor's ``on_end`` that raises is reported once, never reaching
    the run (nor keeping the other spans open)."""
    try:
        span.end(end_time=end_time)
    except Exception as exc:
        _tracing_failed(exc)


def system_instructions_of(system: str) -> str:
    """``gen_ai.system_instructions`` for the agent's system prompt."""
    from ..messages import SystemMessage

    return system_instructions([SystemMessage(system)]) or "[]"


def _primitive(value: Any) -> bool:
    return isinstance(value, (str, bool, int, float))


def _on_started(trace_: RunTrace, event: Any) -> None:
    trace_.tools[event.call.id] = trace_.tool_start(event.call, event.step)


def _on_finished(trace_: RunTrace, event: Any) -> None:
    trace_.tool_finished(event.call, event.result, event.step)


def _on_pending(trace_: RunTrace, event: Any) -> None:
    pending = event.pending
    attributes = {"gen_ai.tool.name": pending.name, "gen_ai.tool.call.id": pending.id, "nbagent.reason": pending.reason}
    if trace_.content:
        import json

        attributes["gen_ai.tool.call.arguments"] = json.dumps(pending.args, ensure_ascii=False, default=str)
    trace_.event("nbagent.approval.requested", attributes)


def _on_retry(trace_: RunTrace, event: Any) -> None:
    trace_.event("nbagent.retry", {"nbagent.attempt": event.attempt, "nbagent.delay_s": event.delay_s,
                                   "nbagent.step": event.step, "nbagent.error": scrub(event.error)})


def _on_compaction(trace_: RunTrace, event: Any) -> None:
    record = event.record
    trace_.event("nbagent.compaction", {
        "nbagent.step": event.step, "nbagent.compaction.policy": record.policy,
        "nbagent.compaction.trigger": record.trigger, "nbagent.compaction.replaced": record.replaced,
        "nbagent.compaction.tokens_before": record.tokens_before,
        "nbagent.compaction.tokens_after": record.tokens_after,
    })


def _on_fallback(trace_: RunTrace, event: Any) -> None:
    # A fallback model's event (kind "model-fallback"): its plain fields, under nbagent.fallback.
    fields = dataclasses.fields(event) if dataclasses.is_dataclass(event) else ()
    attributes = {}
    for f in fields:
        value = getattr(event, f.name, None)
        if f.name != "kind" and _primitive(value):
            attributes[f"nbagent.fallback.{f.name}"] = scrub(value) if isinstance(value, str) else value
    trace_.event("nbagent.fallback", attributes)


def _on_end(trace_: RunTrace, event: Any) -> None:
    if isinstance(event, RunEndedEvent):
        trace_.finish(event.result)


_HANDLERS: dict[str, Callable[[RunTrace, Any], None]] = {
    "tool-call-started": _on_started,
    "tool-call-finished": _on_finished,
    "approval-requested": _on_pending,
    "client-call-requested": _on_pending,
    "model-retry": _on_retry,
    "usage": RunTrace.on_usage,
    "compaction": _on_compaction,
    "model-fallback": _on_fallback,
    **dict.fromkeys(["run-paused", "run-completed", "run-stopped", "run-failed", "run-cancelled"], _on_end),
}


class TracedModel(WrappedModel):
    """A model whose every call is a ``chat`` span of its run (current during the call); the rest
    (its name, window, replay, recording, native compaction) is `inner`'s, as `WrappedModel`
    forwards it."""

    def __init__(self, inner: Model, trace_: RunTrace) -> None:
        super().__init__(inner)
        self.trace = trace_

    async def request(self, request: ModelRequest) -> ModelResponse:
        span = self.trace.chat_start(self.inner, request, stream=False)
        token = otel_context.attach(set_span_in_context(span))
        try:
            response = await self.inner.request(request)
        except BaseException as exc:
            self.trace.chat_failed(span, exc)
            raise
        finally:
            otel_context.detach(token)
        self.trace.chat_answered(span, self.inner, response)
        return response

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        span = self.trace.chat_start(self.inner, request, stream=True)
        ctx = set_span_in_context(span)
        stream = self.inner.request_stream(request)
        started, first, done = time.perf_counter(), True, False
        failure: BaseException | None = None
        try:
            while True:
                token = otel_context.attach(ctx)  # per item: the consumer runs between items
                try:
                    item = await stream.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    otel_context.detach(token)
                if first:
                    first = False
                    span.set_attribute("gen_ai.response.time_to_first_chunk", time.perf_counter() - started)
                if isinstance(item, ModelResponse):
                    done = True
                    self.trace.chat_answered(span, self.inner, item)
                yield item
        except BaseException as exc:
            failure = exc
            raise
        finally:
            aclose = getattr(stream, "aclose", None)
            try:
                if aclose is not None:
                    await aclose()
            finally:
                if not done:
                    self.trace.chat_failed(span, failure)
