"""`evaluate` and its `EvalReport`; `diff` of two reports.

Owns running a cases frame through ``agent.map`` and scoring the answers, and the rule that a
case whose run did not complete is not scored (`RAN`). Imports pandas and numpy, the batch
(`nbagent.dataframe`), the evaluators and `_forecast.with_stored_times` (a reused answer keeps its
stored latency). The answers come from `batch`, so concurrency, progress, resume (a re-run skips
finished rows) and the cluster executors are the batch's; evaluators then run here, sync ones in
a plain loop, async ones (judges) concurrently.
"""

from __future__ import annotations

import asyncio
import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import UserError
from ..usage import usd
from ._evaluators import Case, Evaluator, Score, evaluator
from ._forecast import with_stored_times

__all__ = ["EvalReport", "diff", "evaluate"]


def case_table(cases: Any) -> pd.DataFrame:
    """The cases as a frame with an ``input`` column (and ``expected`` when given)."""
    if isinstance(cases, pd.DataFrame):
        if "input" not in cases.columns:
            raise UserError(f"evaluate() needs an 'input' column, got columns {list(cases.columns)[:8]}")
        return cases
    if isinstance(cases, pd.Series):
        return pd.DataFrame({"input": cases}, index=cases.index)
    if isinstance(cases, (str, bytes)) or not isinstance(cases, Iterable):
        raise UserError("evaluate() takes a DataFrame with 'input' (and 'expected') columns, or a list")
    items = list(cases)
    if items and all(isinstance(i, dict) for i in items):
        return case_table(pd.DataFrame(items))
    return pd.DataFrame({"input": items})


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


async def _score_async(checks: list[Evaluator], cases: list[Case], concurrency: int) -> list[list[Score]]:
    gate = asyncio.Semaphore(concurrency)

    async def one(check: Evaluator, case: Case) -> Score:
        async with gate:
            return await check.score(case)

    out = []
    for check in checks:
        out.append(list(await asyncio.gather(*(one(check, c) for c in cases))))
    return out


def _score_all(checks: list[Evaluator], cases: list[Case], concurrency: int) -> list[list[Score]]:
    """Per evaluator, the scores of every case (sync evaluators in a loop, async ones on the loop)."""
    scores: list[list[Score] | None] = [None] * len(checks)
    for i, check in enumerate(checks):
        if not check.is_async:
            scores[i] = [check.score_sync(c) for c in cases]
    waiting = [c for c, s in zip(checks, scores, strict=True) if s is None]
    if waiting:
        from .._sync import run_sync

        done = iter(run_sync(lambda: _score_async(waiting, cases, concurrency)))
        scores = [s if s is not None else next(done) for s in scores]
    return [s for s in scores if s is not None]


def _columns(frame: pd.DataFrame, check: Evaluator, scores: list[Score]) -> None:
    """Add `check`'s score column (and ``_reason`` / ``_error`` / its cost where it has any)."""
    frame[check.name] = np.array([s.score for s in scores], dtype=np.float64)
    if any(s.reason is not None for s in scores):
        frame[f"{check.name}_reason"] = pd.array([s.reason for s in scores], dtype="string")
    if any(s.error is not None for s in scores):
        frame[f"{check.name}_error"] = pd.array([s.error for s in scores], dtype="string")


RAN = "completed"
"""The status of a run that answered. Any other (failed, stopped, paused, cancelled) did not: its
case is not scored (NaN, counted under ``not_run``), since no answer is not a wrong answer."""


def _scored(checks: list[Evaluator], cases: list[Case], concurrency: int) -> list[list[Score]]:
    """Per evaluator, every case's score: the cases whose run completed are scored, the others
    are not (NaN, and no evaluator or judge is called for them)."""
    ran = [c for c in cases if c.status == RAN]
    every = _score_all(checks, ran, concurrency) if ran else [[] for _ in checks]
    out = []
    for scores in every:
        done = iter(scores)
        out.append([next(done) if c.status == RAN else Score() for c in cases])
    return out


def _answers(agent: Any, table: pd.DataFrame, concurrency: int, map_options: dict[str, Any]) -> pd.DataFrame:
    """The cases' answers through ``agent.map``, as the report's frame before its scores."""
    from ..dataframe import batch

    map_options.setdefault("desc", "evaluate")
    answers = with_stored_times(agent, batch(agent, table["input"], concurrency=concurrency, **map_options))
    expected = table["expected"] if "expected" in table.columns else pd.Series([None] * len(table), index=table.index)
    return pd.DataFrame({
        "input": answers["input"], "output": answers["output"], "expected": expected.to_numpy(dtype=object),
        "status": answers["status"], "error": answers["error"], "input_tokens": answers["input_tokens"],
        "output_tokens": answers["output_tokens"], "cost": answers["cost"], "latency_s": answers["duration_s"],
        "thread": answers["thread"], "run_id": answers["run_id"], "skipped": answers["skipped"],
    }, index=answers.index)


def evaluate(
    agent: Any,
    cases: Any,
    evaluators: Sequence[Evaluator | Any] = (),
    *,
    concurrency: int = 8,
    **map_options: Any,
) -> EvalReport:
    """Run every case through ``agent.map`` and score the answers; see `Agent.evaluate`."""
    checks = [evaluator(e) for e in evaluators]
    names = [c.name for c in checks]
    if len(set(names)) != len(names):
        raise UserError(f"two evaluators share a name (their column): {names}; pass name=... to one")
    table = case_table(cases)
    frame = _answers(agent, table, concurrency, map_options)
    if not checks:
        return EvalReport(frame, [])
    records = table.to_dict("records")
    store, prices = agent.store, agent.prices
    items = [
        Case(inp, None if _missing(out) else out, None if _missing(exp) else exp, rec, str(st),
             None if _missing(th) else th, None if _missing(rid) else rid, store, prices)
        for inp, out, exp, rec, st, th, rid in zip(
            table["input"], frame["output"], frame["expected"], records, frame["status"], frame["thread"],
            frame["run_id"], strict=True)
    ]
    eval_cost = None
    for check, scores in zip(checks, _scored(checks, items, concurrency), strict=True):
        _columns(frame, check, scores)
        costs = [s.cost for s in scores]
        if any(c is not None for c in costs):
            add = np.array([np.nan if c is None else c for c in costs], dtype=np.float64)
            eval_cost = add if eval_cost is None else np.nansum([eval_cost, add], axis=0)
    if eval_cost is not None:
        frame["eval_cost"] = eval_cost
    return EvalReport(frame, checks)


class EvalReport:
    """The result of `Agent.evaluate`: `frame` (one row per case), `summary` (one row per
    evaluator) and `totals` (the runs: cases, not run, cost, latency).

    ``frame`` columns: ``input``, ``output``, ``expected``, ``status``, ``error``,
    ``input_tokens``, ``output_tokens``, ``cost`` (the run's, USD), ``latency_s``, ``thread``,
    ``run_id``, ``skipped`` (an answer an earlier run stored, reused: its cost and latency are
    the stored ones), then per evaluator its score (a float in [0, 1]; NaN when not scored,
    when it raised, or when the case's run did not complete) named after it, ``<name>_reason``
    when it gave reasons, ``<name>_error`` when it raised on some row, and ``eval_cost``
    (judges' calls, USD) when an evaluator had a cost.
    """

    def __init__(self, frame: pd.DataFrame, evaluators: list[Evaluator]) -> None:
        self.frame = frame
        self.evaluators = [e.name for e in evaluators]
        """The evaluators' names (their score columns), in order."""
        self._thresholds = {e.name: e.threshold for e in evaluators}

    def summary(self) -> pd.DataFrame:
        """One row per evaluator: ``mean`` and ``pass_rate`` (scored rows at or above its
        threshold) over the scored rows, ``scored``, ``errors`` (rows where it raised) and
        ``not_run`` (cases whose run did not complete: failed, stopped, paused or cancelled;
        not scored, so in neither the mean nor the pass rate). The runs' cost and latency are
        `totals`."""
        f = self.frame
        not_run = int((f["status"] != RAN).sum())
        rows = []
        for name in self.evaluators:
            scored = f[name].dropna()
            errors = int(f[f"{name}_error"].notna().sum()) if f"{name}_error" in f else 0
            rows.append({"mean": scored.mean() if len(scored) else np.nan,
                         "pass_rate": (scored >= self._thresholds[name]).mean() if len(scored) else np.nan,
                         "scored": len(scored), "errors": errors, "not_run": not_run})
        out = pd.DataFrame(rows, index=pd.Index(self.evaluators, name="evaluator"),
                           columns=["mean", "pass_rate", "scored", "errors", "not_run"])
        return out.astype({"mean": "float64", "pass_rate": "float64", "scored": "int64", "errors": "int64",
                           "not_run": "int64"})

    def totals(self) -> pd.Series:
        """The runs, in one Series: ``cases``, ``not_run`` (cases whose run did not complete),
        ``cost`` (the runs and the judges, USD; NaN when nothing had a price), and
        ``latency_p50_s`` / ``latency_p95_s`` of the runs that completed."""
        f = self.frame
        sums = [f[c].sum(min_count=1) for c in ("cost", "eval_cost") if c in f]
        latency = f.loc[f["status"] == RAN, "latency_s"].dropna()
        return pd.Series({
            "cases": len(f), "not_run": int((f["status"] != RAN).sum()),
            "cost": np.nan if all(np.isnan(s) for s in sums) else float(np.nansum(sums)),
            "latency_p50_s": float(latency.quantile(0.5)) if len(latency) else np.nan,
            "latency_p95_s": float(latency.quantile(0.95)) if len(latency) else np.nan,
        }, dtype=object, name="total")

    def _line(self) -> str:
        total = self.totals()
        not_run = f", {total['not_run']} not run" if total["not_run"] else ""
        return f"{total['cases']} cases{not_run}, cost {usd(total['cost'])}"

    def __repr__(self) -> str:
        means = {n: self.frame[n].mean() for n in self.evaluators}
        parts = [f"{n}={'n/a' if np.isnan(m) else f'{m:.2f}'}" for n, m in means.items()]
        return f"EvalReport({self._line()}, {', '.join(parts) or 'no evaluators'})"

    def _repr_html_(self) -> str:
        table = self.summary()._repr_html_()
        return f"{table}<p class='mathjax_ignore'>{html.escape(self._line())}</p>"


CHANGES = ["improved", "regressed", "same", "not run"]
"""`diff`'s ``change`` categories."""


def diff(before: EvalReport, after: EvalReport) -> pd.DataFrame:
    """Per case and evaluator (both reports'), the two scores and ``change``: ``improved``,
    ``regressed``, ``same``, or ``not run`` when the case's run did not complete in either
    report (a provider down is not a regression); NA when a side was not scored (no
    ``expected``, the evaluator raised). Cases are matched by index.

    ```python
    nbagent.evals.diff(report_old_prompt, report_new_prompt).query("change == 'regressed'")
    ```
    """
    if not isinstance(before, EvalReport) or not isinstance(after, EvalReport):
        raise UserError("diff() takes two EvalReports (agent.evaluate's results)")
    names = [n for n in before.evaluators if n in after.evaluators]
    ran = (before.frame["status"] == RAN).rename("_a").to_frame().join(
        (after.frame["status"] == RAN).rename("_b"), how="inner")
    not_run = ~(ran["_a"] & ran["_b"])
    parts = []
    for name in names:
        a, b = before.frame[name], after.frame[name]
        joined = pd.DataFrame({"input": before.frame["input"], "before": a}).join(b.rename("after"), how="inner")
        change = np.where(joined["after"] > joined["before"], "improved",
                          np.where(joined["after"] < joined["before"], "regressed", "same"))
        unknown = joined["before"].isna() | joined["after"].isna()
        both_missing = joined["before"].isna() & joined["after"].isna()
        change = np.where(unknown & ~both_missing, np.array(None, dtype=object), change)
        change = np.where(not_run.reindex(joined.index).to_numpy(), "not run", change)
        joined["change"] = pd.Categorical(change, categories=CHANGES)
        joined.insert(0, "evaluator", name)
        parts.append(joined)
    if not parts:
        return pd.DataFrame(columns=["evaluator", "input", "before", "after", "change"])
    out = pd.concat(parts)
    out.index.name = "case"
    return out.set_index("evaluator", append=True)
