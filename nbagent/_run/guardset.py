"""Asking guards: an agent's guards by stage (`GuardSet`), one guard's verdict with fail-closed
rules (`ask`), a stage's guards in order (`chain`), and the prompt screened before a run's first
write (`screen_prompt`).

`GuardSet` is ``RunConfig.guards``: the one hook the run asks at its four points (the prompt;
an answer and its calls' arguments, before anything of it is committed, shown or approved; a
tool's result, before the model or the store read it). The run's side of it is
`guarding.RunGuards` (and `race.Race` for parallel input guards). Imports the guards, messages
and usage (no asyncio: `prepare` imports it, and ``import nbagent`` loads no asyncio).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from types import CoroutineType
from typing import TYPE_CHECKING, Any, NamedTuple

from ..guards import STAGES, Guard, GuardCheck, GuardContext, Verdict, block, finished
from ..messages import UserMessage
from ..usage import ModelCallUsage
from .nested import count_usage

if TYPE_CHECKING:
    from .state import RunState

__all__ = ["GuardSet", "Screened", "Stop", "Where", "as_args", "as_text", "blocked_text", "chain", "screen_prompt"]


class GuardSet:
    """An agent's guards by stage, frozen with the run's config (``RunConfig.guards``)."""

    __slots__ = ("_needs", "_tools", "input", "output", "parallel", "tool_args", "tool_result")

    def __init__(self, guards: Iterable[Guard]) -> None:
        by: dict[str, list[Guard]] = {stage: [] for stage in STAGES}
        for g in guards:
            by[g.stage].append(g)
        self.input = tuple(g for g in by["input"] if not g.parallel)
        self.parallel = tuple(g for g in by["input"] if g.parallel)
        self.tool_args = tuple(by["tool_args"])
        self.tool_result = tuple(by["tool_result"])
        self.output = tuple(by["output"])
        self._tools: dict[int, dict[str, tuple[Guard, ...]]] = {}
        self._needs: dict[int, bool] = {}

    @property
    def screens_input(self) -> bool:
        return bool(self.input or self.parallel)

    def needs_context(self, guards: tuple[Guard, ...]) -> bool:
        """Whether one of `guards` takes a `GuardContext` (else none is made)."""
        found = self._needs.get(id(guards))
        if found is None:
            found = self._needs[id(guards)] = any(g.takes_ctx for g in guards)
        return found

    def judges(self, guards: tuple[Guard, ...]) -> bool:
        """Whether one of `guards` is an LLM judge (its usage rows are then kept)."""
        return self.needs_context(guards) and any(g.judge for g in guards)  # a judge takes a context

    def for_tool(self, guards: tuple[Guard, ...], tool: str) -> tuple[Guard, ...]:
        """The guards of `guards` (`tool_args` or `tool_result`) that apply to `tool`, made once
        per tool."""
        by_tool = self._tools.setdefault(id(guards), {})
        found = by_tool.get(tool)
        if found is None:
            found = by_tool[tool] = tuple(g for g in guards if g.applies_to(tool))
            self._needs[id(found)] = any(g.takes_ctx for g in found)  # (the tuple lives in the cache)
        return found


# ---------------------------------------------------------------------- asking one guard
class Stop(NamedTuple):
    """The verdict that stopped a chain of guards (a block, or an output guard's retry) and its check."""

    verdict: Verdict
    check: GuardCheck


Where = tuple[int, "str | None", "str | None"]
"""Where guards are asked, as their `GuardCheck` records it: the step, the tool and the call id."""


def _late(guard: Guard) -> Verdict:
    return block(f"no verdict within its timeout_s of {guard.timeout_s:g} s (blocked)")


async def chain(guards: Sequence[Guard], value: Any, ctx: GuardContext | None, where: Where,
                checks: list[GuardCheck], rows: list[ModelCallUsage],
                fits: Callable[[Any], Any] | None = None) -> tuple[Any, Stop | None]:
    """`value` through `guards` in order, each seeing the one before's rewrite: the value to go
    on with, and what stopped the chain (a block or a retry; with `fits` None, a rewrite too).
    Each guard fails closed: a check that raises, runs past its timeout (a sync one that took
    longer, too), returns something else or a verdict its stage cannot take is a block naming
    why. Every check is recorded in `checks`, an LLM judge's usage rows in `rows`
    (``purpose="guard"``). `ctx`: one context for every guard of the point (None when none takes
    one: `GuardSet.needs_context`). `fits` checks a rewrite's value (it returns the value to use,
    or raises: a block). A sync check costs a call: no await, no timer."""
    for g in guards:
        clock = time.perf_counter()
        try:
            out = g.call(value, ctx, rows)
            if type(out) is CoroutineType:  # an async check that needs no wait (most) ends here, with no timer
                out = finished(out)
            verdict = out if out is None or type(out) is Verdict else await g.verdict(out)
        except TimeoutError:
            verdict = _late(g)
        except Exception as exc:
            verdict = block(f"the check failed (blocked): {type(exc).__name__}: {exc}")
        latency = time.perf_counter() - clock
        if verdict is not None:
            if verdict.action == "retry" and g.stage != "output":
                verdict = block(f"retry is for output guards only (blocked): {verdict.reason}")
        elif latency > g.timeout_s:  # a sync check that took too long
            verdict = _late(g)
        check = GuardCheck(g.name, g.stage, "allow" if verdict is None else verdict.action,
                           "" if verdict is None else verdict.reason, latency, *where)
        checks.append(check)
        if verdict is None:
            continue
        if verdict.action != "rewrite" or fits is None:
            return value, Stop(verdict, check)
        try:
            value = fits(verdict.value)
        except Exception as exc:
            check.verdict, check.reason = "block", f"its rewrite does not fit (blocked): {exc}"
            return value, Stop(block(check.reason), check)
    return value, None


def blocked_text(check: GuardCheck) -> str:
    """What a blocked message keeps (`UserMessage.blocked`): the guard's name and its reason."""
    return f"{check.guard}: {check.reason}" if check.reason else check.guard


def as_text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a text was expected, got {type(value).__name__}")
    return value


def as_args(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"arguments must be a dict, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------- input, before any write
class Screened:
    """What the blocking input guards made of a prompt (`screen_prompt`), applied to the run's
    state once it exists (`apply`)."""

    __slots__ = ("checks", "deferred", "message", "rows", "trip")

    def __init__(self, message: UserMessage, deferred: bool) -> None:
        self.message = message
        self.checks: list[GuardCheck] = []
        self.rows: list[ModelCallUsage] = []
        self.trip: GuardCheck | None = None
        self.deferred = deferred
        """The prompt waits for the parallel input guards before it is written (`RunWork.unsaved`)."""

    def apply(self, run: RunState, agent: str | None) -> None:
        """Keep the screening's checks, its trip and its judges' rows (counted as `agent`'s) in `run`."""
        run.guard_checks += self.checks
        for row in self.rows:
            row = replace(row, run_id=run.run_id, thread=run.stored.id, step=run.stored.step + 1)
            count_usage(agent, run, row)
            run.work.unsaved_usage.append(row)
        if self.trip is not None:
            run.outcome.trip(self.trip)


async def screen_prompt(guards: GuardSet, message: UserMessage, run_id: str, thread: str, state: Any) -> Screened:
    """The blocking input guards on `message`, before the run reads or writes anything: a
    rewrite gives a new message (the store keeps only it), a block marks it `blocked`."""
    out = Screened(message, bool(guards.parallel))
    if not guards.input:
        return out
    ctx = GuardContext("input", run_id, thread, 0, (), state) if guards.needs_context(guards.input) else None
    text, stop = await chain(guards.input, message.content, ctx, (0, None, None), out.checks, out.rows, as_text)
    if text != message.content:
        out.message = replace(message, content=text)  # never the caller's object: it may be theirs
    if stop is not None:
        out.trip = stop.check
        out.message = replace(out.message, blocked=blocked_text(out.trip))
        out.deferred = False
    return out
