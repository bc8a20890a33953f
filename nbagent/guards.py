"""Guards: rules that hold whatever the model does, checked by the run at four points.

```python
from nbagent.guards import Guard, block, rewrite, retry, pii

agent = Agent(model, tools=[...], guards=[
    Guard.input(no_customer_ids, name="ids"),            # the prompt, before any model call
    Guard.input(judge_agent, parallel=True, timeout_s=5),  # races the first model call
    Guard.tool_args(no_mass_mail, tools=["send_email"]),   # a call's arguments, before approval
    Guard.tool_result(redact_rows, tools=["query"]),       # a result, before the model or the store
    Guard.output(no_keys),                                 # an answer, before it is shown or final
    *pii(),                                                # emails, phones, cards, IBANs, API keys
])
```

A guard's check is ``check(value, ctx)`` (or ``check(value)``), sync or async, or an `Agent`
that judges the value (an LLM judge, see `Guard`). It returns None (allow), `block(reason)`,
`rewrite(value)` or `retry(message)` (output guards only: the model is asked again). A check that
raises, runs past its ``timeout_s`` or returns anything else counts as a block whose reason names
what happened (fail closed). Every check is recorded (`GuardCheck`, ``result.guard_checks``); the
one that stopped a run is ``result.guard_trip``. What each stage does with each verdict:
docs/guards.md.

Owns `Guard`, the verdicts (`Verdict`, `block`, `rewrite`, `retry`), `GuardContext`,
`GuardCheck`, `Judgement` and `pii`. A base module: imports messages, usage, exceptions and
`_pii` (the detectors); the run (`nbagent._run.guarding`) asks the guards, the loop never learns
what a guard does.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ._pii import KINDS, describe, redact_pii
from .exceptions import UserError
from .messages import Message
from .usage import ModelCallUsage

__all__ = [
    "Guard",
    "GuardCheck",
    "GuardContext",
    "GuardStage",
    "Judgement",
    "Verdict",
    "block",
    "pii",
    "retry",
    "rewrite",
]

GuardStage = Literal["input", "tool_args", "tool_result", "output"]
"""Where a guard is asked: the prompt (``input``), a tool call's arguments before approval
(``tool_args``), a tool's result before the model or the store see it (``tool_result``), an
answer before it is shown or final (``output``)."""

STAGES: tuple[GuardStage, ...] = ("input", "tool_args", "tool_result", "output")
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a guard decided when it did not allow: made by `block`, `rewrite` and `retry`."""

    action: Literal["block", "rewrite", "retry"]
    reason: str = ""
    """Why (a block's reason; a retry's message to the model; a rewrite's note for the audit)."""
    value: Any = None
    """A rewrite's new value."""


def block(reason: str) -> Verdict:
    """Refuse the value: the prompt is not sent, the tool does not run (or its result is withheld),
    the answer is not shown. See docs/guards.md for what each stage does."""
    return Verdict("block", str(reason))


def rewrite(value: Any, reason: str = "") -> Verdict:
    """Go on with `value` instead (a prompt's text, a call's arguments as a dict, a tool's result,
    an answer's text or structured answer). `reason`: what was changed, for the audit."""
    return Verdict("rewrite", str(reason), value)


def retry(message: str) -> Verdict:
    """Output guards only: refuse the answer and ask the model again with `message` (counted in the
    agent's ``output_retries``; once they are used up, the answer is blocked)."""
    return Verdict("retry", str(message))


@dataclass(slots=True)
class GuardContext:
    """What a check gets beside the value (its second parameter, when it takes two): where in
    which run the value is. One context serves every guard asked at that point."""

    stage: GuardStage
    run_id: str
    thread: str
    step: int
    """The thread's model-call step the value belongs to."""
    messages: Sequence[Message] = field(default=(), repr=False)
    """The thread so far, read-only (empty for an input guard: it runs before the thread is read)."""
    state: Any = None
    """The user's state object (see tools taking ``ctx``)."""
    tool: str | None = None
    """The tool, for ``tool_args`` and ``tool_result``."""
    call_id: str | None = None
    args: Mapping[str, Any] | None = None
    """For ``tool_result``: the arguments the call ran with."""


@dataclass(slots=True)
class GuardCheck:
    """One check a run made (``result.guard_checks``), in the order they finished."""

    guard: str
    stage: GuardStage
    verdict: Literal["allow", "block", "rewrite", "retry"]
    reason: str = ""
    """Why it blocked (or what a rewrite changed, or a retry's message); "" for allow."""
    latency_s: float = 0.0
    step: int = 0
    tool: str | None = None
    call_id: str | None = None

    def describe(self) -> str:
        """One line: ``guard 'ids' blocked the input: a customer id``."""
        where = {"input": "the prompt", "tool_args": f"a call of {self.tool}",
                 "tool_result": f"a result of {self.tool}", "output": "the answer"}[self.stage]
        done = {"allow": "allowed", "block": "blocked", "rewrite": "rewrote", "retry": "refused"}[self.verdict]
        return f"guard {self.guard!r} {done} {where}" + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True, slots=True)
class Judgement:
    """An LLM judge's answer, as its ``output_type``: ``Agent(model, output_type=Judgement,
    system="Is the message about cooking? ...")``. `allowed` False blocks with `reason`."""

    allowed: bool
    reason: str = ""


class Guard:
    """A rule the run checks at one stage; made with `Guard.input`, `Guard.tool_args`,
    `Guard.tool_result` or `Guard.output`.

    The check is ``check(value, ctx)`` or ``check(value)``, sync or async, returning None (allow)
    or a `Verdict`. A sync check runs inline on the run's loop (keep it quick; make a slow one
    async): one that takes longer than `timeout_s` still counts as a block. An async check is
    cancelled at `timeout_s`.

    The check may be an `Agent` (an LLM judge): it is run with the value as its prompt (text as
    it is; arguments, results and structured answers as JSON, after the tool's name) and its answer
    read as `Judgement` (``output_type=Judgement``), a ``bool`` (True: allowed), or text that
    starts with ``ALLOW`` or ``BLOCK`` (the rest is the reason; anything else blocks). Its model
    calls join the run's usage rows with ``purpose="guard"``; its threads go to its own store
    (give it ``store="memory"`` to keep none).

    Attributes:
        name: how checks and trips name it (default: the check's name).
        stage: ``input``, ``tool_args``, ``tool_result`` or ``output``.
        tools: the tools a tool guard applies to (None: every tool: Python, MCP, the python tool,
            an agent as a tool).
        parallel: an input guard that races the first model call instead of going before it.
        timeout_s: seconds before the check counts as a block.
    """

    __slots__ = ("check", "judge", "name", "parallel", "stage", "takes_ctx", "timeout_s", "tools")

    def __init__(self, check: Any, stage: GuardStage, *, name: str | None = None, tools: Iterable[str] | None = None,
                 parallel: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if stage not in STAGES:
            raise UserError(f"a guard's stage is one of {', '.join(STAGES)}; got {stage!r}")
        self.judge = _is_judge(check)
        """The check is an `Agent` (an LLM judge)."""
        if not self.judge and not callable(check):
            raise UserError(f"a guard's check must be a function (value, ctx) -> verdict or an Agent; got {check!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise UserError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if parallel and stage != "input":
            raise UserError("only an input guard can be parallel (it races the first model call)")
        if isinstance(tools, str):
            raise UserError(f"tools= takes a list of tool names, got the string {tools!r}")
        self.check = check
        self.stage: GuardStage = stage
        self.name = name or _name_of(check, stage)
        self.tools = None if tools is None else frozenset(tools)
        self.parallel = bool(parallel)
        self.timeout_s = float(timeout_s)
        self.takes_ctx = self.judge or _takes_ctx(check)
        """Whether the check takes a `GuardContext` (its second parameter)."""

    @classmethod
    def input(cls, check: Any, *, name: str | None = None, parallel: bool = False,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> Guard:
        """Check the prompt (its text) before the model sees it: no model call, tool or spend
        happens before the check finishes. ``parallel=True`` races the first model call instead:
        a block cancels that call and no tool of its answer runs."""
        return cls(check, "input", name=name, parallel=parallel, timeout_s=timeout_s)

    @classmethod
    def tool_args(cls, check: Any, *, tools: Iterable[str] | None = None, name: str | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> Guard:
        """Check a tool call's arguments (a dict) before approval and before it runs."""
        return cls(check, "tool_args", name=name, tools=tools, timeout_s=timeout_s)

    @classmethod
    def tool_result(cls, check: Any, *, tools: Iterable[str] | None = None, name: str | None = None,
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> Guard:
        """Check a tool's result (the text the model would read) before the model or the store see it."""
        return cls(check, "tool_result", name=name, tools=tools, timeout_s=timeout_s)

    @classmethod
    def output(cls, check: Any, *, name: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Guard:
        """Check an answer before anyone sees it: its text (held back from the stream until the
        check passes), or an ``output_type`` agent's structured answer."""
        return cls(check, "output", name=name, timeout_s=timeout_s)

    def __repr__(self) -> str:
        extra = f", tools={sorted(self.tools)}" if self.tools is not None else ""
        extra += ", parallel=True" if self.parallel else ""
        return f"Guard.{self.stage}({self.name!r}{extra})"

    def applies_to(self, tool: str) -> bool:
        """Whether this tool guard checks calls of `tool`."""
        return self.tools is None or tool in self.tools

    def call(self, value: Any, ctx: GuardContext | None, rows: list[ModelCallUsage]) -> Any:
        """The check called on `value`: its verdict, or what `verdict` makes one of (an async
        check's awaitable; a judge's run, whose usage rows go to `rows`). A sync check's verdict
        comes back with no await at all (most guards: they cost a function call).

        Raises:
            Exception: whatever the check raised (the run turns it into a block).
        """
        if self.judge:
            return _judge(self.check, value, ctx, rows)
        return self.check(value, ctx) if self.takes_ctx else self.check(value)

    async def verdict(self, out: Any) -> Verdict | None:
        """What `call` returned that is not yet a verdict, as one: awaited within `timeout_s`.

        Raises:
            TimeoutError: past `timeout_s`. TypeError: it is not None or a verdict. Exception:
                whatever an async check raised (the run turns each into a block).
        """
        if isinstance(out, _Started) or inspect.isawaitable(out):
            try:
                out = await _bounded(out, self.timeout_s)
            except TimeoutError:
                raise
            except Exception as exc:
                if type(exc).__name__ == "TimeoutError":  # asyncio's own, on Python 3.10
                    raise TimeoutError from exc
                raise
        if out is not None and not isinstance(out, Verdict):
            raise TypeError(f"it returned {type(out).__name__}, not None or a verdict (block, rewrite, retry)")
        return out


def finished(coro: Any) -> Any:
    """`coro` run at once up to its end, when it waits for nothing (most async checks): its result;
    else the coroutine as started (`Guard.verdict` awaits the rest, within the timeout)."""
    try:
        first = coro.send(None)
    except StopIteration as done:
        return done.value
    return _Started(coro, first)


async def _bounded(awaitable: Any, timeout: float) -> Any:
    """`awaitable`'s result, cancelled at `timeout` seconds. A coroutine that finishes without
    waiting for anything (most guards) is run at once, with no timer at all."""
    import asyncio  # here: importing nbagent loads no asyncio

    if inspect.iscoroutine(awaitable):
        awaitable = finished(awaitable)
        if not isinstance(awaitable, _Started):
            return awaitable
    if sys.version_info >= (3, 11):  # a timer, no task
        async with asyncio.timeout(timeout):
            return await awaitable
    return await asyncio.wait_for(_resumed(awaitable), timeout)  # pragma: no cover - Python 3.10


async def _resumed(awaitable: Any) -> Any:  # pragma: no cover - Python 3.10 (wait_for wants a coroutine)
    return await awaitable


class _Started:
    """A coroutine already run up to its first wait (`first`: what it waits on), awaited to its end:
    each value and exception the awaiting task gets is passed on to it, as ``await`` would."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Any, first: Any) -> None:
        self.coro, self.first = coro, first

    def __await__(self) -> Any:
        coro, out = self.coro, self.first
        while True:
            try:
                sent = yield out
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation (the timeout's): into the coroutine
                try:
                    out = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    out = coro.send(sent)
                except StopIteration as done:
                    return done.value


def _is_judge(check: Any) -> bool:
    """An `Agent` (duck-typed: this base module does not import it) is a judge."""
    return not callable(check) and inspect.iscoroutinefunction(getattr(check, "run", None))


def _name_of(check: Any, stage: str) -> str:
    name = getattr(check, "name", None) if _is_judge(check) else getattr(check, "__name__", None)
    if not isinstance(name, str) or not name or name == "<lambda>":
        return "judge" if _is_judge(check) else f"{stage} guard"
    return name


def _takes_ctx(check: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(check).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): give it both
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def judge_prompt(value: Any, ctx: GuardContext | None) -> str:
    """What an LLM judge is asked: the text, or a JSON form after what it is."""
    assert ctx is not None  # a judge takes its context
    if isinstance(value, str) and ctx.stage in ("input", "output"):
        return value
    text = value if isinstance(value, str) else _json(value)
    where = {"tool_args": f"Arguments of a call of the tool {ctx.tool}", "output": "The answer",
             "tool_result": f"Result of the tool {ctx.tool}", "input": "The message"}[ctx.stage]
    return f"{where}:\n{text}"


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        from pydantic_core import to_json

        return to_json(value, fallback=str).decode()


async def _judge(agent: Any, value: Any, ctx: GuardContext | None, rows: list[ModelCallUsage]) -> Verdict | None:
    result = await agent.run(judge_prompt(value, ctx))
    rows.extend(replace(row, purpose="guard") for row in result.usage.calls)
    if result.status != "completed":
        detail = f": {result.error}" if result.error else ""
        return block(f"the judge's run ended {result.status}{detail}")
    out = result.output
    if isinstance(out, bool):
        return None if out else block("the judge did not allow it")
    if hasattr(out, "allowed"):
        return None if out.allowed else block(str(getattr(out, "reason", "") or "the judge did not allow it"))
    text = str(out).strip()
    head = text[:5].upper()
    if head == "ALLOW":
        return None
    if head == "BLOCK":
        return block(text[5:].strip(" :-\n") or "the judge blocked it")
    return block(f"the judge answered neither ALLOW nor BLOCK: {text[:200]!r}")


def pii(kinds: Iterable[str] = KINDS, *, stages: Iterable[GuardStage] = ("input", "tool_result", "output"),
        action: Literal["redact", "block"] = "redact", name: str = "pii") -> tuple[Guard, ...]:
    """Built-in guards for personal data and secrets: email addresses, phone numbers, card numbers
    (an issuer's prefix and the Luhn checksum), IBANs (the checksum) and API keys (``sk-``,
    ``sk-ant-``, ``ghp_``, ``AKIA``, ``xox...-`` and others). An order number is none of these.

    ``action="redact"`` (the default) rewrites each finding to ``[redacted <kind>]``;
    ``"block"`` blocks instead. A structured answer is redacted in its JSON form and validated
    again. The reason says what was found, never the value.

    Args:
        kinds: any of ``email``, ``phone``, ``card``, ``iban``, ``api_key``.
        stages: where to check (default: the prompt, tool results and answers: nothing personal
            goes to the provider, nothing leaks in an answer).
        action: ``redact`` or ``block``.
        name: the guards' name.

    Returns:
        One guard per stage: ``Agent(..., guards=[*pii()])``.
    """
    wanted = tuple(kinds)
    unknown = set(wanted) - set(KINDS)
    if unknown:
        raise UserError(f"pii() kinds are {', '.join(KINDS)}; unknown: {', '.join(sorted(unknown))}")
    if action not in ("redact", "block"):
        raise UserError(f"pii(action=...) is 'redact' or 'block', got {action!r}")

    def check(value: Any) -> Verdict | None:
        if not isinstance(value, (str, dict, list)):  # a structured answer: its JSON form
            from pydantic_core import to_jsonable_python

            value = to_jsonable_python(value, fallback=str)
        redacted, counts = _redact(value, wanted)
        if not counts:
            return None
        found = describe(counts)
        return rewrite(redacted, f"redacted {found}") if action == "redact" else block(f"found {found}")

    return tuple(Guard(check, stage, name=name) for stage in stages)


def _redact(value: Any, kinds: tuple[str, ...]) -> tuple[Any, Any]:
    """`value` (text, or JSON data) with its findings redacted, and their counts."""
    from collections import Counter

    if isinstance(value, str):
        return redact_pii(value, kinds)
    total: Counter[str] = Counter()
    if isinstance(value, dict):
        out: Any = {}
        for key, item in value.items():
            out[key], counts = _redact(item, kinds)
            total += counts
        return out, total
    if isinstance(value, list):
        out = []
        for item in value:
            new, counts = _redact(item, kinds)
            out.append(new)
            total += counts
        return out, total
    return value, total
