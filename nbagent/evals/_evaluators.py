"""Evaluators: `equals`, `contains`, `judge`, and plain functions wrapped as `Evaluator`s.

Owns the `Evaluator` class and what one evaluation of a case returns (`Score`). Imports the core
(models, messages, usage, pricing, store); no pandas: the report in `_report` makes the frame.
A judge call is a model call like any other: its usage row (``purpose="eval"``) is appended to
the evaluated case's thread, so ``usage_frame(agent)`` and ``runs_frame(agent)`` count it.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import UserError
from ..messages import SystemMessage, UserMessage
from ..models import infer_model
from ..models.base import Model, ModelRequest
from ..retry import Retry
from ..store.base import Change, ThreadState
from ..usage import ModelCallUsage

__all__ = ["Case", "Evaluator", "Score", "contains", "equals", "evaluator", "judge"]


@dataclass(slots=True)
class Case:
    """One evaluated case, as an evaluator sees it."""

    input: Any
    output: Any
    expected: Any
    row: Mapping[str, Any]
    """The case's row of the cases frame (every column, ``input`` and ``expected`` included)."""
    status: str
    thread: str | None
    run_id: str | None
    store: Any = None
    """The agent's store (a judge appends its usage row to the case's thread there)."""
    prices: Mapping[str, Any] | None = None


@dataclass(slots=True)
class Score:
    """What one evaluator said about one case: a score in [0, 1] (NaN: not scored), a reason,
    an error (the evaluator raised), and the cost of its model calls (judges)."""

    score: float = math.nan
    reason: str | None = None
    error: str | None = None
    cost: float | None = None


@dataclass(slots=True)
class Evaluator:
    """A named check of one case's answer; its name is the report's score column.

    `fn` takes a `Case` and returns (or, when async, resolves to) a bool (pass: 1.0 / 0.0), a
    number in [0, 1] (a score), a ``(score, reason)`` pair, a dict with ``score`` (or ``pass``)
    and ``reason``, a `Score`, or None (not scored: NaN); numpy scalars count as Python's own.
    A score outside [0, 1] is refused (the row's error). `threshold`: the score that passes.
    """

    name: str
    fn: Callable[[Case], Any]
    threshold: float = 0.5
    is_async: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise UserError(f"an evaluator's name is its column: a Python identifier, got {self.name!r}")
        self.is_async = inspect.iscoroutinefunction(self.fn)

    def score_sync(self, case: Case) -> Score:
        """Score `case` with a synchronous `fn`; an exception becomes the row's error."""
        try:
            return to_score(self.fn(case))
        except Exception as exc:  # one evaluator failing on one row never stops the others
            return Score(error=f"{type(exc).__name__}: {exc}")

    async def score(self, case: Case) -> Score:
        """Score `case` (an async `fn` is awaited); an exception becomes the row's error."""
        if not self.is_async:
            return self.score_sync(case)
        try:
            return to_score(await self.fn(case))
        except Exception as exc:
            return Score(error=f"{type(exc).__name__}: {exc}")


def _plain(value: Any) -> Any:
    """A numpy scalar (what every numpy comparison returns: ``numpy.bool_``) as Python's own
    bool, int, float or str; anything else as it is. numpy is not imported for it."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def _checked(score: float) -> float:
    """`score` if it is in [0, 1] or NaN (not scored).

    Raises:
        UserError: it is outside [0, 1] (5, -1, inf): a score the summary cannot average with the others.
    """
    if not (0.0 <= score <= 1.0 or math.isnan(score)):
        raise UserError(f"an evaluator's score must be in [0, 1] (or a bool, or None: not scored); got {score:g}")
    return score


def to_score(value: Any) -> Score:
    """An evaluator's return value as a `Score` (see `Evaluator`); numpy scalars count as
    Python's own.

    Raises:
        UserError: the value is none of those, or a score outside [0, 1].
    """
    if isinstance(value, Score):
        _checked(value.score)
        return value
    if value is None:
        return Score()
    reason = None
    if isinstance(value, tuple) and len(value) == 2:
        value, reason = value
    elif isinstance(value, Mapping):
        reason = value.get("reason")
        if "score" in value:
            value = value["score"]
        elif "pass" in value:
            value = value["pass"]
        else:
            raise UserError(f"an evaluator's dict needs a 'score' or 'pass' key, got {sorted(value)}")
    value, reason = _plain(value), _plain(reason)
    if isinstance(value, bool):
        return Score(1.0 if value else 0.0, None if reason is None else str(reason))
    if isinstance(value, (int, float)):
        return Score(_checked(float(value)), None if reason is None else str(reason))
    raise UserError(f"an evaluator returns a bool, a number, (score, reason) or a dict; got {type(value).__name__}")


def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 3
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 3
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


def evaluator(value: Evaluator | Callable[..., Any]) -> Evaluator:
    """An `Evaluator` from a plain function ``(output, expected, row) -> bool | float | dict``
    (or one taking ``(output, expected)`` or ``(output)``), named after the function; an
    `Evaluator` as it is."""
    if isinstance(value, Evaluator):
        return value
    if not callable(value):
        raise UserError(f"an evaluator is a function or an nbagent.evals evaluator, got {value!r}")
    name = getattr(value, "__name__", None) or type(value).__name__
    if name == "<lambda>":
        raise UserError("a lambda has no name for its column: wrap it, Evaluator('name', lambda case: ...)")
    n = min(_arity(value), 3)
    fn = value
    if inspect.iscoroutinefunction(fn):
        async def call_async(case: Case) -> Any:
            return await fn(*(case.output, case.expected, case.row)[:n])

        return Evaluator(name, call_async)
    return Evaluator(name, lambda case: fn(*(case.output, case.expected, case.row)[:n]))


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def equals(*, strip: bool = True, case_sensitive: bool = True, name: str = "equals") -> Evaluator:
    """Pass when the answer equals the case's ``expected`` (text compared after stripping
    whitespace unless ``strip=False``; ``case_sensitive=False`` ignores case; a structured
    answer is compared with ``==``)."""

    def check(case: Case) -> Any:
        if case.expected is None or (isinstance(case.expected, float) and math.isnan(case.expected)):
            return None  # nothing to compare with: not scored
        out, want = case.output, case.expected
        if isinstance(out, str) and isinstance(want, str):
            if strip:
                out, want = out.strip(), want.strip()
            if not case_sensitive:
                out, want = out.casefold(), want.casefold()
        return out == want

    return Evaluator(name, check)


def contains(text: str | None = None, *, case_sensitive: bool = False, name: str = "contains") -> Evaluator:
    """Pass when the answer contains `text` (default: the case's ``expected``), ignoring case
    unless ``case_sensitive=True``."""

    def check(case: Case) -> Any:
        wanted = text if text is not None else case.expected
        if wanted is None or (isinstance(wanted, float) and math.isnan(wanted)):
            return None
        out, want = _text(case.output), _text(wanted)
        if not case_sensitive:
            out, want = out.casefold(), want.casefold()
        return want in out

    return Evaluator(name, check)


JUDGE_SYSTEM = (
    "You grade an AI assistant's answer against a criterion. Reply with one JSON object and "
    'nothing else: {"pass": true or false, "reason": "<one short sentence>"}.'
)


def judge_prompt(criterion: str, case: Case) -> str:
    """The user message a judge sends: the criterion, the question, the answer (and the
    expected answer when the case has one)."""
    parts = [f"Criterion: {criterion}", f"Question: {_text(case.input)}", f"Answer: {_text(case.output)}"]
    if case.expected is not None and not (isinstance(case.expected, float) and math.isnan(case.expected)):
        parts.append(f"Expected answer: {_text(case.expected)}")
    return "\n\n".join(parts)


_VERDICT = re.compile(r"\{.*\}", re.S)


def parse_verdict(text: str) -> tuple[float, str | None]:
    """A judge's reply as (score, reason): its JSON object's ``pass`` (or ``score``), else the
    first of pass / fail / yes / no / true / false in the text.

    Raises:
        ValueError: the reply says neither.
    """
    match = _VERDICT.search(text)
    if match:
        try:
            data = json.loads(match.group(0))
        except ValueError:
            data = None
        if isinstance(data, dict) and ("pass" in data or "score" in data):
            score = to_score(data)
            return score.score, score.reason
    word = re.search(r"\b(pass|fail|yes|no|true|false)\b", text, re.I)
    if word is None:
        raise ValueError(f"the judge's reply says neither pass nor fail: {text[:120]!r}")
    return (1.0 if word.group(1).lower() in ("pass", "yes", "true") else 0.0), text.strip()[:200] or None


async def _record(case: Case, row: ModelCallUsage) -> None:
    """Append the judge's usage row to the case's thread (kept with the run it judged), at the
    thread's step; another writer of the thread meanwhile (a run, another judge) is waited out."""
    if case.store is None or case.thread is None:
        return

    def change(state: ThreadState) -> Change:
        row.step = state.step
        return Change(usage=[row])

    await case.store.update(case.thread, change)


def judge(
    criterion: str,
    *,
    model: Model | str,
    name: str = "judge",
    settings: Mapping[str, Any] | None = None,
    retry: Retry | None = None,
) -> Evaluator:
    """An LLM as judge: asks `model` whether the answer meets `criterion` (pass 1.0 / fail 0.0,
    with its reason in ``<name>_reason``).

    Each judge call is a usage row with ``purpose="eval"``, appended to the case's thread (its
    ``run_id`` the judged run's), priced like the agent's own calls. A case with no answer (its
    run did not complete: `evaluate` does not ask then) is not scored (NaN) and no call is made;
    a judge call that fails is the row's error (NaN, the error in ``<name>_error``), never a
    fail. Evaluating again calls the judge again.
    """
    judge_model = infer_model(model)
    policy = retry or Retry()
    extra = dict(settings or {})

    async def check(case: Case) -> Score:
        if case.output is None:  # nothing to grade: not a wrong answer
            return Score(reason=f"no answer (status {case.status})")
        request = ModelRequest([SystemMessage(JUDGE_SYSTEM), UserMessage(judge_prompt(criterion, case))],
                               [], {"temperature": 0, **extra})
        started, clock = time.time(), time.perf_counter()
        response = await policy.call(lambda: judge_model.request(request))
        counts = response.usage
        row = ModelCallUsage(
            case.run_id or "", case.thread, 0, started, judge_model.provider,
            response.model or judge_model.model_name, counts.input_tokens, counts.cache_read_tokens,
            counts.cache_write_tokens, counts.output_tokens, counts.reasoning_tokens,
            time.perf_counter() - clock, response.message.finish_reason, 0,
            usage_reported=counts.reported, purpose="eval",
        )
        if judge_model.priced or case.prices:
            from ..pricing import price_row

            price_row(row, case.prices)
        await _record(case, row)
        score, reason = parse_verdict(response.message.text or "")
        return Score(score, reason, cost=row.cost_total)

    return Evaluator(name, check)
