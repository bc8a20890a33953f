"""The run loop: model -> tools -> approvals -> model ... -> done, as one async generator.

Owns `RunState` (what a run knows, and what is checkpointed as the thread's ``meta``) and
`drive`, which yields events. Imports the core modules (messages, events, tools, models, store);
never widgets or pandas. The loop is driven by the conversation itself: unanswered tool calls of
the last answer are handled first, so the same code starts, resumes after a pause, and resumes
after a crash.

Durability: every model answer and every tool result is appended to the store before the next
step; a tool call is recorded as ``started`` in the ledger before it runs, so after a crash a call
with a result is never run again and an unfinished one is not silently re-run. A model answer
with tool calls is committed in one append together with its usage row, the results known
without running anything (invalid arguments, unknown tools, denials) and the ``started`` entries
of the calls about to run (`_Loop.plan`), so a tool step costs two commits: that one, and the
results.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .events import (
    ApprovalRequested,
    ClientCallRequested,
    Event,
    ModelResponseEvent,
    ModelRetryEvent,
    PendingCall,
    ReasoningDelta,
    RunEnded,
    RunStarted,
    TextAccumulator,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    UsageEvent,
    args_hash,
)
from .exceptions import InvalidArgumentsError, ModelResponseError, ModelRetry
from .messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    new_call_id,
)
from .models.base import ModelRequest, ModelResponse, ReasoningText
from .result import RunResult
from .store.base import LedgerEntry
from .tools import RunContext, Tool
from .usage import ModelCallUsage, Usage

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["Decision", "RunState", "drive", "tool_result_text", "unanswered_calls"]

END_KINDS = {
    "completed": "run-completed",
    "paused": "run-paused",
    "stopped": "run-stopped",
    "failed": "run-failed",
    "cancelled": "run-cancelled",
}


@dataclass(slots=True)
class Decision:
    """A person's decision on one pending call, bound to the arguments they saw."""

    action: str  # "approve" | "deny" | "result" | "always" (auto-approved by always_allow)
    args_hash: str
    reason: str | None = None
    args: dict[str, Any] | None = None
    """Edited arguments (approve only)."""
    value: Any = None
    """The client's result (result only)."""
    time: float = 0.0
    """When the decision was made (seconds since the epoch)."""
    by: str | None = None
    """Who made it, when known."""

    @property
    def label(self) -> str:
        """The decision as recorded on the tool result."""
        if self.action == "deny":
            return "denied"
        if self.action == "result":
            return "client"
        if self.action == "always":
            return "always-allowed"
        return "edited" if self.args is not None else "approved"

    def stamp(self, result: ToolResultMessage) -> ToolResultMessage:
        result.decision, result.decided_by, result.decided_at = self.label, self.by, self.time or None
        return result

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        return cls(**data)


@dataclass
class RunState:
    """Everything one run knows. `meta()` is the part persisted with the thread."""

    run_id: str
    thread: str
    messages: list[Message]
    version: int = 0
    thread_step: int = 0
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    ledger: dict[str, LedgerEntry] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)
    always_allowed: set[str] = field(default_factory=set)
    state: Any = None
    pending: list[PendingCall] = field(default_factory=list)
    status: str = "running"
    stop_reason: str | None = None
    error: str | None = None
    exception: BaseException | None = None
    output: Any = None
    """The final answer: its text, or the `output_type` instance of an agent with one."""
    output_data: Any = None
    """A structured answer as JSON-able data (what the thread's meta keeps)."""
    output_retries: int = 0
    truncated: bool = False
    new_message_index: int = 0
    meta_dirty: bool = True
    cancel_requested: bool = False
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    result: RunResult | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None

    def meta(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "run_id": self.run_id,
            "thread_step": self.thread_step,
            "pending": [p.to_dict() for p in self.pending],
            "decisions": {k: d.to_dict() for k, d in self.decisions.items()},
            "always_allowed": sorted(self.always_allowed),
            "state": _state_to_json(self.state),
            "stop_reason": self.stop_reason,
            "error": self.error,
            "output": self.output_data if self.output_data is not None else self.output,
            "truncated": self.truncated,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }

    def to_result(self) -> RunResult:
        return RunResult(
            run_id=self.run_id,
            thread=self.thread,
            status=self.status,  # type: ignore[arg-type]
            messages=self.messages,
            usage=self.usage,
            output=self.output if self.status == "completed" else None,
            pending=list(self.pending),
            stop_reason=self.stop_reason,
            error=self.error,
            truncated=self.truncated,
            steps=self.steps,
            state=self.state,
            new_message_index=self.new_message_index,
            exception=self.exception,
            started_at=self.started_at,
            ended_at=self.ended_at,
        )


def new_run_id() -> str:
    return "run_" + uuid.uuid4().hex[:16]


def _state_to_json(state: Any) -> Any:
    if state is None:
        return None
    dump = getattr(state, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        state = dataclasses.asdict(state)
    try:
        from pydantic_core import to_jsonable_python

        return to_jsonable_python(state)
    except Exception:
        return None


def tool_result_text(value: Any) -> str:
    """How a tool's return value is shown to the model: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    dump = getattr(value, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        from pydantic_core import to_json

        try:
            return to_json(value, fallback=str).decode()
        except Exception:
            return str(value)


def unanswered_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """Tool calls of the last answer that have no result yet (looks back only to that answer)."""
    answered: set[str] = set()
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.kind == "tool-result":
            answered.add(m.call_id)  # type: ignore[union-attr]
        elif m.kind == "assistant":
            return [c for c in m.tool_calls if c.id not in answered]  # type: ignore[union-attr]
        else:
            return []
    return []


def _fix_call_ids(message: AssistantMessage) -> None:
    # Some servers send empty ids (Gemini) or repeat them; results must map to exactly one call.
    seen: set[str] = set()
    for call in message.tool_calls:
        if not call.id or call.id in seen:
            call.id = new_call_id()
        seen.add(call.id)


def _usage_snapshot(usage: Usage) -> Usage:
    # An event records the total at that moment (like TextDelta.snapshot), not the live sum.
    return dataclasses.replace(usage, calls=list(usage.calls))


def _error_result(call: ToolCall, content: str, status: str = "failed") -> ToolResultMessage:
    return ToolResultMessage(call.id, call.name, content, True, status)  # type: ignore[arg-type]


@dataclass(slots=True)
class _Plan:
    """What the tool phase decided for the open calls of an answer (see `_Loop.plan`)."""

    calls: list[ToolCall]
    immediate: list[ToolResultMessage]
    """Results known without running anything (errors, denials, client results)."""
    ledger: list[LedgerEntry]
    """Ledger updates, ending with the ``started`` entries of `to_run`."""
    to_run: list[tuple[ToolCall, Tool, Any, str | None]]


class _Loop:
    """One run of the loop; `events()` is the async generator."""

    def __init__(self, agent: Agent, run: RunState, stream: bool) -> None:
        self.agent = agent
        self.run = run
        self.stream = stream
        self.store = agent.store
        self.decided: dict[str, Decision] = {}
        """Decisions of calls about to run, stamped on their results."""
        self.final_saved = False  # the completing answer's save carried the final meta
        self.planned: _Plan | None = None  # the plan committed with the last model answer

    async def save(
        self,
        messages: Sequence[Message] = (),
        usage: Sequence[ModelCallUsage] = (),
        ledger: Sequence[LedgerEntry] = (),
        meta: bool = False,
    ) -> None:
        run = self.run
        record = None
        if meta or run.meta_dirty:
            record = run.meta()
            run.meta_dirty = False
        run.version = await self.store.append(
            run.thread, version=run.version, step=run.thread_step, messages=messages,
            usage=usage, ledger=ledger, meta=record,
        )

    # ------------------------------------------------------------------ the loop
    async def events(self) -> AsyncGenerator[Event, None]:
        run, agent = self.run, self.agent
        yield RunStarted(run.run_id, run.thread)
        try:
            while True:
                plan, self.planned = self.planned, None
                calls = plan.calls if plan is not None else unanswered_calls(run.messages)
                if calls:
                    async for event in self.tool_phase(calls, plan):
                        yield event
                    if run.status == "completed":  # the model gave its structured answer
                        break
                    if run.pending:
                        run.status = "paused"
                        for p in run.pending:
                            yield (ClientCallRequested(p) if p.reason == "client" else ApprovalRequested(p))
                        break
                    continue
                last = run.messages[-1] if run.messages else None
                if last is not None and last.kind == "assistant":
                    if agent.output is None:
                        run.status = "completed"
                        run.output = last.text or ""  # type: ignore[union-attr]
                        break
                    # a text answer saved before a crash: judge it now, as model_step would have
                    self.text_answer(last)  # type: ignore[arg-type]
                    if run.status in ("completed", "failed"):
                        break
                    await self.save(messages=run.messages[-1:], meta=True)
                    continue
                stop = self.stop_reason()
                if stop is not None:
                    run.status, run.stop_reason = "stopped", stop
                    break
                async for event in self.model_step():
                    yield event
                if run.status == "failed":
                    break
        except (asyncio.CancelledError, GeneratorExit):
            if run.status == "paused":
                # Closed while announcing the pause (a view stops at approval-requested): nothing
                # runs any more, so the pause stands and can be resumed.
                try:
                    await self.save(meta=True)
                except Exception:
                    pass
            else:
                await self.cancel_cleanup()
            run.result = run.to_result()
            raise
        if not (self.final_saved and run.status == "completed" and not run.meta_dirty):
            run.ended_at = time.time()
            await self.save(meta=True)
        result = run.result = run.to_result()
        yield RunEnded(END_KINDS[run.status], result)  # type: ignore[arg-type]

    def stop_reason(self) -> str | None:
        run, agent = self.run, self.agent
        if run.steps >= agent.max_steps:
            return "max_steps"
        if agent.token_budget is not None and run.usage.total_tokens >= agent.token_budget:
            return "token_budget"
        if (
            agent.cost_budget is not None
            and run.usage.cost_total is not None
            and run.usage.cost_total >= agent.cost_budget
        ):
            return "cost_budget"
        if agent.stop_when is not None and agent.stop_when(run.to_result()):
            return "stop_when"
        return None

    # ------------------------------------------------------------------ model
    async def model_step(self) -> AsyncIterator[Event]:
        run, agent = self.run, self.agent
        model = agent.model
        step = run.thread_step + 1
        messages: list[Message] = run.messages
        if agent.system:
            messages = [SystemMessage(agent.system), *messages]
        request = ModelRequest(messages, agent.tool_definitions, agent.request_settings, step,
                               agent.output.name if agent.output is not None else None)
        attempt = 0
        while True:
            attempt += 1
            started = time.time()
            clock = time.perf_counter()
            try:
                if self.stream:
                    response = None
                    acc = TextAccumulator()
                    parts = acc.parts
                    async for item in model.request_stream(request):
                        if type(item) is str:
                            parts.append(item)
                            yield TextDelta(item, step, acc, len(parts))
                        elif isinstance(item, ModelResponse):
                            response = item
                        elif isinstance(item, ReasoningText):
                            yield ReasoningDelta(str(item), step)
                    if response is None:
                        raise ModelResponseError("the model's stream ended without a complete answer",
                                                 provider=model.provider)
                else:
                    response = await model.request(request)
                break
            except Exception as exc:
                if agent.retry.should_retry(exc, attempt):
                    delay = agent.retry.delay(exc, attempt)
                    yield ModelRetryEvent(attempt, str(exc), delay, step)
                    await asyncio.sleep(delay)
                    continue
                run.status = "failed"
                run.error = f"{type(exc).__name__}: {exc}"
                run.exception = exc
                return
        latency = time.perf_counter() - clock
        message = response.message
        if message.tool_calls:
            _fix_call_ids(message)
        counts = response.usage
        row = ModelCallUsage(
            run.run_id, run.thread, step, started, model.provider, response.model or model.model_name,
            counts.input_tokens, counts.cache_read_tokens, counts.cache_write_tokens, counts.output_tokens,
            counts.reasoning_tokens, latency, message.finish_reason, len(message.tool_calls),
            usage_reported=counts.reported,
        )
        agent.price(row)
        run.usage.add(row)
        run.thread_step = step
        run.steps += 1
        if message.finish_reason == "length" and message.tool_calls:
            # A call cut off mid-arguments can never be answered validly: keep it out of the history.
            run.status = "failed"
            cut = ModelResponseError(
                "the answer was cut off at the output token limit inside a tool call; raise "
                "max_tokens in the model settings or ask for less",
                provider=model.provider,
            )
            run.error, run.exception = f"{type(cut).__name__}: {cut}", cut
            await self.save(usage=[row])
            yield UsageEvent(row, _usage_snapshot(run.usage))
            return
        run.messages.append(message)
        if message.finish_reason == "length":
            run.truncated = True
        if message.tool_calls:
            # One commit for the answer, its usage row, the calls' immediate results (invalid,
            # denied, unknown) and the "started" entries of the calls about to run: all durable
            # before any of them runs.
            plan = self.planned = self.plan(message.tool_calls)
            if run.status == "completed":  # the structured answer came: nothing else runs
                run.ended_at = time.time()
                self.final_saved = True
            await self.save(messages=[message, *plan.immediate], usage=[row], ledger=plan.ledger, meta=True)
        elif agent.output is None:  # a text answer completes the run: one save for it and the end
            run.status, run.output = "completed", message.text or ""
            run.ended_at = time.time()
            await self.save(messages=[message], usage=[row], meta=True)  # thread_step moved on
            self.final_saved = True
        else:  # text where a structured answer was asked for: use it if it fits, else ask again
            self.text_answer(message)
            if run.status == "completed":
                run.ended_at = time.time()
                self.final_saved = True
            await self.save(messages=run.messages[-2:] if run.status == "running" else [message],
                            usage=[row], meta=True)
        yield ModelResponseEvent(message, step)
        yield UsageEvent(row, _usage_snapshot(run.usage))

    # ------------------------------------------------------------------ structured answers
    def finish(self, value: Any) -> None:
        """Complete the run with a structured answer."""
        run, spec = self.run, self.agent.output
        assert spec is not None
        run.status, run.output, run.output_data = "completed", value, spec.dump(value)
        run.meta_dirty = True

    def text_answer(self, message: AssistantMessage) -> None:
        """A text answer from an agent with an ``output_type``: the answer if the text fits it
        (JSON, or any text for ``str``); else a prompt asking for ``final_result`` is appended
        (``output_retries`` times), then the run fails."""
        run, agent = self.run, self.agent
        spec = agent.output
        assert spec is not None
        try:
            self.finish(spec.from_text(message.text))
            return
        except InvalidArgumentsError as exc:
            problem = str(exc)
        if run.output_retries >= agent.output_retries:
            error = ModelResponseError(
                f"the model answered in text {agent.output_retries + 1} time(s) instead of calling "
                f"{spec.name} with a {spec.type_name} answer; last problem: {problem}",
                provider=agent.model.provider,
            )
            run.status, run.error, run.exception = "failed", f"{type(error).__name__}: {error}", error
            return
        run.output_retries += 1
        run.messages.append(UserMessage(
            f"[nbagent] Your answer must be given by calling the {spec.name} tool with arguments that "
            f"match its schema, not as text ({problem}). Call {spec.name} now."
        ))

    # ------------------------------------------------------------------ tools
    def plan(self, calls: list[ToolCall]) -> _Plan:
        """Decide each open call (error result, pause, or run) without running anything.

        Updates ``run.ledger``, ``run.messages`` (the immediate results), ``run.decisions`` and
        ``run.pending`` in memory; the caller commits the returned writes in one append before
        any of the calls runs.
        """
        run, agent = self.run, self.agent
        immediate: list[ToolResultMessage] = []
        ledger: list[LedgerEntry] = []
        to_run: list[tuple[ToolCall, Tool, Any, str | None]] = []
        pending: list[PendingCall] = []
        spec = agent.output
        if spec is not None and any(c.name == spec.name for c in calls):
            final = self.plan_final(calls, immediate)
            if final:
                run.messages.extend(immediate)
                run.pending = []
                run.meta_dirty = True
                return _Plan(calls, immediate, ledger, to_run)
            calls = [c for c in calls if c.name != spec.name]  # answered (invalid) by plan_final
        for call in calls:
            tool = agent.tools.get(call.name)
            entry = run.ledger.get(call.id)
            if entry is not None and entry.status == "started" and not (tool is not None and tool.idempotent):
                result = _error_result(
                    call,
                    "interrupted: this call started before the run was interrupted and it is not "
                    "known whether it completed; check before calling it again",
                    "interrupted",
                )
                immediate.append(result)
                ledger.append(LedgerEntry(call.id, call.name, entry.args_hash, "interrupted"))
                continue
            if tool is None:
                names = ", ".join(sorted(agent.tools)) or "none"
                immediate.append(_error_result(call, f"unknown tool {call.name!r}; available tools: {names}"))
                continue
            decision = run.decisions.get(call.id)
            if decision is not None and decision.action == "deny":
                del run.decisions[call.id]
                reason = f": {decision.reason}" if decision.reason else ""
                immediate.append(decision.stamp(_error_result(call, f"denied by the user{reason}", "denied")))
                ledger.append(LedgerEntry(call.id, call.name, decision.args_hash, "denied"))
                continue
            args = call.args
            note = None
            if decision is not None and decision.args is not None:
                args = decision.args
                note = f"[the user edited the arguments before approving: {json.dumps(args)}]\n"
            if args is None:
                immediate.append(_error_result(
                    call, f"invalid arguments: not a JSON object: {call.args_json[:200]!r}; "
                    "send the arguments as a JSON object matching the tool's schema"))
                continue
            try:
                validated = tool.validate(args)
            except InvalidArgumentsError as exc:
                immediate.append(_error_result(call, f"{exc}; fix the arguments and call {call.name} again"))
                continue
            if tool.is_client:
                if decision is not None and decision.action == "result":
                    del run.decisions[call.id]
                    immediate.append(decision.stamp(
                        ToolResultMessage(call.id, call.name, tool_result_text(decision.value))))
                    ledger.append(LedgerEntry(call.id, call.name, decision.args_hash, "finished"))
                else:
                    pending.append(PendingCall(call.id, call.name, args, "client", tool.description))
                continue
            if decision is None and call.name in run.always_allowed and tool.requires_approval is not False:
                self.decided[call.id] = Decision("always", "")
            if decision is None and call.name not in run.always_allowed:
                try:
                    needs = tool.needs_approval(validated)
                except Exception:
                    needs = True  # a failing policy must not let a call through
                if needs:
                    pending.append(PendingCall(call.id, call.name, args, "approval", tool.description))
                    continue
            if pending and agent.tools_in_order:
                continue  # in order: runs after the waiting call is decided (left unanswered)
            if decision is not None:
                del run.decisions[call.id]
                self.decided[call.id] = decision
            to_run.append((call, tool, validated, note))

        # Calls about to run are recorded "started" in the same commit as the decisions above.
        ledger.extend(LedgerEntry(c.id, c.name, args_hash(c.args), "started") for c, _, _, _ in to_run)
        for entry in ledger:
            run.ledger[entry.call_id] = entry
        run.messages.extend(immediate)
        run.pending = pending
        run.meta_dirty = True
        return _Plan(calls, immediate, ledger, to_run)

    def plan_final(self, calls: list[ToolCall], immediate: list[ToolResultMessage]) -> bool:
        """Answer the ``final_result`` calls of an answer. The first valid one completes the run
        (every other call of the answer is answered "not run"); invalid ones get an error result
        the model can correct. Returns True when the run is complete."""
        spec = self.agent.output
        assert spec is not None
        accepted: str | None = None
        value: Any = None
        errors: list[ToolResultMessage] = []
        for call in calls:
            if call.name != spec.name:
                continue
            try:
                value = spec.validate(call.args)
            except InvalidArgumentsError as exc:
                errors.append(_error_result(call, f"{exc}; fix the answer and call {spec.name} again"))
                continue
            accepted = call.id
            break
        if accepted is None:
            immediate.extend(errors)
            return False
        for call in calls:
            if call.id == accepted:
                immediate.append(ToolResultMessage(call.id, call.name, "Final answer received."))
            else:
                immediate.append(_error_result(
                    call, "not run: the final answer was given in the same response", "cancelled"))
        self.finish(value)
        return True

    async def tool_phase(self, calls: list[ToolCall], plan: _Plan | None = None) -> AsyncIterator[Event]:
        """Run the open calls: `plan` them and commit that (unless the model step already did,
        together with the answer), then run the calls and record each result."""
        run, agent = self.run, self.agent
        step = run.thread_step
        if plan is None:
            plan = self.plan(calls)
            if plan.immediate or plan.ledger or plan.to_run:
                await self.save(messages=plan.immediate, ledger=plan.ledger)
        if plan.immediate:
            by_id = {c.id: c for c in plan.calls}
            for result in plan.immediate:
                yield ToolCallFinished(by_id[result.call_id], result, step)
        to_run = plan.to_run
        if not to_run:
            return

        for call, _, _, _ in to_run:
            yield ToolCallStarted(call, step)

        if len(to_run) == 1:
            results = [await self.execute(*to_run[0])]
            for result in results:
                for event in await self.record([(result, to_run[0][0], to_run[0][1])], step):
                    yield event
            return

        queue: asyncio.Queue[tuple[ToolResultMessage, ToolCall, Tool]] = asyncio.Queue()

        async def worker(items: list[tuple[ToolCall, Tool, Any, str | None]]) -> None:
            for item in items:
                queue.put_nowait((await self.execute(*item), item[0], item[1]))

        if agent.tools_in_order:
            groups = [to_run]
        else:
            sequential = [item for item in to_run if item[1].sequential]
            groups = [[item] for item in to_run if not item[1].sequential]
            if sequential:
                groups.append(sequential)
        for group in groups:
            task = asyncio.ensure_future(worker(group))
            run.tasks.add(task)
            task.add_done_callback(run.tasks.discard)
        left = len(to_run)
        while left:
            ready = [await queue.get()]
            while not queue.empty():  # results that came in together share one checkpoint
                ready.append(queue.get_nowait())
            left -= len(ready)
            for event in await self.record(ready, step):
                yield event

    async def record(self, ready: list[tuple[ToolResultMessage, ToolCall, Tool]], step: int) -> list[Event]:
        run = self.run
        entries = []
        for result, call, _ in ready:
            entry = LedgerEntry(call.id, call.name, run.ledger[call.id].args_hash,
                                "failed" if result.is_error else "finished")
            run.ledger[call.id] = entry
            run.messages.append(result)
            entries.append(entry)
        await self.save(messages=[r for r, _, _ in ready], ledger=entries,
                        meta=any(tool.takes_ctx for _, _, tool in ready))
        return [ToolCallFinished(call, result, step) for result, call, _ in ready]

    async def execute(self, call: ToolCall, tool: Tool, validated: Any, note: str | None) -> ToolResultMessage:
        run = self.run
        clock = time.perf_counter()
        ctx = None
        if tool.takes_ctx:
            ctx = RunContext(run.state, run.run_id, run.thread, run.thread_step, run.messages, call.id)
        try:
            fn = tool.bind(validated, ctx)
            if tool.is_async:
                value = await fn()
            else:
                value = await asyncio.to_thread(fn)
            content, is_error, status = tool_result_text(value), False, "done"
        except ModelRetry as exc:
            content, is_error, status = exc.message, True, "failed"
        except asyncio.CancelledError:
            cancelling = getattr(asyncio.current_task(), "cancelling", None)
            if cancelling is None or cancelling():
                raise  # the run (or this call) is being cancelled
            # The tool's own code raised it (e.g. it awaited something cancelled elsewhere):
            # an error result, not a hung or aborted run.
            content, is_error, status = "CancelledError: the tool's work was cancelled", True, "failed"
        except Exception as exc:
            content, is_error, status = f"{type(exc).__name__}: {exc}", True, "failed"
        if note:
            content = note + content
        result = ToolResultMessage(call.id, call.name, content, is_error, status,  # type: ignore[arg-type]
                                   time.perf_counter() - clock)
        decision = self.decided.pop(call.id, None)
        if decision is not None:
            decision.stamp(result)
        return result

    async def cancel_cleanup(self) -> None:
        """Leave a valid conversation: stop running tools, answer every open call."""
        run = self.run
        for task in list(run.tasks):
            task.cancel()
        if run.tasks:
            await asyncio.gather(*run.tasks, return_exceptions=True)
        results = []
        ledger = []
        for call in unanswered_calls(run.messages):
            results.append(_error_result(call, "cancelled: the run was stopped before this call finished",
                                         "cancelled"))
            if call.id in run.ledger:
                ledger.append(LedgerEntry(call.id, call.name, run.ledger[call.id].args_hash, "cancelled"))
        for entry in ledger:
            run.ledger[entry.call_id] = entry
        run.messages.extend(results)
        run.pending = []
        run.status = "cancelled"
        run.ended_at = time.time()
        try:
            await self.save(messages=results, ledger=ledger, meta=True)
        except Exception:  # the store failing must not hide the cancellation
            pass


def drive(agent: Agent, run: RunState, *, stream: bool) -> AsyncGenerator[Event, None]:
    """The run's events; the last one is a `RunEnded` (unless it is cancelled)."""
    return _Loop(agent, run, stream).events()
