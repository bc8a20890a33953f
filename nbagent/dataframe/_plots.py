"""Plots users would otherwise write by hand: cost per step / tool / model, cumulative tokens.

Owns nothing but plotting; imports pandas (matplotlib is imported by pandas' ``.plot`` and by
these functions when a plot is drawn, never at import time). Every function returns the
matplotlib ``Axes`` so the caller can set titles, limits or save the figure.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..exceptions import UserError
from ._frames import tool_calls_frame, usage_frame

__all__ = ["cost_by_tool", "plot_cost", "plot_tokens"]

NO_TOOL = "(no tool result)"
"""Label of the cost of model calls that read no tool result (`cost_by_tool`)."""


def _usage(data: Any) -> pd.DataFrame:
    return data if isinstance(data, pd.DataFrame) else usage_frame(data)


def cost_by_tool(usage: pd.DataFrame, tool_calls: pd.DataFrame) -> pd.Series:
    """Cost (USD) attributed to each tool: the cost of the model call that read its result.

    A tool asked for at step ``s`` of a thread is read by the model call at step ``s + 1``;
    that call's ``cost_total`` is split evenly among the tool calls it read. Model calls that
    read no tool result are summed under ``"(no tool result)"``, so the values add up to the
    total cost (calls without a price count as missing).
    """
    cols = ["thread", "step", "cost_total"]
    calls = usage[cols].assign(thread=usage["thread"].astype(object), step=usage["step"].astype("int64"))
    calls = calls.groupby(["thread", "step"], sort=False, as_index=False)["cost_total"].sum(min_count=1)
    tc = tool_calls.loc[tool_calls["step"].notna(), ["thread", "step", "tool"]]
    tc = tc.assign(
        thread=tc["thread"].astype(object),
        tool=tc["tool"].astype(object),
        step=tc["step"].astype("int64") + 1,
    )
    tc = tc.assign(share=1.0 / tc.groupby(["thread", "step"])["tool"].transform("size"))
    merged = tc.merge(calls, on=["thread", "step"], how="inner")
    per_tool = (merged["cost_total"] * merged["share"]).groupby(merged["tool"]).sum(min_count=1)
    read = calls.merge(
        tc[["thread", "step"]].drop_duplicates(), on=["thread", "step"], how="left", indicator=True
    )
    rest = read.loc[read["_merge"] == "left_only", "cost_total"].sum(min_count=1)
    if pd.notna(rest) or per_tool.empty:
        per_tool.loc[NO_TOOL] = rest
    per_tool.name = "cost_total"
    per_tool.index.name = "tool"
    return per_tool.sort_values(ascending=False, na_position="last")


def plot_cost(
    data: Any, by: str = "step", *, tool_calls: pd.DataFrame | None = None, ax: Any = None, **kwargs: Any
) -> Any:
    """Bar chart of the cost (USD) per ``step``, ``tool`` or ``model``; returns the Axes.

    Args:
        data: a usage frame, or anything `usage_frame` takes (a RunResult, an Agent: its own
            threads, a Store: every thread, ...).
        by: ``"step"`` (summed over threads), ``"model"``, or ``"tool"`` (see `cost_by_tool`).
        tool_calls: the tool-calls frame, for ``by="tool"`` when `data` is a DataFrame.
        ax: the matplotlib Axes to draw on (default: a new figure).
        kwargs: passed to ``Series.plot.bar``.
    """
    if by not in ("step", "tool", "model"):
        raise UserError(f"plot_cost(by=...) must be 'step', 'tool' or 'model', got {by!r}")
    usage = _usage(data)
    if by == "tool":
        if tool_calls is None:
            if isinstance(data, pd.DataFrame):
                raise UserError("plot_cost(df, by='tool') also needs tool_calls=<tool_calls_frame(...)>")
            tool_calls = tool_calls_frame(data)
        series = cost_by_tool(usage, tool_calls)
    else:
        series = usage.groupby(by, observed=True, sort=True)["cost_total"].sum(min_count=1)
    ax = series.fillna(0.0).plot.bar(ax=ax, **kwargs)
    from matplotlib.ticker import FuncFormatter

    from ..usage import usd

    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: usd(value)))  # $0.000200, not 0.000200
    ax.set_ylabel("cost (USD)")
    ax.set_xlabel(by)
    ax.set_title(f"cost per {by}")
    return ax


def plot_tokens(data: Any, *, thread: str | None = None, ax: Any = None, **kwargs: Any) -> Any:
    """Cumulative tokens over a thread, by step (whole-number ticks); returns the Axes.

    One thread (or `thread` given): cumulative input, cached input and output tokens. Several
    threads: cumulative total tokens, one line per thread. `data` as for `plot_cost` (an `Agent`
    means its own threads, see `usage_frame`).
    """
    usage = _usage(data)
    if thread is not None:
        usage = usage[usage["thread"] == thread]
    usage = usage.sort_values(["time", "step"], kind="stable")
    threads = usage["thread"].astype(object).unique()
    if len(threads) <= 1:
        cols = ["input_tokens", "cache_read_tokens", "output_tokens"]
        frame = usage.set_index("step")[cols].cumsum()
        ax = frame.plot(ax=ax, marker="o", **kwargs)
        ax.set_title(f"cumulative tokens: {threads[0]}" if len(threads) else "cumulative tokens")
    else:
        total = (
            (usage["input_tokens"] + usage["output_tokens"]).groupby(usage["thread"].astype(object)).cumsum()
        )
        frame = usage.assign(total=total, thread=usage["thread"].astype(object)).pivot_table(
            index="step", columns="thread", values="total", aggfunc="last"
        )
        # Each line ends at its thread's last step (a thread that ended is not drawn on, flat),
        # and lines that coincide stay visible: each has its own marker and dash pattern.
        frame = frame.apply(lambda col: col.ffill().where(col.index <= col.last_valid_index()))
        markers, dashes = ("o", "s", "^", "D", "v"), ("-", "--", ":", "-.")  # 20 distinct pairs
        kwargs.setdefault("style", [markers[i % 5] + dashes[i % 4] for i in range(len(frame.columns))])
        ax = frame.plot(ax=ax, legend=len(threads) <= 10, **kwargs)
        ax.set_title("cumulative tokens per thread")
    ax.set_xlabel("step")
    ax.set_ylabel("tokens")
    _integer_ticks(ax.xaxis)  # steps are whole numbers: no tick at 1.5
    return ax


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))
