"""The run loop: model -> tools -> approvals -> model ... -> done, as one async generator.

Owns `drive`, which yields events: it calls the model, commits each step, runs the calls that
`plan.plan` lets through (`execute.execute`) and records their results. It reads its agent's
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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from .._watch import ThreadChangedNotice, ToolOutcomeNotice, publish
from ..approvals import Decision
from ..events import (
    ApprovalRequestedEvent,
    ClientCallRequestedEvent,
    Event,
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
from ..exceptions import ConflictError, ModelResponseError
from ..messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    clean_message,
    unanswered_calls,
    unique_call_ids,
)
from ..models.base import ModelRequest, ModelResponse, ReasoningText
from ..result import StopReason
from ..store.base import LedgerEntry, Store
from ..store.meta import live_runs
from ..tools import Tool
from ..usage import ModelCallUsage, Usage
from .config import RunConfig
from .execute import execute, tool_result_text
from .plan import CUT_OFF, Plan, error_result, text_answer, unusable_answer
from .plan import plan as plan_calls
from .state import END_KINDS, RunState

__all__ = ["drive"]


def _fix_call_ids(run: RunState, message: AssistantMessage) -> None:
    # Some servers send empty ids (Gemini), repeat them within an answer, or name every call
    # "call_0": each result must map to exactly one call of the whole thread.
    if run.call_ids is None:
        run.call_ids = {c.id for m in run.messages if m.kind == "assistant" for c in m.tool_calls}
    unique_call_ids(message.tool_calls, run.call_ids)


def _usage_snapshot(usage: Usage) -> Usage:
    # An event records the total at that moment (like TextDeltaEvent.snapshot), not the live sum.
    return dataclasses.replace(usage, calls=list(usage.calls))


def _stop_reason(config: RunConfig, run: RunState) -> StopReason | None:
    """Why the run must stop before its next model call (a limit of `config`), or None."""
    if run.steps >= config.max_steps:
        return "max_steps"
    if config.token_budget is not None and run.usage.total_tokens >= config.token_budget:
        return "token_budget"
    if (
        config.cost_budget is not None
        and run.usage.cost_total is not None
        and run.usage.cost_total >= config.cost_budget
    ):
        return "cost_budget"
    if config.stop_when is not None and config.stop_when(run.to_result()):
        return "stop_when"
    return None


class _Loop:
    """One run of the loop; `events()` is the async generator."""

    def __init__(self, config: RunConfig, run: RunState, stream: bool) -> None:
        self.config = config
        self.run = run
        self.stream = stream
        self.store = config.store
        self.decided: dict[str, Decision] = {}
        """Decisions of calls about to run, stamped on their results."""
        self.final_saved = False  # the completing answer's save carried the final meta
        self.planned: Plan | None = None  # the plan committed with the last model answer
        self.told_end = False  # the thread's observers heard how the run ended

    def tell(self, event: Event) -> Event:
        """Tell the thread's observers (`_watch`: the views of this process) about `event`;
        never called for text or reasoning deltas."""
        if isinstance(event, RunEndedEvent):
            self.told_end = True
        publish(self.run.thread, self.run.run_id, event)
        return event

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
        run, config = self.run, self.config
        live_runs.add(run.run_id)  # so that this process refuses to resume the thread meanwhile
        try:
            first = run.messages[run.new_message_index] if len(run.messages) > run.new_message_index else None
            prompt = first if first is not None and first.kind == "user" else None
            yield self.tell(RunStartedEvent(run.run_id, run.thread, prompt))
            try:
                while True:
                    plan, self.planned = self.planned, None
                    calls = plan.calls if plan is not None else unanswered_calls(run.messages)
                    if calls:
                        async for event in self.tool_phase(calls, plan):
                            yield self.tell(event)
                        if run.status == "completed":  # the model gave its structured answer
                            break
                        if run.pending:
                            run.status = "paused"
                            for p in run.pending:
                                client = p.reason == "client"
                                yield self.tell(ClientCallRequestedEvent(p) if client else ApprovalRequestedEvent(p))
                            break
                        continue
                    last = run.messages[-1] if run.messages else None
                    if last is not None and last.kind == "assistant":
                        if config.output is None:
                            run.status = "completed"
                            run.output = last.text or ""
                            break
                        # a text answer saved before a crash: judge it now, as model_step would have
                        text_answer(config, run, last)
                        if run.status in ("completed", "failed"):
                            break
                        await self.save(messages=run.messages[-1:], meta=True)
                        continue
                    stop = _stop_reason(config, run)
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
                self.tell(RunEndedEvent(END_KINDS[run.status], run.result))  # type: ignore[arg-type]
                raise
            if not (self.final_saved and run.status == "completed" and not run.meta_dirty):
                run.ended_at = time.time()
                await self.save(meta=True)
            result = run.result = run.to_result()
            yield self.tell(RunEndedEvent(END_KINDS[run.status], result))  # type: ignore[arg-type]
        finally:
            live_runs.discard(run.run_id)
            if not self.told_end:  # an error escaped the run: its observers read the thread again
                publish(run.thread, run.run_id, ThreadChangedNotice(run.thread))

    # ------------------------------------------------------------------ model
    async def model_step(self) -> AsyncIterator[Event]:
        run, config = self.run, self.config
        if config.sources is not None:  # a source's list may have changed since the last step
            config = self.config = await config.sources.current(config, strict=False)
        model = config.model
        step = run.thread_step + 1
        messages: list[Message] = run.messages
        if config.system:
            messages = [SystemMessage(config.system), *messages]
        request = ModelRequest(messages, config.tool_definitions, config.request_settings, step,
                               config.output.name if config.output is not None else None,
                               not config.tools_in_order)
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
                            yield TextDeltaEvent(item, step, acc, len(parts))
                        elif isinstance(item, ModelResponse):
                            response = item
                        elif isinstance(item, ReasoningText):
                            yield ReasoningDeltaEvent(str(item), step)
                    if response is None:
                        raise ModelResponseError("the model's stream ended without a complete answer",
                                                 provider=model.provider)
                else:
                    response = await model.request(request)
                break
            except Exception as exc:
                if config.retry.should_retry(exc, attempt):
                    delay = config.retry.delay(exc, attempt)
                    yield self.tell(ModelRetryEvent(attempt, str(exc), delay, step))
                    await asyncio.sleep(delay)
                    continue
                run.status = "failed"
                run.error = f"{type(exc).__name__}: {exc}"
                run.exception = exc
                return
        latency = time.perf_counter() - clock
        message = clean_message(response.message)  # lone surrogates can be neither stored nor sent
        if message.tool_calls:
            _fix_call_ids(run, message)
        counts = response.usage
        row = ModelCallUsage(
            run.run_id, run.thread, step, started, model.provider, response.model or model.model_name,
            counts.input_tokens, counts.cache_read_tokens, counts.cache_write_tokens, counts.output_tokens,
            counts.reasoning_tokens, latency, message.finish_reason, len(message.tool_calls),
            usage_reported=counts.reported,
        )
        config.price(row)
        run.usage.add(row)
        run.thread_step = step
        run.steps += 1
        problem = response.error or unusable_answer(message, model.provider)
        if problem is not None:
            # Billed but unusable (a call cut off mid-arguments can never be answered validly; a
            # refused turn must not be sent again): its usage row is kept, the answer is not.
            run.status = "failed"
            run.error, run.exception = f"{type(problem).__name__}: {problem}", problem
            await self.save(usage=[row])
            yield self.tell(UsageEvent(row, _usage_snapshot(run.usage)))
            return
        run.messages.append(message)
        if message.finish_reason in CUT_OFF:
            run.truncated = True
        if message.tool_calls:
            # One commit for the answer, its usage row, the calls' immediate results (invalid,
            # denied, unknown) and the "started" entries of the calls about to run: all durable
            # before any of them runs.
            plan = self.planned = plan_calls(config, run, message.tool_calls, self.decided)
            if run.status == "completed":  # the structured answer came: nothing else runs
                run.ended_at = time.time()
                self.final_saved = True
            await self.save(messages=[message, *plan.immediate], usage=[row], ledger=plan.ledger, meta=True)
        elif config.output is None:  # a text answer completes the run: one save for it and the end
            run.status, run.output = "completed", message.text or ""
            run.ended_at = time.time()
            await self.save(messages=[message], usage=[row], meta=True)  # thread_step moved on
            self.final_saved = True
        else:  # text where a structured answer was asked for: use it if it fits, else ask again
            text_answer(config, run, message)
            if run.status == "completed":
                run.ended_at = time.time()
                self.final_saved = True
            await self.save(messages=run.messages[-2:] if run.status == "running" else [message],
                            usage=[row], meta=True)
        yield self.tell(ModelResponseEvent(message, step))
        yield self.tell(UsageEvent(row, _usage_snapshot(run.usage)))

    # ------------------------------------------------------------------ structured answers
    async def tool_phase(self, calls: list[ToolCall], plan: Plan | None = None) -> AsyncIterator[Event]:
        """Run the open calls: `plan` them and commit that (unless the model step already did,
        together with the answer), then run the calls and record each result."""
        run, config = self.run, self.config
        step = run.thread_step
        if plan is None:
            plan = plan_calls(self.config, run, calls, self.decided)
            if plan.immediate or plan.ledger or plan.to_run:
                await self.save(messages=plan.immediate, ledger=plan.ledger)
        if plan.immediate:
            by_id = {c.id: c for c in plan.calls}
            for result in plan.immediate:
                yield ToolCallFinishedEvent(by_id[result.call_id], result, step)
        to_run = plan.to_run
        if not to_run:
            return

        for call, _, _, _ in to_run:
            yield ToolCallStartedEvent(call, step)

        if len(to_run) == 1:
            results = [await self.execute(*to_run[0])]
            for result in results:
                for event in await self.record([(result, to_run[0][0], to_run[0][1])], step):
                    yield event
            return

        queue: asyncio.Queue[tuple[ToolResultMessage, ToolCall, Tool]] = asyncio.Queue()

        async def worker(items: list[tuple[ToolCall, Tool, Any, dict[str, Any] | None]]) -> None:
            for item in items:
                queue.put_nowait((await self.execute(*item), item[0], item[1]))

        if config.tools_in_order:
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
        return [ToolCallFinishedEvent(call, result, step) for result, call, _ in ready]

    async def cancel_cleanup(self) -> None:
        """Leave a valid conversation: stop running tools, answer every open call."""
        run = self.run
        for task in list(run.tasks):
            task.cancel()
        if run.tasks:
            await asyncio.gather(*run.tasks, return_exceptions=True)
        results, ledger = _answer_open_calls(run, self.store)
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


    async def execute(self, call: ToolCall, tool: Tool, validated: Any,
                      edited: dict[str, Any] | None) -> ToolResultMessage:
        return await execute(self.run, call, tool, validated, edited, self.decided.pop(call.id, None))


_STILL_RUNNING = (
    "interrupted: stop was requested while this tool was running; it cannot be interrupted and was "
    "still running when the run ended, so it is not known whether it completed (its outcome is "
    "recorded in the thread's ledger when it ends); check before calling it again"
)
_late_tasks: set[asyncio.Task[Any]] = set()


def _answer_open_calls(run: RunState, store: Store) -> tuple[list[ToolResultMessage], list[LedgerEntry]]:
    """The results and ledger entries that close every open call of a stopped run: "cancelled",
    or "interrupted ... still running" for a blocking call whose thread goes on (its real outcome
    is recorded in the ledger when it ends)."""
    results, ledger = [], []
    for call in unanswered_calls(run.messages):
        blocking = run.blocking.pop(call.id, None)
        started = run.ledger.get(call.id)
        if blocking is not None and not blocking.done():
            results.append(error_result(call, _STILL_RUNNING, "interrupted"))
            if started is not None:
                ledger.append(LedgerEntry(call.id, call.name, started.args_hash, "interrupted"))
                blocking.add_done_callback(_late_outcome(store, run.thread, started, asyncio.get_running_loop()))
            continue
        results.append(error_result(call, "cancelled: the run was stopped before this call finished", "cancelled"))
        if started is not None:
            ledger.append(LedgerEntry(call.id, call.name, started.args_hash, "cancelled"))
    return results, ledger


def _late_outcome(store: Store, thread: str, started: LedgerEntry, loop: asyncio.AbstractEventLoop) -> Any:
    """A callback (run in the tool's thread) for a blocking call that outlived its run: record how
    it really ended in the ledger (the conversation already says "not known", and is append-only)
    and tell the thread's observers what it returned (`ToolOutcomeNotice`)."""

    def record(notice: ToolOutcomeNotice) -> None:
        status = "failed" if notice.status == "failed" else "finished"
        entry = LedgerEntry(started.call_id, started.tool, started.args_hash, status)  # type: ignore[arg-type]
        task = asyncio.ensure_future(_record_late(store, thread, entry, notice))
        _late_tasks.add(task)
        task.add_done_callback(_late_tasks.discard)

    def done(work: concurrent.futures.Future[Any]) -> None:
        exc = None if work.cancelled() else work.exception()
        if work.cancelled():
            status, content = "failed", "cancelled before it started"
        elif exc is not None:
            status, content = "failed", f"{type(exc).__name__}: {exc}"
        else:
            status, content = "done", tool_result_text(work.result())
        notice = ToolOutcomeNotice(thread, started.call_id, started.tool, status, content,  # type: ignore[arg-type]
                                   max(0.0, time.time() - started.time))
        try:
            loop.call_soon_threadsafe(record, notice)
        except RuntimeError:  # the loop is gone (the script ended): the ledger keeps "interrupted"
            pass

    return done


async def _record_late(store: Store, thread: str, entry: LedgerEntry, notice: ToolOutcomeNotice) -> None:
    try:
        for _ in range(20):  # another run may be writing the thread: take its version and try again
            loaded = await store.load(thread)
            if loaded is None:
                return
            current = loaded.ledger.get(entry.call_id)
            if current is None or current.status != "interrupted":
                return  # a later run already decided what this call is
            try:
                await store.append(thread, version=loaded.version, step=loaded.step, ledger=[entry])
                return
            except ConflictError:
                await asyncio.sleep(0.05)
            except Exception:  # the store failing here has no run to fail: keep the "not known"
                return
    finally:  # the function did end: whoever shows the call hears it, whatever the ledger says
        publish(thread, None, notice)


def drive(config: RunConfig, run: RunState, *, stream: bool) -> AsyncGenerator[Event, None]:
    """The run's events; the last one is a `RunEndedEvent` (unless it is cancelled)."""
    return _Loop(config, run, stream).events()
