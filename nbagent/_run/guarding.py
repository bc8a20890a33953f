"""The guards' side of one run (`RunGuards`): the run asks it at its four points and applies what
it decides.

Nothing here writes to the store: what the guards decided comes back as values (a rewritten
message, a stand-in, the calls refused with the text the model reads), the loop applies them in
its own places, and the events to tell wait in `RunGuards.drain`. Asking a guard (fail closed)
and the prompt's screening before the run's first write are `guardset`'s; parallel input guards
are `race`'s.

| point                       | asked by                    | nothing before it                        |
|-----------------------------|-----------------------------|------------------------------------------|
| input (blocking)            | `guardset.screen_prompt`    | model call, tool, write of the prompt    |
| input (``parallel=True``)   | `race.Race`                 | a tool of the first answer, its commit,  |
|                             |                             | the prompt's write                       |
| output and tool arguments   | `RunGuards.answer`          | a delta shown, the commit, approval      |
| tool result                 | `RunGuards.result_check`    | the model or the store reading it        |

Imports asyncio, the guards, events, messages, models' response shape, output, usage and the
run's config, state, `guardset` and `race`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from ..events import (
    Event,
    GuardTrippedEvent,
    ReasoningDeltaEvent,
    TextAccumulator,
    TextDeltaEvent,
    TextHeldEvent,
    UsageEvent,
)
from ..guards import Guard, GuardCheck, GuardContext, GuardStage
from ..messages import AssistantMessage, Message, ToolCall, ToolCallStatus, UserMessage
from ..models.base import ModelResponse
from ..usage import ModelCallUsage
from .guardset import GuardSet, Stop, as_args, as_text, blocked_text, chain
from .nested import count_usage
from .race import Race, RaceTripped

if TYPE_CHECKING:
    from ..output import OutputSpec
    from .config import RunConfig
    from .state import RunState

__all__ = ["Answered", "RaceTripped", "RunGuards", "stand_in_messages"]


# ---------------------------------------------------------------------- one run
class Answered(NamedTuple):
    """What the output and tool-argument guards made of an answer (`RunGuards.answer`)."""

    message: AssistantMessage
    """The answer to go on with (rewritten in place), or a stand-in (`stand_in`)."""
    stand_in: bool = False
    """The answer was refused: `message` is its stand-in (`AssistantMessage.blocked`); with
    `nudge` the model is asked again, without it the run stopped."""
    nudge: UserMessage | None = None
    refused: dict[str, tuple[str, ToolCallStatus]] | None = None
    """Calls that must not run: call id -> (the error text the model reads, the call's status)."""


class RunGuards:
    """The guards' side of one run (see the module): the race, the answer's checks, the result
    checks, and the events they have to tell (`drain`)."""

    def __init__(self, guards: GuardSet, run: RunState, agent: str | None = None) -> None:
        self.guards = guards
        self.run = run
        self.agent = agent
        """The agent whose guards these are (``RunConfig.name``): a judge's rows are counted as its."""
        self.race: Race | None = None
        """The parallel input guards racing the first model call (`race`)."""
        if guards.parallel:
            prompt = next((m for m in run.work.unsaved if isinstance(m, UserMessage) and m.blocked is None), None)
            self.race = None if prompt is None else Race(guards.parallel, run, prompt, self.keep)
        self.early: list[Event] = []
        """Held text released (deltas: the loop yields them without telling the thread's observers)."""
        self.late: list[Event] = []
        """Trips and guard usage rows."""
        self.results: dict[str, Any] = {}
        """`result_check` by tool name."""
        self.rows: list[ModelCallUsage] = []
        """An LLM judge's usage rows, collected while the guards are asked (`ask_all`)."""
        if run.work.unsaved_usage:  # an input judge's rows (`guardset.screen_prompt`)
            self.usage(run.work.unsaved_usage)
        trip = run.outcome.guard_trip
        if trip is not None:
            self.late.append(GuardTrippedEvent(trip, True, run.stored.step + 1, path=run.path))

    @property
    def holds(self) -> bool:
        """The answers' text is held back until the output guards pass."""
        return bool(self.guards.output)

    @property
    def racing(self) -> bool:
        """The run's prompt waits for its parallel input guards (`race_tripped` settles it)."""
        return self.race is not None and self.race.open

    @property
    def holding(self) -> bool:
        """A streamed answer is held back now: for the output guards, or the first one while the
        parallel input guards have not spoken."""
        return bool(self.guards.output) or self.racing

    def asks(self, held: bool) -> bool:
        """Whether an answer meets the guards before it is committed (output or tool-argument
        guards, a race to settle, or its text held)."""
        guards = self.guards
        return bool(guards.output or guards.tool_args or held) or self.racing

    async def race_tripped(self) -> bool:
        """Wait for the parallel input guards' word on the prompt (once); True when they blocked
        it: it is marked blocked before its write, and the run stops."""
        check = None if self.race is None else await self.race.settle()
        if check is None:
            return False
        self.tripped(check, True, self.run.stored.step + 1)
        return True

    async def race_blocks(self) -> bool:
        """Whether the parallel input guards block the prompt (waiting for them; the next model
        call then stops at once)."""
        return self.race is not None and await self.race.blocks()

    def abandon(self) -> None:
        """The run is stopped: a prompt its parallel guards never cleared is kept blocked."""
        if self.race is not None:
            self.race.abandon()

    def raced(self, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The model's stream, cancelled when a parallel input guard blocks (while they race)."""
        return items if self.race is None or not self.race.open else self.race.stream(items)

    def raced_call(self, call: Awaitable[Any]) -> Awaitable[Any]:
        """The model's answer, cancelled when a parallel input guard blocks (while they race)."""
        return call if self.race is None or not self.race.open else self.race.call(call)

    def drain(self) -> tuple[list[Event], list[Event]]:
        """The events waiting: the held text released, and the rest (`early`, `late`)."""
        early, late = self.early, self.late
        if early or late:
            self.early, self.late = [], []
        return early, late

    def told(self) -> list[Event]:
        """The trips and usage rows waiting (`late`)."""
        late = self.late
        if late:
            self.late = []
        return late

    def usage(self, rows: Sequence[ModelCallUsage]) -> None:
        for row in rows:
            self.late.append(UsageEvent(row, _snapshot(self.run), path=self.run.path))

    def ask_all(self, guards: tuple[Guard, ...], value: Any, stage: GuardStage, step: int,
                fits: Callable[[Any], Any], call: ToolCall | None = None,
                args: Any = None) -> Awaitable[tuple[Any, Stop | None]]:
        """`chain` at one point of the run (its context made only if a guard takes one), with the
        checks and an LLM judge's rows kept in the run."""
        run = self.run
        tool, call_id = (call.name, call.id) if call is not None else (None, None)
        ctx = GuardContext(stage, run.run_id, run.stored.id, step, run.stored.messages, run.stored.state, tool,
                           call_id, args) if self.guards.needs_context(guards) else None
        asked = chain(guards, value, ctx, (step, tool, call_id), run.guard_checks, self.rows, fits)
        return self._kept(asked, step) if self.guards.judges(guards) else asked

    async def _kept(self, asked: Awaitable[tuple[Any, Stop | None]], step: int) -> tuple[Any, Stop | None]:
        """`asked`, then the judges' usage rows it collected, kept."""
        try:
            return await asked
        finally:
            rows, self.rows = self.rows, []
            self.keep(rows, step)

    def keep(self, rows: list[ModelCallUsage], step: int) -> None:
        """A judge's usage rows join the run's (told now, written with the next commit)."""
        if not rows:
            return
        run = self.run
        rows = [replace(r, run_id=run.run_id, thread=run.stored.id, step=step) for r in rows]
        for row in rows:
            count_usage(self.agent, run, row)
        run.work.unsaved_usage.extend(rows)
        self.usage(rows)

    def tripped(self, check: GuardCheck, stops: bool, step: int) -> None:
        self.late.append(GuardTrippedEvent(check, stops, step, path=self.run.path))
        if stops:
            self.run.outcome.trip(check)

    async def held(self, items: AsyncIterator[Any], reply: Any) -> AsyncIterator[Event]:
        """A streamed answer held back (`holds`, or while `racing`): its deltas are only kept in
        ``reply.parts`` (one list append each), a `TextHeldEvent` says once that it is being
        written, and `answer` releases it as the guards leave it, or never. The answer ends in
        ``reply.response``."""
        parts, told = reply.parts, False
        reply.held, reply.response = True, None
        async for item in items:
            if type(item) is str:
                parts.append(item)
            elif isinstance(item, ModelResponse):
                reply.response = item
                continue
            if not told:  # text or reasoning (the reasoning comes again with the answer)
                told = True
                yield TextHeldEvent(reply.step, path=self.run.path)

    # ------------------------------------------------------------------ an answer
    async def answer(self, config: RunConfig, message: AssistantMessage, step: int, held: bool) -> Answered:
        """The output guards on the answer (its text; a structured answer), then the tool-argument
        guards on its calls, before anything of it is committed or shown. `held`: its text was
        held back from the stream (released here, as the guards left it)."""
        refused: dict[str, tuple[str, ToolCallStatus]] = {}
        if self.guards.output and (message.text or config.output is not None):
            got = await self._output(config, message, step) if config.output is None else \
                await self._structured(config, message, step)
            if isinstance(got, Answered):
                return got
            refused = got
        if self.guards.tool_args and message.tool_calls:
            todo = self._tool_args(config, message, refused)
            if len(todo) == 1:
                call, guards = todo[0]
                await self._call_args(call, guards, step, refused)
            elif todo:  # (a judge per call: they ask at once)
                await asyncio.gather(*(self._call_args(c, g, step, refused) for c, g in todo))
        if held:
            self._release(message, step)
        return Answered(message, False, None, refused or None)

    def _release(self, message: AssistantMessage, step: int) -> None:
        if message.reasoning:
            self.early.append(ReasoningDeltaEvent(message.reasoning, step, path=self.run.path))
        if message.text:
            acc = TextAccumulator(self.run.path)
            acc.parts.append(message.text)
            self.early.append(TextDeltaEvent(message.text, step, acc, 1))

    async def _output(self, config: RunConfig, message: AssistantMessage, step: int) -> Answered | dict[str, Any]:
        """The output guards on an answer's text: a refusal (`Answered` with a stand-in), or none
        (the text as they left it)."""
        if message.text:
            got, stop = await self.ask_all(self.guards.output, message.text, "output", step, as_text)
            if stop is not None:
                return self._refuse(config, message, step, stop)
            message.text = got
        return {}

    async def _structured(self, config: RunConfig, message: AssistantMessage,
                          step: int) -> Answered | dict[str, tuple[str, ToolCallStatus]]:
        """The output guards on an ``output_type`` agent's answer: its structured answer (a
        ``final_result`` call's, or text that is one), else its text: a refusal, or the calls they
        refused (a structured answer asked again)."""
        spec = config.output
        assert spec is not None
        refused: dict[str, tuple[str, ToolCallStatus]] = {}
        final = next((c for c in message.tool_calls if c.name == spec.name), None)
        value = _NOT_VALID if final is None else _structured(spec, final.args)
        if final is not None and value is not _NOT_VALID:
            got, stop = await self.ask_all(self.guards.output, value, "output", step, spec.load)
            if stop is None:
                if got is not value:
                    final.set_args({"result": spec.dump(got)} if spec.wrapped else spec.dump(got))
            elif stop.verdict.action == "retry" and self._retry_left(config):
                self.run.output_retries += 1
                refused[final.id] = (f"refused by guard {stop.check.guard!r}: {stop.verdict.reason}; "
                                     f"fix the answer and call {spec.name} again", "failed")
            else:
                return self._refuse(config, message, step, stop)
        value = _structured_text(spec, message.text) if message.text and not message.tool_calls else _NOT_VALID
        if value is _NOT_VALID:  # text that comes with calls, or is not the answer: checked as text
            got = await self._output(config, message, step)
            return got if isinstance(got, Answered) else refused
        got, stop = await self.ask_all(self.guards.output, value, "output", step, spec.load)
        if stop is not None:
            return self._refuse(config, message, step, stop)
        if got is not value:
            message.text = got if isinstance(got, str) else json.dumps(spec.dump(got), ensure_ascii=False)
        return refused

    def _retry_left(self, config: RunConfig) -> bool:
        return self.run.output_retries < config.output_retries

    def _refuse(self, config: RunConfig, message: AssistantMessage, step: int, stop: Stop) -> Answered:
        """A refused answer's stand-in: asked again (a retry while `output_retries` last), or the
        run stops."""
        verdict, check = stop
        stand_in = AssistantMessage(finish_reason=message.finish_reason, model=message.model,
                                    blocked=blocked_text(check))
        if verdict.action == "retry" and self._retry_left(config):
            self.run.output_retries += 1
            stand_in.blocked = f"{stand_in.blocked} (asked again)"
            nudge = UserMessage(f"[nbagent] Your last answer was not shown: guard {check.guard!r} refused it: "
                                f"{verdict.reason}. Answer again.")
            return Answered(stand_in, True, nudge)
        if verdict.action == "retry":
            check.verdict = "block"
            check.reason = f"{verdict.reason} (asked again {config.output_retries} times: blocked)"
            stand_in.blocked = blocked_text(check)
        self.tripped(check, True, step)
        return Answered(stand_in, True)

    def _tool_args(self, config: RunConfig, message: AssistantMessage,
                   refused: dict[str, tuple[str, ToolCallStatus]]) -> list[tuple[ToolCall, tuple[Guard, ...]]]:
        """The calls the tool-argument guards check, with their guards: each call of a known tool
        whose arguments are an object (the plan answers the others with their error)."""
        todo = []
        for call in message.tool_calls:
            guards = self.guards.for_tool(self.guards.tool_args, call.name)
            if guards and call.name in config.tools and call.id not in refused and type(call.args) is dict:
                todo.append((call, guards))
        return todo

    async def _call_args(self, call: ToolCall, guards: tuple[Guard, ...], step: int,
                         refused: dict[str, tuple[str, ToolCallStatus]]) -> None:
        """The tool-argument guards on one call: a rewrite changes the call itself (so approval,
        the ledger and the run all see the arguments that will run); a block goes in `refused`."""
        args, stop = await self.ask_all(guards, call.args, "tool_args", step, as_args, call)
        if stop is None:
            if args is not call.args:
                call.set_args(args)
            return
        self.tripped(stop.check, False, step)
        refused[call.id] = (f"blocked by guard {stop.check.guard!r}: {stop.verdict.reason}; the call did not "
                            "run and must not be made again as it is", "denied")

    # ------------------------------------------------------------------ a result
    def result_check(self, tool: str) -> Callable[[ToolCall, str, Any], Awaitable[tuple[str, str | None]]] | None:
        """The check `execute` runs on a result of `tool` before anyone reads it (None: no guard
        applies)."""
        if not self.guards.tool_result:
            return None
        if tool not in self.results:
            self.results[tool] = self._result_check(self.guards.for_tool(self.guards.tool_result, tool))
        return self.results[tool]

    def _result_check(self, guards: tuple[Guard, ...]) -> Callable[[ToolCall, str, Any],
                                                             Awaitable[tuple[str, str | None]]] | None:
        if not guards:
            return None

        async def check(call: ToolCall, content: str, args: Any) -> tuple[str, str | None]:
            got, stop = await self.ask_all(guards, content, "tool_result", self.run.stored.step, _result_text,
                                           call, args)
            if stop is not None:
                self.tripped(stop.check, False, self.run.stored.step)
                return f"result withheld by guard {stop.check.guard!r}: {stop.verdict.reason}", "block"
            return got, None if got == content else "rewrite"

        return check

    def cancelled_row(self, config: RunConfig, step: int, started: float, latency: float, estimate: int,
                      text: str, count: Callable[[str], int]) -> ModelCallUsage:
        """The usage row of a first model call a parallel input guard cancelled. The provider sends
        its counts at the end of a stream, so none came: the row holds nbagent's estimate of the
        request and of the text received (``usage_reported=False``, finish reason ``cancelled``),
        priced like any row, so budgets and cost frames count what was spent."""
        model, run = config.model, self.run
        row = ModelCallUsage(run.run_id, run.stored.id, step, started, model.provider, model.model_name,
                             estimate, 0, 0, count(text) if text else 0, 0, latency, "cancelled", 0,
                             usage_reported=False)
        config.price(row)
        self.late.append(UsageEvent(row, _snapshot(run), path=run.path))
        return row


def _snapshot(run: RunState) -> Any:
    # An event records the total at that moment (as the loop's usage events do), not the live sum.
    return replace(run.usage, calls=list(run.usage.calls))


_NOT_VALID: Any = object()


def _structured(spec: OutputSpec, args: dict[str, Any] | None) -> Any:
    try:
        return spec.validate(args)
    except Exception:  # invalid: the plan answers it with the error the model can correct
        return _NOT_VALID


def _structured_text(spec: OutputSpec, text: str) -> Any:
    try:
        return spec.from_text(text)
    except Exception:  # not the structured answer: checked as text
        return _NOT_VALID


def _result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    from .execute import tool_result_text

    return tool_result_text(value)


def stand_in_messages(answered: Answered) -> list[Message]:
    """The messages a refused answer leaves in the thread: its stand-in, and the nudge."""
    return [answered.message, answered.nudge] if answered.nudge is not None else [answered.message]
