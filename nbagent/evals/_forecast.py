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
    batch_cost: tuple[float, float, float] | None = None
    """With ``batch_api=True``: the same forecast at the batch price (``agent.map(...,
    batch_api=True)``: each sampled model call priced as a batch row), else None."""
    rounds: int | None = None
    """With ``batch_api=True``: the batch rounds the map takes (the sample's most steps in a row:
    one round per step, each up to the provider's 24-hour window), else None."""

    @property
    def remaining(self) -> Forecast:
        """The forecast for the rows still to run: `rows` less the `settled` sampled ones."""
        left = forecast_of(self.sample, self.rows - self.settled, self.concurrency, settled=0)
        if self.batch_cost is not None:  # a mean per row times the rows: the same share of it
            share = left.rows / self.rows
            low, mid, high = self.batch_cost
            left.batch_cost, left.rounds = (low * share, mid * share, high * share), self.rounds
        return left

    def __repr__(self) -> str:
        low, mid, high = self.cost
        text = (f"Forecast({self.rows} rows from a sample of {len(self.sample)}: "
                f"~{self.input_tokens:,} input + {self.output_tokens:,} output tokens, "
                f"cost {usd(mid)} ({usd(low)} to {usd(high)}), {self._wall()} at concurrency {self.concurrency}")
        if self.batch_cost is not None:
            low, mid, high = self.batch_cost
            text += f"; batch API: {usd(mid)} ({usd(low)} to {usd(high)}), {self._rounds()}"
        if self.settled:
            left = self.remaining
            text += f"; {left.rows:,} still to run: {usd(left.cost[1])}, {left._wall()}"
            if left.batch_cost is not None:
                text += f", batch API {usd(left.batch_cost[1])}"
        return text + ")"

    def _rounds(self) -> str:
        return f"{self.rounds} round{'s' if self.rounds != 1 else ''} of up to 24 h"

    def _wall(self) -> str:
        return "wall time unknown" if math.isnan(self.wall_s) else f"~{self.wall_s:.1f}s"

    def _cells(self) -> list[str]:
        low, mid, high = self.cost
        cells = [f"{self.rows:,}", f"~{self.input_tokens:,}", f"~{self.output_tokens:,}",
                 f"{usd(mid)} <small>({usd(low)} to {usd(high)})</small>", self._wall()]
        if self.batch_cost is not None:
            low, mid, high = self.batch_cost
            cells += [f"{usd(mid)} <small>({usd(low)} to {usd(high)})</small>", html.escape(self._rounds())]
        return cells

    def _repr_html_(self) -> str:
        cells = self._cells()
        cells[0] += f" (sample {len(self.sample)})"
        columns = [("all", cells)]
        if self.settled:  # the wall time the user waits next is the rows still to run, not all
            columns.append(("still to run", self.remaining._cells()))
        head = "".join(f"<th>{name}</th>" for name, _ in columns)
        labels = ("rows", "input tokens", "output tokens", "cost", "wall time", "cost, batch API", "time, batch API")
        body = "".join(f"<tr><th style='text-align:left'>{label}</th>"
                       + "".join(f"<td>{cells[k]}</td>" for _, cells in columns) + "</tr>"
                       for k, label in enumerate(labels[:len(cells)]))
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
        settled=int(frame["status"].isin(["completed", "paused"]).sum()) if settled is None else settled,
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
    """Each sampled row's cost with every model call of its own thread priced as a batch row: the
    row's cost less what the batch price saves on each of them. Only the calls the map batches
    change: the agent's steps and summaries. A sub-agent's (its own thread: `Agent.as_tool`) and
    a guard judge's stay at their live price; a judge's (``purpose="eval"``) are not the row's."""
    import dataclasses

    from ..dataframe._sources import load_now
    from ..pricing import price_row

    threads = [str(t) for t in frame["thread"].dropna()]
    saved: dict[str, float] = {}
    for state in load_now(agent, threads=threads).threads:
        saving = 0.0
        for row in state.usage:
            if row.cost_total is None or row.purpose not in ("run", "compaction") or row.batch:
                continue
            again = dataclasses.replace(row, batch=True, cost_input=None, cost_output=None, cost_total=None)
            price_row(again, agent.prices)
            saving += row.cost_total - (again.cost_total if again.cost_total is not None else row.cost_total)
        saved[state.thread] = saving
    return frame["cost"] - frame["thread"].astype(object).map(saved).astype("float64").fillna(0.0)


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
    forecast = forecast_of(with_stored_times(agent, frame), len(rows), concurrency)
    if batch_api:
        forecast.batch_cost = _cost_range(_at_batch_prices(agent, frame), len(rows))
        forecast.rounds = int(frame["steps"].max()) if len(frame) else 0
    return forecast


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
