"""`estimate`: run a sample of a batch's rows and forecast the whole batch (`Forecast`).

Owns the forecast arithmetic. Imports pandas and numpy and the batch (`nbagent.dataframe`: `batch`,
`batch_inputs`, `runs_frame`). The sampled rows run as the batch's own rows (same thread ids), so
the real batch afterwards skips them instead of paying for them twice.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..dataframe import batch, batch_inputs, runs_frame
from ..exceptions import UserError
from ..usage import usd

__all__ = ["Forecast", "estimate"]


@dataclass(slots=True)
class Forecast:
    """What a batch will take, forecast from a sample of its rows.

    Tokens, cost and wall time are for all `rows` (the sampled ones included); `remaining` is
    the same forecast for the rows the batch will still run, the sampled ones it skips left out.
    `cost` is ``(low, mid, high)`` in USD: the sample's mean cost per row times the rows, plus or
    minus two standard errors of that mean (NaN when the model has no price). `wall_s` is the
    sample's mean row time times the rounds of `concurrency` rows the batch takes (a sampled row
    an earlier run answered counts the wall time stored with its run).
    """

    rows: int
    input_tokens: int
    output_tokens: int
    cost: tuple[float, float, float]
    wall_s: float
    concurrency: int
    sample: pd.DataFrame
    """The sampled rows' frame (``agent.map``'s columns)."""
    settled: int = 0
    """The sampled rows that settled (completed, or paused for a decision): ``agent.map`` of the
    same rows skips them, so their tokens, cost and time are spent already."""

    @property
    def remaining(self) -> Forecast:
        """The forecast for the rows still to run: `rows` less the `settled` sampled ones."""
        return forecast_of(self.sample, self.rows - self.settled, self.concurrency, settled=0)

    def __repr__(self) -> str:
        low, mid, high = self.cost
        text = (f"Forecast({self.rows} rows from a sample of {len(self.sample)}: "
                f"~{self.input_tokens:,} input + {self.output_tokens:,} output tokens, "
                f"cost {usd(mid)} ({usd(low)} to {usd(high)}), {self._wall()} at concurrency {self.concurrency}")
        if self.settled:
            left = self.remaining
            text += f"; {left.rows:,} still to run: {usd(left.cost[1])}, {left._wall()}"
        return text + ")"

    def _wall(self) -> str:
        return "wall time unknown" if math.isnan(self.wall_s) else f"~{self.wall_s:.1f}s"

    def _cells(self) -> list[str]:
        low, mid, high = self.cost
        return [f"{self.rows:,}", f"~{self.input_tokens:,}", f"~{self.output_tokens:,}",
                f"{usd(mid)} <small>({usd(low)} to {usd(high)})</small>", self._wall()]

    def _repr_html_(self) -> str:
        cells = self._cells()
        cells[0] += f" (sample {len(self.sample)})"
        columns = [("all", cells)]
        if self.settled:  # the wall time the user waits next is the rows still to run, not all
            columns.append(("still to run", self.remaining._cells()))
        head = "".join(f"<th>{name}</th>" for name, _ in columns)
        labels = ("rows", "input tokens", "output tokens", "cost", "wall time")
        body = "".join(f"<tr><th style='text-align:left'>{label}</th>"
                       + "".join(f"<td>{cells[k]}</td>" for _, cells in columns) + "</tr>"
                       for k, label in enumerate(labels))
        note = f"at concurrency {self.concurrency}"
        if self.settled:
            note += f"; the batch skips the {self.settled} sampled rows that are done"
        # mathjax_ignore: JupyterLab typesets the text between two "$" of an HTML output as math
        return (f"<table class='nbagent-forecast mathjax_ignore'><caption>Forecast</caption><tr><th></th>{head}</tr>"
                f"{body}<tr><td colspan='{len(columns) + 1}'><small>{html.escape(note)}</small></td></tr></table>")


def _positions(count: int, sample: int, seed: int | None) -> list[int]:
    if count <= sample:
        return list(range(count))
    return sorted(int(i) for i in np.random.default_rng(seed).choice(count, sample, replace=False))


def forecast_of(frame: pd.DataFrame, rows: int, concurrency: int, settled: int | None = None) -> Forecast:
    """A `Forecast` for `rows` rows from `frame`, the sampled rows' ``agent.map`` frame;
    `settled`: of them, the rows the batch will skip (default: those of `frame` that completed
    or paused)."""
    if len(frame) == 0:
        raise UserError("estimate() needs at least one row to sample")
    costs = frame["cost"].dropna()
    if len(costs):
        mean = float(costs.mean())
        spread = 2 * float(costs.std(ddof=1)) / math.sqrt(len(costs)) if len(costs) > 1 else 0.0
        cost = (max(0.0, mean - spread) * rows, mean * rows, (mean + spread) * rows)
    else:
        cost = (math.nan, math.nan, math.nan)
    times = frame["duration_s"].dropna()
    per_row = float(times.mean()) if len(times) else math.nan
    return Forecast(
        rows=rows,
        input_tokens=round(float(frame["input_tokens"].mean()) * rows),
        output_tokens=round(float(frame["output_tokens"].mean()) * rows),
        cost=cost,
        wall_s=per_row * math.ceil(rows / concurrency),
        concurrency=concurrency,
        sample=frame,
        settled=int(frame["status"].isin(["completed", "paused"]).sum()) if settled is None else settled,
    )


def estimate(
    agent: Any, inputs: Any, *, sample: int = 5, concurrency: int = 8, seed: int | None = 0,
    thread_prefix: str | None = None, progress: bool = False, **options: Any,
) -> Forecast:
    """Run `sample` rows of `inputs` (chosen at random with `seed`) and forecast the batch; see
    `Agent.estimate`."""
    if not isinstance(sample, int) or isinstance(sample, bool) or sample < 1:
        raise UserError(f"sample must be a positive integer, got {sample!r}")
    rows = batch_inputs(inputs)
    picked = _positions(len(rows), sample, seed)
    # The rows keep their batch keys (positions, or the Series' labels), hence the batch's thread ids.
    subset = rows.iloc[picked]
    frame = batch(agent, subset, concurrency=min(concurrency, len(picked)) or 1, thread_prefix=thread_prefix,
                  progress=progress, desc="estimate", **options)
    return forecast_of(with_stored_times(agent, frame), len(rows), concurrency)


def with_stored_times(agent: Any, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (a batch's) with the stored wall time of rows an earlier run answered (the batch
    skips them and gives no ``duration_s``): a second forecast of the same rows, in this kernel
    or after a restart, times them as the first did, and `evaluate` keeps the latency of the
    answers it reuses."""
    missing = frame["skipped"].astype(bool) & frame["duration_s"].isna() & frame["thread"].notna()
    if not missing.any():
        return frame
    runs = runs_frame(agent, thread=[str(t) for t in frame.loc[missing, "thread"]])
    took = runs.groupby("thread", observed=True)["wall_s"].sum(min_count=1)
    frame = frame.copy()
    frame.loc[missing, "duration_s"] = frame.loc[missing, "thread"].astype(object).map(took).astype("float64")
    return frame
