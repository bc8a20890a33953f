"""The run loop: model -> tools -> approvals -> model ... -> done, as one async generator.

Owns `drive`, which yields events: it calls the model, commits each step, applies the plans
of `plan.plan` (in one place, `_Loop.apply_plan`), runs the calls they let through
(`execute.execute`) and records their results. It reads its agent's
settings from a `RunConfig` and never imports `agent`; it imports the core modules (config,
state, plan, execute, events, messages, models, store), never widgets or pandas. The loop is
driven by the conversation itself: unanswered tool calls of the last answer are handled first,
so the same code starts, resumes after a pause, and resumes after a crash.

Durability: every model answer and every tool result is appended to the store before the next
step; a tool call is recorded as ``started`` in the ledger before it runs, so after a crash a call
with a result is never run again and an unfinished one is not silently re-run. A model answer
with tool calls is committed in one append together with its usage row, the results known
without running anything (invalid arguments, unknown tools, denials) and the ``started`` entries
of the calls about to run (`plan.plan`), so a tool step costs two commits: that one, and the
results.

An agent call (`nested`) runs in the concurrent runner, whose queue also carries its sub-agent's
events; it ends with a result, or `nested.Waiting` (its sub-agent's calls join the pending ones).

The agent's guards (`guarding.RunGuards`) are asked at four points, each before anything of what
they check happens: the prompt before its write (`prepare`), parallel input guards while the
first call runs (settled before its answer is committed), an answer and its calls' arguments
before the commit (`take_answer`: a held stream is released only then), a tool's result inside
`execute`. Their verdicts come back as data the loop applies in its own places.

Size: one run's loop is one class whose steps share the run's state and its one `save`; the
decisions live in `plan`, the guards in `guarding`, the context window in `window`, a tool call
in `execute`. What is left here is the order of things, which reads best in one place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterable, Sequence
from typing import Any

from .._watch import ThreadChangedNotice, publish
from ..events import (
    ApprovalRequestedEvent,
    ClientCallRequestedEvent,
    CompactionEvent,
    Event,
    ModelFallbackEvent,
    ModelResponseEvent,
    ModelRetryEvent,
    ReasoningDeltaEvent,
    RunEndedEvent,
    RunStartedEvent,
    TextAccumulator,
    TextDeltaEvent,
    ToolCallFinishedEvent,
    ToolCallStartedEvent,
    UsageEvent,
)
from ..exceptions import ContextOverflowError, ModelError, ModelResponseError
from ..messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    clean_message,
    unanswered_calls,
    unique_call_ids,
)
from ..models.base import ModelRequest, ModelResponse, ReasoningText
from ..result import StopReason
from ..store.base import LedgerEntry
from ..store.meta import live_runs
from ..tools import Tool
from ..usage import ModelCallUsage
from . import hooks
from .config import RunConfig
from .execute import execute
from .guarding import Answered, RaceTripped, RunGuards, stand_in_messages
from .late import stop_tools
from .nested import Waiting, agent_call_ended, budget_spent, caller_of, count_usage, run_call
from .plan import CUT_OFF, Plan, TextVerdict, ToRun, judge_text, refused_rows, unusable_answer
from .plan import plan as plan_calls
from .state import END_KINDS, RunState
from .window import (
    OVERFLOW_COMPACTIONS,
    READ_RESULT,
    Trigger,
    Unused,
    Window,
    overflow_error,
    threshold_failed,
    with_reader,
)

__all__ = ["drive"]


def _fix_call_ids(run: RunState, message: AssistantMessage) -> None:
    # Some servers send empty ids (Gemini), repeat them within an answer, or name every call
    # "call_0": each result must map to exactly one call of the whole thread.
    work = run.work
    if work.call_ids is None:
        work.call_ids = {c.id for m in run.stored.messages if m.kind == "assistant" for c in m.tool_calls}
    unique_call_ids(message.tool_calls, work.call_ids)


def _stop_reason(config: RunConfig, run: RunState) -> StopReason | None:
    """Why the run must stop before its next model call (a limit of `config`, or a budget of the
    tree it is part of), or None."""
    if run.steps >= config.max_steps:
        return "max_steps"
    spent = budget_spent(config, run)
    if spent is None and config.stop_when is not None and config.stop_when(run.to_result()):
        return "stop_when"
    return spent


def _whole(answer: ModelResponse | None, provider: str) -> ModelResponse:
    """A streamed answer's last item, which a stream must end with."""
    if answer is None:
        raise ModelResponseError("the model's stream ended without a complete answer", provider=provider)
    return answer


@dataclasses.dataclass(slots=True)
class _Reply:
    """One model call's answer as it arrives (`_Loop.call_model` fills it)."""

    step: int
    response: ModelResponse | None = None
    started: float = 0.0
    latency: float = 0.0
    held: bool = False
    """Its text was held back from the stream for the guards (`guarding`)."""
    parts: list[str] | None = None
    """The text deltas received so far."""


class _Loop:
    """One run of the loop; `events()` is the async generator."""

    def __init__(self, config: RunConfig, run: RunState, stream: bool) -> None:
        self.config = config = with_reader(config)
        self.window = Window(config, run.stored.last_sent)
        self.prepared: ModelRequest | None = None
        """The next request, when `before_call` built it to size it."""
        self.run, self.path = run, run.path
        self.stream = stream
        self.store = config.store
        self.final_saved = False  # the completing answer's save carried the final meta
        self.told_end = False  # the thread's observers heard how the run ended
        self.guards = RunGuards(config.guards, run, config.name) if config.guards is not None else None

    def tell(self, event: Event) -> Event:
        """Tell the thread's observers (`_watch`: the views of this process) about `event`;
        never called for text or reasoning deltas."""
        if type(event) is RunEndedEvent:  # (no subclasses; a check per event)
            self.told_end = True
        run = self.run
        publish(run.stored.id, run.run_id, event)
        return event

    async def save(
        self,
        messages: Sequence[Message] = (),
        usage: Sequence[ModelCallUsage] = (),
        ledger: Sequence[LedgerEntry] = (),
        meta: bool = False,
    ) -> None:
        run, stored, work = self.run, self.run.stored, self.run.work
        if work.unsaved or work.unsaved_usage:  # a held prompt, a judge's rows: written first
            if work.unsaved and self.guards is not None:
                await self.guards.race_tripped()  # the prompt is written only once its guards have spoken
            messages, usage = [*work.unsaved, *messages], [*work.unsaved_usage, *usage]
            work.unsaved, work.unsaved_usage = [], []
        record = None
        if meta or run.work.dirty:
            record = run.meta()
            run.work.dirty = False
        stored.version = await self.store.append(
            stored.id, version=stored.version, step=stored.step, messages=messages,
            usage=usage, ledger=ledger, meta=record,
        )

    # ------------------------------------------------------------------ the loop
    async def events(self) -> AsyncGenerator[Event, None]:
        run, stored, outcome = self.run, self.run.stored, self.run.outcome
        live_runs.add(run.run_id)  # so that this process refuses to resume the thread meanwhile
        try:
            yield self.tell(RunStartedEvent(run.run_id, stored.id, self.prompt(), path=self.path))
            try:
                plan = None
                while True:
                    if plan is None:
                        plan = await self.open_plan()
                    if plan is not None:  # the open calls of the last answer come first
                        async for event in self.tool_phase(plan):
                            yield self.tell(event)
                        plan = None
                        if outcome.status == "completed":  # the model gave its structured answer
                            break
                        if stored.pending:
                            outcome.status = "paused"
                            for p in stored.pending:  # (a sub-agent's too: `path` says whose)
                                asked = ClientCallRequestedEvent if p.reason == "client" else ApprovalRequestedEvent
                                yield self.tell(asked(p, path=p.path, agent_call=caller_of(p.id) if p.nested else None))
                            break
                        continue
                    if outcome.status != "running" or await self.settled():
                        break
                    reply = _Reply(stored.step + 1)
                    async for event in self.call_model(reply):
                        yield event
                    if reply.response is None:  # failed (or a guard stopped the call)
                        break
                    plan, told = await self.take_answer(reply)
                    for event in self.announce(told):
                        yield event
            except (asyncio.CancelledError, GeneratorExit):
                await self.closed_early()
                raise
            result = await self.finish()
            for event in self.announce([RunEndedEvent(END_KINDS[outcome.status], result, self.path)], last=True):
                yield event
        finally:
            live_runs.discard(run.run_id)
            if not self.told_end:  # an error escaped the run: its observers read the thread again
                publish(stored.id, run.run_id, ThreadChangedNotice(stored.id))

    def announce(self, told: Sequence[Event], last: bool = False) -> list[Event]:
        """`told`, told to the thread's observers, with what the guards have to tell
        (`RunGuards.drain`): an answer's held text first (deltas: not told), then `told`, then
        trips and the guards' usage rows (before `told` when it is the run's `last` event)."""
        guards = self.guards
        if guards is not None and (guards.early or guards.late):
            early, late = guards.drain()
            return [*early, *map(self.tell, (*late, *told) if last else (*told, *late))]
        return list(map(self.tell, told))

    def prompt(self) -> UserMessage | None:
        """The message that started the run (None for a resume)."""
        run = self.run
        messages = run.stored.messages
        first = messages[run.new_message_index] if len(messages) > run.new_message_index else None
        return first if isinstance(first, UserMessage) else None

    async def open_plan(self) -> Plan | None:
        """The plan for the unanswered calls of the thread's last answer (a resume, or a run that
        continues after a crash), applied and committed; None when no call is open."""
        calls = unanswered_calls(self.run.stored.messages)
        if not calls:
            return None
        plan = plan_calls(self.config, self.run.stored, calls)
        self.apply_plan(plan)
        if plan.writes:
            await self.save(messages=plan.results, ledger=plan.ledger)
        return plan

    async def settled(self) -> bool:
        """Whether the run ends before another model call: the thread ends with an answer (saved
        before a crash: judged now, as `take_answer` would have), or a limit stops the run."""
        config, run = self.config, self.run
        messages, outcome = run.stored.messages, run.outcome
        last = messages[-1] if messages else None
        if getattr(last, "blocked", None) is not None:  # the thread's last turn ended at a guard
            outcome.status, outcome.stop_reason = "stopped", "guard"
            return True
        if isinstance(last, AssistantMessage):
            if config.output is None:
                outcome.status, outcome.output = "completed", last.text or ""
                return True
            nudge = self.apply_verdict(judge_text(config, run.output_retries, last))
            if outcome.status != "running":
                return True
            await self.save(messages=nudge, meta=True)
        stop = _stop_reason(config, run)
        if stop is not None:
            outcome.status, outcome.stop_reason = "stopped", stop
            return True
        return False

    async def finish(self) -> Any:
        """Write how the run ended (unless the completing answer's save did) and hand out the
        `RunResult`."""
        run, outcome = self.run, self.run.outcome
        if not (self.final_saved and outcome.status == "completed" and not run.work.dirty):
            outcome.ended_at = time.time()
            await self.save(meta=True)
        outcome.result = run.to_result()
        return outcome.result

    async def closed_early(self) -> None:
        """The run's generator was cancelled or closed before the end."""
        run, outcome = self.run, self.run.outcome
        if self.guards is not None:
            self.guards.abandon()
        if outcome.status == "paused":
            # Closed while announcing the pause (a view stops at approval-requested): nothing
            # runs any more, so the pause stands and can be resumed.
            try:
                await self.save(meta=True)
            except Exception:
                pass
        else:
            await self.cancel_cleanup()
        outcome.result = run.to_result()
        self.tell(RunEndedEvent(END_KINDS[outcome.status], outcome.result, self.path))

    # ------------------------------------------------------------------ applying decisions
    def apply_plan(self, plan: Plan) -> None:
        """Make `plan`'s writes in memory: the one place a plan changes the run (the caller
        commits them)."""
        stored, work = self.run.stored, self.run.work
        for entry in plan.ledger:
            stored.ledger[entry.call_id] = entry
        stored.messages.extend(plan.results)
        for call_id in plan.used:
            stored.decisions.pop(call_id, None)
        stored.pending = [p if p.path else dataclasses.replace(p, path=self.path) for p in plan.pending] \
            if plan.pending else []
        if plan.decided:
            work.decided.update(plan.decided)
        if plan.completes:
            self.complete(plan.answer)
        work.dirty = True

    def apply_verdict(self, verdict: TextVerdict) -> list[Message]:
        """Make a `judge_text` verdict's writes in memory; returns the messages it added."""
        run = self.run
        if verdict.completes:
            self.complete(verdict.answer)
        elif verdict.error is not None:
            run.outcome.fail(verdict.error)
        elif verdict.nudge is not None:
            run.output_retries += 1
            run.stored.messages.append(verdict.nudge)
            return [verdict.nudge]
        return []

    def complete(self, value: Any) -> None:
        """Complete the run with a structured answer."""
        spec = self.config.output
        assert spec is not None
        outcome = self.run.outcome
        outcome.status, outcome.output, outcome.output_data = "completed", value, spec.dump(value)
        self.run.work.dirty = True

    # ------------------------------------------------------------------ model
    def request(self, step: int) -> ModelRequest:
        return self.window.request(self.config, self.run.stored.messages, step)

    async def compact(self, step: int, trigger: Trigger, tokens: int, limit: int | None = None) -> AsyncIterator[Event]:
        """Compact the conversation before the model call of `step` (see `Window.compact`):
        the record and the summary's usage row in one commit, then their events."""
        run = self.run
        if self.guards is not None and await self.guards.race_blocks():
            return  # a summarizer is a model too: a prompt its parallel guards blocked never reaches one
        found = await self.window.compact(self.config, run.run_id, run.stored.id, run.stored.messages, step,
                                          trigger, tokens, limit)
        if found is None:
            return
        if isinstance(found, Unused):  # billed, so its row is kept; then it fails as a raising call would
            async for event in self.keep_billed([found.row]):
                yield event
            raise found.error
        record, row = found
        run.stored.messages.append(record)
        if row is not None:
            count_usage(self.config.name, run, row)
        await self.save(messages=[record], usage=[row] if row is not None else ())
        yield self.tell(CompactionEvent(record, row, step, path=self.path))
        if row is not None:
            yield self.tell(UsageEvent(row, run.usage.snapshot(), path=self.path))

    async def before_call(self, step: int) -> AsyncIterator[Event]:
        """Before a model call: take the tool sources' current lists, and compact first when the
        next request would pass the threshold (a failed summary call leaves the request whole,
        with a warning: it may still fit). Asked only when the agent has either."""
        config = self.config
        if config.sources is not None:  # a source's list may have changed since the last step
            config = self.config = with_reader(await config.sources.current(config, strict=False))
        if config.compaction is None:
            return
        self.prepared = self.request(step)  # sized now; sent unless a compaction changes it
        tokens = self.window.over_threshold(self.config)
        if tokens is None:
            return
        self.prepared = None
        try:
            async for event in self.compact(step, "threshold", tokens):
                yield event
        except ModelError as exc:
            threshold_failed(exc)

    async def call_model(self, reply: _Reply) -> AsyncIterator[Event]:  # noqa: C901  # the per-delta loop stays inline
        """Ask the model (streamed when someone consumes the events), retrying as `Retry` says
        and compacting when the provider refuses the request as too long; fills `reply`, or
        fails the run."""
        if self.config.sources is not None or self.config.compaction is not None:
            async for event in self.before_call(reply.step):
                yield event
        config, step, path = self.config, reply.step, self.path
        model = config.model
        request, self.prepared = self.prepared or self.request(step), None
        overflows = 0
        while True:
            try:
                for attempt in config.retry.tries():
                    with attempt:
                        reply.started = time.time()
                        clock = time.perf_counter()
                        if self.stream:
                            answer = None
                            acc = TextAccumulator(path)
                            parts = reply.parts = acc.parts
                            holder = self.holder()
                            if holder is not None:
                                async for event in holder.held(holder.raced(model.request_stream(request)), reply):
                                    yield event
                                answer = reply.response
                            else:
                                async for item in model.request_stream(request):
                                    if type(item) is str:
                                        parts.append(item)
                                        yield TextDeltaEvent(item, step, acc, len(parts))
                                    elif isinstance(item, ModelResponse):
                                        answer = item
                                    elif isinstance(item, ReasoningText):
                                        yield ReasoningDeltaEvent(str(item), step, path=path)
                            response = _whole(answer, model.provider)
                        else:
                            response = await self.asked(request)
                        break
                    yield self.tell(ModelRetryEvent(attempt.number, str(attempt.error), attempt.delay, step, path=path))
                    await attempt.wait()
            except ContextOverflowError as exc:
                overflows += 1
                async for event in self.overflowed(exc, step, overflows):
                    yield event
                if self.run.outcome.status != "running":
                    return
                request = self.request(step)
                continue
            except Exception as exc:
                await self.call_failed(reply, exc)
                return
            reply.latency = time.perf_counter() - clock
            reply.response = response
            if response.fallbacks:
                async for event in self.fell_back(reply, response):
                    yield event
            await self.answered(response, step)
            return

    def holder(self) -> RunGuards | None:
        """The guards, when they hold a streamed answer back now (`RunGuards.holding`)."""
        guards = self.guards
        return guards if guards is not None and guards.holding else None

    def asked(self, request: ModelRequest) -> Awaitable[ModelResponse]:
        """The model's answer to `request`, not streamed (the first call races the parallel input
        guards, `RunGuards.raced_call`)."""
        call = self.config.model.request(request)
        return call if self.guards is None else self.guards.raced_call(call)

    async def call_failed(self, reply: _Reply, error: Exception) -> None:
        """The model call failed with `error` (retries done): the run fails; or a parallel input
        guard blocked the prompt and stopped the call (`call_stopped`)."""
        if isinstance(error, RaceTripped):
            await self.call_stopped(reply, error.started)
        else:
            self.run.outcome.fail(error)

    async def call_stopped(self, reply: _Reply, started: bool) -> None:
        """The first model call was cancelled: a parallel input guard blocked the prompt (marked
        blocked now, and written with the call's usage row; no answer is kept)."""
        run, guards = self.run, self.guards
        assert guards is not None
        await guards.race_tripped()
        rows = []
        if started:  # asked, so billed: nbagent's estimate (`RunGuards.cancelled_row`)
            row = guards.cancelled_row(self.config, reply.step, reply.started, time.time() - reply.started,
                                       self.window.tokens(), "".join(reply.parts or ()), self.window.count)
            count_usage(self.config.name, run, row)
            run.stored.step, rows = reply.step, [row]
            run.steps += 1
        await self.save(usage=rows, meta=True)

    async def fell_back(self, reply: _Reply, response: ModelResponse) -> AsyncIterator[Event]:
        """A `FallbackModel`'s earlier models failed this step: tell its moves, and keep the rows
        of the refusals it moved on from (billed)."""
        step, path = reply.step, self.path
        for moved in response.fallbacks:
            model = response.model or moved.next
            yield self.tell(ModelFallbackEvent(moved.failed, moved.error, model, step, path=path))
        async for event in self.keep_billed(refused_rows(self.config, self.run, step, reply.started,
                                                         response.fallbacks)):
            yield event

    async def answered(self, response: ModelResponse, step: int) -> None:
        """Keep a recording of the model's answer (`Model.keep_recording`: `nbagent.models.record`)
        with the thread, and measure the request's context."""
        config = self.config
        await config.model.keep_recording(self.store, self.run.stored.id, response)
        self.run.context = self.window.observe(config, response, step)

    async def keep_billed(self, rows: Iterable[ModelCallUsage]) -> AsyncIterator[Event]:
        """Commit and tell usage rows billed for answers that are not kept (an empty summary, a
        refusal a `FallbackModel` moved on from: `plan.refused_rows`): a billed call is a row."""
        for row in rows:
            count_usage(self.config.name, self.run, row)
            await self.save(usage=[row])
            yield self.tell(UsageEvent(row, self.run.usage.snapshot(), path=self.path))

    async def overflowed(self, exc: ContextOverflowError, step: int, times: int) -> AsyncIterator[Event]:
        """The provider refused the request as too long: compact and let the caller retry (up to
        `OVERFLOW_COMPACTIONS` times for one call), or fail the run with the fix named
        (compaction off, or nothing left to compact)."""
        outcome, before = self.run.outcome, len(self.run.stored.messages)
        if self.config.compaction is not None and times <= OVERFLOW_COMPACTIONS:
            try:
                async for event in self.compact(step, "overflow", exc.tokens or self.window.tokens(), exc.limit):
                    yield event
            except ModelError as failed:
                outcome.fail(failed)
                return
            if len(self.run.stored.messages) > before:
                return
        outcome.fail(overflow_error(exc, self.config.compaction is not None))

    def usage_row(self, reply: _Reply, message: AssistantMessage) -> ModelCallUsage:
        run, model = self.run, self.config.model
        response = reply.response
        assert response is not None
        counts = response.usage
        row = ModelCallUsage(
            run.run_id, run.stored.id, reply.step, reply.started, model.provider, response.model or model.model_name,
            counts.input_tokens, counts.cache_read_tokens, counts.cache_write_tokens, counts.output_tokens,
            counts.reasoning_tokens, reply.latency, message.finish_reason, len(message.tool_calls),
            usage_reported=counts.reported, batch=response.batch,
        )
        if run.context is not None and run.context.step == reply.step:
            row.context = self.window.row_context(run.context)
        self.config.price(row)
        if response.replayed:  # taken from a recording: free (what it cost when recorded is kept)
            row.replayed, row.recorded_cost = True, row.cost_total
            row.cost_input = row.cost_output = row.cost_total = 0.0
        return row

    async def take_answer(self, reply: _Reply) -> tuple[Plan | None, list[Event]]:
        """Commit the model's answer with its usage row: with the plan for its tool calls (the
        calls' immediate results and the ``started`` entries of the calls about to run, all
        durable before any of them runs: one commit), or as the run's end. Returns the plan
        (None: no calls) and the events to tell."""
        run, config = self.run, self.config
        stored, outcome = run.stored, run.outcome
        assert reply.response is not None
        message = clean_message(reply.response.message)  # lone surrogates can be neither stored nor sent
        if message.tool_calls:
            _fix_call_ids(run, message)
        row = self.usage_row(reply, message)
        count_usage(config.name, run, row)
        stored.step = reply.step
        run.steps += 1
        usage_event = UsageEvent(row, run.usage.snapshot(), run.context, path=self.path)
        rows, refused = [row], None
        guards = self.guards if self.guards is not None and self.guards.asks(reply.held) else None
        if guards is not None:  # the row is kept whatever the guards decide (and if the run is stopped meanwhile)
            run.work.unsaved_usage.append(row)
            rows = []
            if guards.racing and await guards.race_tripped():  # the prompt was blocked: none of it is kept
                await self.save(meta=True)
                return None, [usage_event]
        problem = reply.response.error or unusable_answer(message, config.model.provider)
        if problem is not None:
            # Billed but unusable (a call cut off mid-arguments can never be answered validly; a
            # refused turn must not be sent again): its usage row is kept, the answer is not.
            outcome.fail(problem)
            await self.save(usage=rows)
            return None, [usage_event]
        if guards is not None:
            checked = await guards.answer(config, message, reply.step, reply.held)
            if checked.stand_in:
                return await self.refused(checked, reply.step, usage_event)
            refused = checked.refused
        stored.messages.append(message)
        if message.finish_reason in CUT_OFF:
            outcome.truncated = True
        plan = None
        written: list[Message] = [message]
        if message.tool_calls:
            plan = plan_calls(config, stored, message.tool_calls, refused)
            self.apply_plan(plan)
            written.extend(plan.results)
        elif config.output is None:  # a text answer completes the run: one save for it and the end
            outcome.status, outcome.output = "completed", message.text or ""
        else:  # text where a structured answer was asked for: use it if it fits, else ask again
            written.extend(self.apply_verdict(judge_text(config, run.output_retries, message)))
        if outcome.status == "completed":
            outcome.ended_at = time.time()
            self.final_saved = True
        await self.save(messages=written, usage=rows, ledger=plan.ledger if plan else (), meta=True)
        return plan, [ModelResponseEvent(message, reply.step, path=self.path), usage_event]

    async def refused(self, checked: Answered, step: int, usage_event: UsageEvent) -> tuple[None, list[Event]]:
        """An answer the output guards refused: the thread keeps its stand-in (and the message that
        asks the model again, for a retry), never the answer."""
        written = stand_in_messages(checked)
        self.run.stored.messages.extend(written)
        await self.save(messages=written, meta=True)
        return None, [ModelResponseEvent(checked.message, step), usage_event]

    # ------------------------------------------------------------------ tools
    async def tool_phase(self, plan: Plan) -> AsyncIterator[Event]:
        """Tell the plan's immediate results, then run its calls and record each result."""
        step, path = self.run.stored.step, self.path
        if plan.results:
            by_id = {c.id: c for c in plan.calls}
            for result in plan.results:
                yield ToolCallFinishedEvent(by_id[result.call_id], result, step, path=path)
        to_run = plan.to_run
        if not to_run:
            return
        for item in to_run:
            yield ToolCallStartedEvent(item.call, step, path=path)
        if len(to_run) == 1 and not to_run[0].tool.continues:  # (a sub-agent's events need the queue)
            item = to_run[0]
            for event in await self.record([(await self.execute(item), item.call, item.tool)], step):
                yield event
            return
        async for event in self.run_concurrently(to_run, step):
            yield event

    async def run_concurrently(self, to_run: list[ToRun], step: int) -> AsyncIterator[Event]:
        """Run several calls as concurrent groups (sequential tools, or all with
        ``tools_in_order``, one after the other in a group of their own), recording results as
        they come in (together: one checkpoint), and passing on a sub-agent's events as they come."""
        work = self.run.work
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def worker(items: list[ToRun]) -> None:
            for item in items:
                done = await run_call(self.execute(item), item, self.config, self.run, self.stream, queue.put_nowait)
                queue.put_nowait((done, item.call, item.tool))

        if self.config.tools_in_order:
            groups = [to_run]
        else:
            sequential = [item for item in to_run if item.tool.sequential]
            groups = [[item] for item in to_run if not item.tool.sequential]
            if sequential:
                groups.append(sequential)
        for group in groups:
            task = asyncio.ensure_future(worker(group))
            work.tasks.add(task)
            task.add_done_callback(work.tasks.discard)
        left = len(to_run)
        while left:
            came = [await queue.get()]
            while not queue.empty():
                came.append(queue.get_nowait())
            ready = [item for item in came if type(item) is tuple]
            for event in came:  # a sub-agent's events, as they came (deltas are not told to observers)
                if type(event) is not tuple:
                    yield event if event.kind == "text-delta" or event.kind == "reasoning-delta" else self.tell(event)
            if ready:
                left -= len(ready)
                for event in await self.record(ready, step):
                    yield event

    async def record(self, ready: list[tuple[ToolResultMessage | Waiting, ToolCall, Tool]], step: int) -> list[Event]:
        """Record results that came in together, in one checkpoint (a paused agent call has none)."""
        stored = self.run.stored
        for result, call, tool in ready:
            if tool.continues and agent_call_ended(stored, call.id, result):
                self.run.work.dirty = True  # the meta record changed (decisions, pending calls)
        done = [(r, c, t) for r, c, t in ready if not isinstance(r, Waiting)]
        entries = []
        for result, call, _ in done:
            entry = LedgerEntry(call.id, call.name, stored.ledger[call.id].args_hash,
                                "failed" if result.is_error else "finished")
            stored.ledger[call.id] = entry
            stored.messages.append(result)
            entries.append(entry)
        await self.save(messages=[r for r, _, _ in done], ledger=entries, meta=any(t.takes_ctx for _, _, t in done))
        finished: list[Event] = [ToolCallFinishedEvent(call, result, step, path=self.path) for result, call, _ in done]
        return finished if self.guards is None or not self.guards.late else [*finished, *self.guards.told()]

    async def execute(self, item: ToRun) -> ToolResultMessage:
        decision = self.run.work.decided.pop(item.call.id, None)
        result = self.config.model.recorded_result(item.call, item.edited)  # replay(tools="recorded"): not run
        if result is not None:
            if decision is not None:
                decision.stamp(result)
            return result
        tool = item.tool
        cap = None if tool.name == READ_RESULT else self.config.result_cap(tool, self.window.size)  # it pages by itself
        check = None if self.guards is None else self.guards.result_check(tool.name)
        return await execute(self.run, item.call, tool, item.args, item.edited, decision, cap, self.window.count, check)


    async def cancel_cleanup(self) -> None:
        """Leave a valid conversation: stop running tools (a sub-agent's run with them), answer
        every open call (`late.stop_tools`), and record it."""
        results, ledger = await stop_tools(self.run, self.store)
        try:
            await self.save(messages=results, ledger=ledger, meta=True)
        except Exception:  # the store failing must not hide the cancellation
            pass


def drive(config: RunConfig, run: RunState, *, stream: bool) -> AsyncGenerator[Event, None]:
    """The run's events; the last one is a `RunEndedEvent` (unless it is cancelled). A run goes
    through `hooks.run_hook` when one is set (tracing)."""
    hook = hooks.run_hook
    if hook is not None:
        return hook(config, run, lambda changed: _Loop(changed, run, stream).events())
    return _Loop(config, run, stream).events()
