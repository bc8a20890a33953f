"""`evaluate` and its `EvalReport`; `diff` of two reports.

Owns running a cases frame through ``agent.map`` and scoring the answers. Imports pandas and
numpy, the batch (`nbagent.dataframe`) and the evaluators. The answers come from `batch`, so
concurrency, progress, resume (a re-run skips finished rows) and the cluster executors are the
batch's; evaluators then run here, sync ones in a plain loop, async ones (judges) concurrently.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import UserError
from ..usage import usd
from ._evaluators import Case, Evaluator, Score, evaluator

__all__ = ["EvalReport", "diff", "evaluate"]


def _cases(cases: Any) -> pd.DataFrame:
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
        return _cases(pd.DataFrame(items))
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
    table = _cases(cases)
    from ..dataframe import batch

    map_options.setdefault("desc", "evaluate")
    answers = batch(agent, table["input"], concurrency=concurrency, **map_options)
    expected = table["expected"] if "expected" in table.columns else pd.Series([None] * len(table), index=table.index)
    frame = pd.DataFrame({
        "input": answers["input"], "output": answers["output"], "expected": expected.to_numpy(dtype=object),
        "status": answers["status"], "error": answers["error"], "input_tokens": answers["input_tokens"],
        "output_tokens": answers["output_tokens"], "cost": answers["cost"], "latency_s": answers["duration_s"],
        "thread": answers["thread"], "run_id": answers["run_id"],
    }, index=answers.index)
    if not checks:
        return EvalReport(frame, [])
    records = table.to_dict("records")
    store, prices = agent.store, agent.prices
    items = [
        Case(inp, None if _missing(out) else out, None if _missing(exp) else exp, rec, str(st),
             None if _missing(th) else th, None if _missing(rid) else rid, store, prices)
        for inp, out, exp, rec, st, th, rid in zip(
            table["input"], answers["output"], expected, records, answers["status"], answers["thread"],
            answers["run_id"], strict=True)
    ]
    every = _score_all(checks, items, concurrency)
    eval_cost = None
    for check, scores in zip(checks, every, strict=True):
        _columns(frame, check, scores)
        costs = [s.cost for s in scores]
        if any(c is not None for c in costs):
            add = np.array([np.nan if c is None else c for c in costs], dtype=np.float64)
            eval_cost = add if eval_cost is None else np.nansum([eval_cost, add], axis=0)
    if eval_cost is not None:
        frame["eval_cost"] = eval_cost
    return EvalReport(frame, checks)


class EvalReport:
    """The result of `Agent.evaluate`: `frame` (one row per case) and `summary` (one row per
    evaluator).

    ``frame`` columns: ``input``, ``output``, ``expected``, ``status``, ``error``,
    ``input_tokens``, ``output_tokens``, ``cost`` (the run's, USD), ``latency_s``, ``thread``,
    ``run_id``, then per evaluator its score (a float in [0, 1], NaN when not scored or when
    it raised) named after it, ``<name>_reason`` when it gave reasons, ``<name>_error`` when it
    raised on some row, and ``eval_cost`` (judges' calls, USD) when an evaluator had a cost.
    """

    def __init__(self, frame: pd.DataFrame, evaluators: list[Evaluator]) -> None:
        self.frame = frame
        self.evaluators = [e.name for e in evaluators]
        """The evaluators' names (their score columns), in order."""
        self._thresholds = {e.name: e.threshold for e in evaluators}

    def summary(self) -> pd.DataFrame:
        """One row per evaluator: ``mean`` (of the scored rows), ``pass_rate`` (scored rows at or
        above its threshold), ``scored``, ``errors`` (rows where it raised); then a ``total`` row
        with ``cost`` (runs and judges, USD), ``latency_p50_s`` / ``latency_p95_s`` and, under
        ``errors``, the cases whose run did not complete."""
        f = self.frame
        rows = {}
        for name in self.evaluators:
            scores = f[name]
            scored = scores.dropna()
            errors = int(f[f"{name}_error"].notna().sum()) if f"{name}_error" in f else 0
            rows[name] = {"mean": scored.mean() if len(scored) else np.nan,
                          "pass_rate": (scored >= self._thresholds[name]).mean() if len(scored) else np.nan,
                          "scored": len(scored), "errors": errors}
        sums = [f[c].sum(min_count=1) for c in ("cost", "eval_cost") if c in f]
        cost = np.nan if all(np.isnan(s) for s in sums) else float(np.nansum(sums))
        latency = f["latency_s"].dropna()
        rows["total"] = {"mean": np.nan, "pass_rate": np.nan, "scored": len(f),
                         "errors": int((f["status"] != "completed").sum()), "cost": cost,
                         "latency_p50_s": latency.quantile(0.5) if len(latency) else np.nan,
                         "latency_p95_s": latency.quantile(0.95) if len(latency) else np.nan}
        out = pd.DataFrame.from_dict(rows, orient="index")
        out.index.name = "evaluator"
        return out.astype({"scored": "int64", "errors": "int64"})

    def __repr__(self) -> str:
        parts = [f"{n}={self.frame[n].mean():.2f}" for n in self.evaluators]
        cost = self.summary().loc["total", "cost"]
        return f"EvalReport({len(self.frame)} cases, {', '.join(parts) or 'no evaluators'}, cost {usd(cost)})"

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()  # type: ignore[operator,no-any-return]


def diff(before: EvalReport, after: EvalReport) -> pd.DataFrame:
    """Per case and evaluator (both reports'), the two scores and ``change``: ``improved``,
    ``regressed`` or ``same`` (NA when one side has no score). Cases are matched by index.

    ```python
    nbagent.evals.diff(report_old_prompt, report_new_prompt).query("change == 'regressed'")
    ```
    """
    if not isinstance(before, EvalReport) or not isinstance(after, EvalReport):
        raise UserError("diff() takes two EvalReports (agent.evaluate's results)")
    names = [n for n in before.evaluators if n in after.evaluators]
    parts = []
    for name in names:
        a, b = before.frame[name], after.frame[name]
        joined = pd.DataFrame({"input": before.frame["input"], "before": a}).join(b.rename("after"), how="inner")
        change = np.where(joined["after"] > joined["before"], "improved",
                          np.where(joined["after"] < joined["before"], "regressed", "same"))
        unknown = joined["before"].isna() | joined["after"].isna()
        both_missing = joined["before"].isna() & joined["after"].isna()
        change = np.where(unknown & ~both_missing, np.array(None, dtype=object), change)
        joined["change"] = pd.Categorical(change, categories=["improved", "regressed", "same"])
        joined.insert(0, "evaluator", name)
        parts.append(joined)
    if not parts:
        return pd.DataFrame(columns=["evaluator", "input", "before", "after", "change"])
    out = pd.concat(parts)
    out.index.name = "case"
    return out.set_index("evaluator", append=True)
