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

    Tokens and cost are for all `rows` (the sampled ones included); `cost` is ``(low, mid,
    high)`` in USD: the sample's mean cost per row times the rows, plus or minus two standard
    errors of that mean (NaN when the model has no price). `wall_s` is the sample's mean row
    time times the rounds of `concurrency` rows the batch takes (a sampled row an earlier run
    answered counts the wall time stored with its run).
    """

    rows: int
    input_tokens: int
    output_tokens: int
    cost: tuple[float, float, float]
    wall_s: float
    concurrency: int
    sample: pd.DataFrame
    """The sampled rows' frame (``agent.map``'s columns)."""
    batch_cost: tuple[float, float, float] | None = None
    """With ``batch_api=True``: the same forecast at the batch price (``agent.map(...,
    batch_api=True)``: each sampled model call priced as a batch row), else None."""
    rounds: int | None = None
    """With ``batch_api=True``: the batch rounds the map takes (the sample's most steps in a row:
    one round per step, each up to the provider's 24-hour window), else None."""

    def __repr__(self) -> str:
        low, mid, high = self.cost
        text = (f"Forecast({self.rows} rows from a sample of {len(self.sample)}: "
                f"~{self.input_tokens:,} input + {self.output_tokens:,} output tokens, "
                f"cost {usd(mid)} ({usd(low)} to {usd(high)}), {self._wall()} at concurrency {self.concurrency}")
        if self.batch_cost is not None:
            low, mid, high = self.batch_cost
            text += f"; batch API: {usd(mid)} ({usd(low)} to {usd(high)}), {self._rounds()}"
        return text + ")"

    def _rounds(self) -> str:
        return f"{self.rounds} round{'s' if self.rounds != 1 else ''} of up to 24 h"

    def _wall(self) -> str:
        return "wall time unknown" if math.isnan(self.wall_s) else f"~{self.wall_s:.1f}s"

    def _repr_html_(self) -> str:
        low, mid, high = self.cost
        cells = [("rows", f"{self.rows:,} (sample {len(self.sample)})"),
                 ("input tokens", f"~{self.input_tokens:,}"), ("output tokens", f"~{self.output_tokens:,}"),
                 ("cost", f"{usd(mid)} <small>({usd(low)} to {usd(high)})</small>"),
                 ("wall time", f"{self._wall()} at concurrency {self.concurrency}")]
        if self.batch_cost is not None:
            low, mid, high = self.batch_cost
            cells += [("cost, batch API", f"{usd(mid)} <small>({usd(low)} to {usd(high)})</small>"),
                      ("time, batch API", html.escape(self._rounds()))]
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in cells)
        # mathjax_ignore: JupyterLab typesets the text between two "$" of an HTML output as math
        return f"<table class='nbagent-forecast mathjax_ignore'><caption>Forecast</caption>{body}</table>"


def _positions(count: int, sample: int, seed: int | None) -> list[int]:
    if count <= sample:
        return list(range(count))
    return sorted(int(i) for i in np.random.default_rng(seed).choice(count, sample, replace=False))


def forecast_of(frame: pd.DataFrame, rows: int, concurrency: int) -> Forecast:
    """A `Forecast` for `rows` rows from `frame`, the sampled rows' ``agent.map`` frame."""
    n = len(frame)
    if n == 0:
        raise UserError("estimate() needs at least one row to sample")
    cost = _cost_range(frame["cost"], rows)
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
    )


def _cost_range(costs: pd.Series, rows: int) -> tuple[float, float, float]:
    """``(low, mid, high)`` for `rows` rows from the sampled rows' `costs`: the mean times the
    rows, plus or minus two standard errors of the mean (NaN when no row has a price)."""
    costs = costs.dropna()
    if not len(costs):
        return (math.nan, math.nan, math.nan)
    mean = float(costs.mean())
    spread = 2 * float(costs.std(ddof=1)) / math.sqrt(len(costs)) if len(costs) > 1 else 0.0
    return (max(0.0, mean - spread) * rows, mean * rows, (mean + spread) * rows)


def _at_batch_prices(agent: Any, frame: pd.DataFrame) -> pd.Series:
    """Each sampled row's cost with every one of its model calls priced as a batch row."""
    import dataclasses

    from ..dataframe._sources import load_now
    from ..pricing import price_row

    threads = [str(t) for t in frame["thread"].dropna()]
    costs: dict[str, float] = {}
    for state in load_now(agent, threads=threads).threads:
        total = math.nan
        for row in state.usage:
            if row.cost_total is None:
                continue
            again = dataclasses.replace(row, batch=True, cost_input=None, cost_output=None, cost_total=None)
            price_row(again, agent.prices)
            if again.cost_total is not None:
                total = again.cost_total if math.isnan(total) else total + again.cost_total
        costs[state.thread] = total
    return frame["thread"].astype(object).map(costs).astype("float64")


def estimate(
    agent: Any, inputs: Any, *, sample: int = 5, concurrency: int = 8, seed: int | None = 0,
    thread_prefix: str | None = None, progress: bool = False, batch_api: bool = False, **options: Any,
) -> Forecast:
    """Run `sample` rows of `inputs` (chosen at random with `seed`) and forecast the batch; see
    `Agent.estimate`. With `batch_api` the sample still runs live (a forecast in seconds, not a
    day), and the forecast gives the cost at the batch price beside it (`Forecast.batch_cost`)
    and the rounds a ``batch_api=True`` map takes; the batch API's options (``wait``,
    ``poll_s``, ``decisions``) are not the sample's."""
    if not isinstance(sample, int) or isinstance(sample, bool) or sample < 1:
        raise UserError(f"sample must be a positive integer, got {sample!r}")
    rows = batch_inputs(inputs)
    picked = _positions(len(rows), sample, seed)
    # The rows keep their batch keys (positions, or the Series' labels), hence the batch's thread ids.
    subset = rows.iloc[picked]
    for name in ("wait", "poll_s", "decisions"):
        options.pop(name, None)
    frame = batch(agent, subset, concurrency=min(concurrency, len(picked)) or 1, thread_prefix=thread_prefix,
                  progress=progress, desc="estimate", **options)
    forecast = forecast_of(_with_stored_times(agent, frame), len(rows), concurrency)
    if batch_api:
        forecast.batch_cost = _cost_range(_at_batch_prices(agent, frame), len(rows))
        forecast.rounds = int(frame["steps"].max()) if len(frame) else 0
    return forecast


def _with_stored_times(agent: Any, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the stored wall time of rows an earlier run answered (the batch skips them
    and gives no ``duration_s``): a second forecast of the same rows, in this kernel or after a
    restart, times them as the first did."""
    missing = frame["skipped"].astype(bool) & frame["duration_s"].isna() & frame["thread"].notna()
    if not missing.any():
        return frame
    runs = runs_frame(agent, thread=[str(t) for t in frame.loc[missing, "thread"]])
    took = runs.groupby("thread", observed=True)["wall_s"].sum(min_count=1)
    frame = frame.copy()
    frame.loc[missing, "duration_s"] = frame.loc[missing, "thread"].astype(object).map(took).astype("float64")
    return frame
