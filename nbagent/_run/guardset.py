"""Asking guards: an agent's guards by stage (`GuardSet`), one guard's verdict with fail-closed
rules (`ask`), a stage's guards in order (`chain`), and the prompt screened before a run's first
write (`screen_prompt`).

`GuardSet` is ``RunConfig.guards``: the one hook the run asks at its four points (the prompt;
an answer and its calls' arguments, before anything of it is committed, shown or approved; a
tool's result, before the model or the store read it). The run's side of it is
`guarding.RunGuards` (and `race.Race` for parallel input guards). Imports asyncio, the guards,
messages and usage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from ..guards import STAGES, Guard, GuardCheck, GuardContext, Verdict, block
from ..messages import UserMessage
from ..usage import ModelCallUsage

if TYPE_CHECKING:
    from .state import RunState

__all__ = ["GuardSet", "Screened", "Stop", "as_args", "as_text", "ask", "blocked_text", "chain", "screen_prompt"]


class GuardSet:
    """An agent's guards by stage, frozen with the run's config (``RunConfig.guards``)."""

    __slots__ = ("input", "output", "parallel", "tool_args", "tool_result")

    def __init__(self, guards: Iterable[Guard]) -> None:
        by: dict[str, list[Guard]] = {stage: [] for stage in STAGES}
        for g in guards:
            by[g.stage].append(g)
        self.input = tuple(g for g in by["input"] if not g.parallel)
        self.parallel = tuple(g for g in by["input"] if g.parallel)
        self.tool_args = tuple(by["tool_args"])
        self.tool_result = tuple(by["tool_result"])
        self.output = tuple(by["output"])

    @property
    def screens_input(self) -> bool:
        return bool(self.input or self.parallel)

    def for_tool(self, guards: tuple[Guard, ...], tool: str) -> list[Guard]:
        return [g for g in guards if g.applies_to(tool)]


# ---------------------------------------------------------------------- asking one guard
class Stop(NamedTuple):
    """The verdict that stopped a chain of guards (a block, or an output guard's retry) and its check."""

    verdict: Verdict
    check: GuardCheck


async def ask(guard: Guard, value: Any, ctx: GuardContext, checks: list[GuardCheck],
              rows: list[ModelCallUsage]) -> tuple[Verdict | None, GuardCheck]:
    """`guard`'s verdict on `value`, failing closed: a check that raises, times out, returns
    something else or a verdict its stage cannot take is a block naming why. The check is
    recorded in `checks`, an LLM judge's usage rows in `rows` (``purpose="guard"``)."""
    clock = time.perf_counter()
    try:
        verdict = await guard.ask(value, ctx, rows)
    except (TimeoutError, asyncio.TimeoutError):
        verdict = block(f"no verdict within its timeout_s of {guard.timeout_s:g} s (blocked)")
    except Exception as exc:
        verdict = block(f"the check failed (blocked): {type(exc).__name__}: {exc}")
    if verdict is not None and verdict.action == "retry" and guard.stage != "output":
        verdict = block(f"retry is for output guards only (blocked): {verdict.reason}")
    check = GuardCheck(guard.name, guard.stage, "allow" if verdict is None else verdict.action,
                       "" if verdict is None else verdict.reason, time.perf_counter() - clock,
                       ctx.step, ctx.tool, ctx.call_id)
    checks.append(check)
    return verdict, check


async def chain(guards: Sequence[Guard], value: Any, ctx: GuardContext, checks: list[GuardCheck],
                rows: list[ModelCallUsage], fits: Callable[[Any], Any] | None = None) -> tuple[Any, Stop | None]:
    """`value` through `guards` in order, each seeing the one before's rewrite: the value to go
    on with, and what stopped the chain (a block or a retry). `fits` checks a rewrite's value (it
    returns the value to use, or raises: a block)."""
    for g in guards:
        verdict, check = await ask(g, value, replace(ctx, guard=g.name), checks, rows)
        if verdict is None:
            continue
        if verdict.action != "rewrite":
            return value, Stop(verdict, check)
        try:
            value = verdict.value if fits is None else fits(verdict.value)
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
@dataclass(slots=True)
class Screened:
    """What the blocking input guards made of a prompt (`screen_prompt`), applied to the run's
    state once it exists (`apply`)."""

    message: UserMessage
    checks: list[GuardCheck] = field(default_factory=list)
    rows: list[ModelCallUsage] = field(default_factory=list)
    trip: GuardCheck | None = None
    deferred: bool = False
    """The prompt waits for the parallel input guards before it is written (`RunWork.unsaved`)."""

    def apply(self, run: RunState) -> None:
        run.guard_checks.extend(self.checks)
        for row in self.rows:
            row = replace(row, run_id=run.run_id, thread=run.stored.id, step=run.stored.step + 1)
            run.usage.add(row)
            run.work.unsaved_usage.append(row)
        if self.trip is not None:
            run.outcome.trip(self.trip)


async def screen_prompt(guards: GuardSet, message: UserMessage, run_id: str, thread: str, state: Any) -> Screened:
    """The blocking input guards on `message`, before the run reads or writes anything: a
    rewrite gives a new message (the store keeps only it), a block marks it `blocked`."""
    out = Screened(message, deferred=bool(guards.parallel))
    if not guards.input:
        return out
    ctx = GuardContext("", "input", run_id, thread, 0, (), state)
    text, stop = await chain(guards.input, message.content, ctx, out.checks, out.rows, as_text)
    if text != message.content:
        out.message = replace(message, content=text)  # never the caller's object: it may be theirs
    if stop is not None:
        out.trip = stop.check
        out.message = replace(out.message, blocked=blocked_text(out.trip))
        out.deferred = False
    return out
