"""`compare`: the same inputs through several agents (or models), as one wide frame.

Owns `ComparisonFrame` (a DataFrame with ``(agent, field)`` columns, its plots and its
side-by-side `view`). Imports pandas, numpy, the frames (`nbagent.dataframe`), `evaluate` and the
views' error colour (`nbagent.display.html`).
"""

from __future__ import annotations

import copy
import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..display.html import ERROR
from ..exceptions import UserError
from ..usage import usd
from ._report import case_table, evaluate

__all__ = ["ComparisonFrame", "compare"]

FIELDS = ("output", "status", "error", "tool_calls", "input_tokens", "output_tokens", "cost", "latency_s")
"""Each agent's fields in a comparison frame, before its evaluator scores."""


class _Plots:
    """``frame.plot``: pandas' plot accessor, plus `cost_vs_score` and `latency`."""

    def __init__(self, frame: ComparisonFrame) -> None:
        self._frame = frame

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return pd.DataFrame(self._frame).plot(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(pd.DataFrame(self._frame).plot, name)

    def cost_vs_score(self, score: str | None = None, ax: Any = None) -> Any:
        """A scatter of each agent's total cost against its mean `score` (default: the first
        evaluator's), one labelled point per agent; an agent with no scored row (none of its
        runs completed) has no point, and a note in the corner names it."""
        import matplotlib.pyplot as plt

        frame = self._frame
        score = score or (frame.evaluators[0] if frame.evaluators else None)
        if score is None:
            raise UserError("cost_vs_score() needs an evaluator score: compare(..., evaluators=[...])")
        ax = ax if ax is not None else plt.subplots()[1]
        unscored = []
        for name in frame.agents:
            x, y = frame[(name, "cost")].sum(min_count=1), frame[(name, score)].mean()
            if np.isnan(y):  # no completed run (a provider down): no point at a score it never got
                unscored.append(name)
                continue
            ax.scatter([x], [y])
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4))
        if unscored:
            ax.annotate(f"not scored (no completed run): {', '.join(unscored)}", (0.01, 0.01),
                        xycoords="axes fraction", fontsize="small", alpha=0.7)
        ax.set_xlabel("cost (USD)")
        ax.set_ylabel(f"mean {score}")
        return ax

    def latency(self, ax: Any = None) -> Any:
        """A box plot of each agent's per-input latency (seconds)."""
        frame = self._frame
        data = pd.DataFrame({name: frame[(name, "latency_s")] for name in frame.agents})
        ax = data.plot.box(ax=ax)
        ax.set_ylabel("latency (s)")
        return ax


def _text(value: Any) -> str:
    return "" if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)) else str(value)


class _SideBySide:
    """`ComparisonFrame.view`'s display: each input's answers side by side (HTML in a notebook)."""

    def __init__(self, frame: ComparisonFrame, width: int) -> None:
        self._frame, self._width = frame, width

    def _error(self, name: str, label: Any) -> str:
        """The first line of the error of a run that did not complete ("" for one that did)."""
        f = self._frame
        if str(f.loc[label, (name, "status")]) == "completed":
            return ""
        lines = _text(f.loc[label, (name, "error")]).strip().splitlines()
        return lines[0][: self._width] if lines else ""

    def _cell(self, name: str, label: Any) -> str:
        f = self._frame
        text = _text(f.loc[label, (name, "output")])
        if len(text) > self._width:
            text = text[: self._width] + " ..."
        error = self._error(name, label)
        status = str(f.loc[label, (name, "status")])
        latency = f.loc[label, (name, "latency_s")]
        took = "n/a" if pd.isna(latency) else f"{latency:.2f}s"
        note = f"{status} · {usd(f.loc[label, (name, 'cost')])} · {took}"
        scores = " ".join(f"{e}={_score(f.loc[label, (name, e)])}" for e in f.evaluators)
        lines = [html.escape(text)] if text else []
        if error:
            lines.append(f"<small style=\"{ERROR}\">{html.escape(error)}</small>")
        lines.append(f"<small style='opacity:.7'>{html.escape(note)} {html.escape(scores)}</small>")
        return f"<td style='vertical-align:top;white-space:pre-wrap'>{'<br>'.join(lines)}</td>"

    def _head(self, name: str) -> str:
        reused = _reused(self._frame).get(name, 0)
        note = f"<br><small style='opacity:.7;font-weight:normal'>{_reused_note(reused)}</small>" if reused else ""
        return f"<th>{html.escape(str(name))}{note}</th>"

    def _repr_html_(self) -> str:
        f = self._frame
        head = "<th>input</th>" + "".join(self._head(n) for n in f.agents)
        rows = []
        for label in f.index:
            first = f"<td style='vertical-align:top'>{html.escape(str(f.inputs.loc[label]))}</td>"
            rows.append("<tr>" + first + "".join(self._cell(n, label) for n in f.agents) + "</tr>")
        # mathjax_ignore: JupyterLab typesets the text between two "$" of an HTML output as math
        return f"<table class='nbagent-compare mathjax_ignore'><tr>{head}</tr>{''.join(rows)}</table>"

    def __repr__(self) -> str:
        f = self._frame
        lines = [f"{name}: {_reused_note(n)}" for name, n in _reused(f).items() if n]
        for label in f.index:
            lines.append(f"[{label}] {f.inputs.loc[label]}")
            for name in f.agents:
                error = self._error(name, label)
                status = f.loc[label, (name, "status")]
                shown = f"({status}) {error}" if error else _text(f.loc[label, (name, "output")])
                lines.append(f"  {name}: {shown:.{self._width}}")
        return "\n".join(lines)


def _reused(frame: ComparisonFrame) -> dict[str, int]:
    """Per agent, the answers an earlier run had stored (`compare` sets it; a frame made
    otherwise has none)."""
    return getattr(frame, "reused", None) or {}


def _reused_note(count: int) -> str:
    return f"reused {count} stored answer{'s' * (count != 1)}"


def _score(value: Any) -> str:
    return "n/a" if pd.isna(value) else f"{value:.2f}"


class ComparisonFrame(pd.DataFrame):
    """`compare`'s result: one row per input, columns ``(agent name, field)``; ``.plot`` adds
    `cost_vs_score` and `latency`, `view` shows the answers side by side. Slicing it gives plain
    DataFrames."""

    _metadata = ["agents", "evaluators", "inputs", "reused"]

    @property
    def plot(self) -> Any:
        """pandas' ``DataFrame.plot``, with ``.cost_vs_score(score=None)`` and ``.latency()``."""
        return _Plots(self)

    def view(self, width: int = 400) -> _SideBySide:
        """Each input with every agent's answer side by side (an HTML table in a notebook, text
        elsewhere), with status, cost, latency and scores under each answer, the first line of
        the error under a run that did not complete, and "reused N stored answers" under an
        agent whose answers an earlier run of the same agent and inputs had stored."""
        return _SideBySide(self, width)


def _agents(agents: Mapping[str, Any] | None, agent: Any, models: Sequence[Any] | None) -> dict[str, Any]:
    if agents is not None:
        if agent is not None or models is not None:
            raise UserError("compare() takes agents={...}, or one agent with models=[...], not both")
        if not isinstance(agents, Mapping) or not agents:
            raise UserError("compare(agents=...) is a dict: name -> Agent")
        return dict(agents)
    if agent is None or not models:
        raise UserError("compare() needs agents={'name': agent, ...} or agent=... with models=[...]")
    from ..models import infer_model

    out: dict[str, Any] = {}
    for model in models:
        clone = copy.copy(agent)
        clone.model = infer_model(model)
        clone._own_threads = {}
        name = clone.model.model_name
        while name in out:
            name += "'"
        out[name] = clone
    return out


def _tool_calls(agent: Any, threads: pd.Series) -> pd.Series:
    from ..dataframe import usage_frame

    usage = usage_frame(agent)
    counts = usage[usage["purpose"] == "run"].groupby("thread", observed=True)["tool_calls"].sum()
    return threads.astype(object).map(counts).fillna(0).astype("int64")


def compare(
    inputs: Any, *, agents: Mapping[str, Any] | None = None, agent: Any = None,
    models: Sequence[Any] | None = None, evaluators: Sequence[Any] = (), **options: Any,
) -> ComparisonFrame:
    """The same inputs through several agents, one wide frame: a row per input, columns
    ``(agent name, field)`` with fields ``output``, ``status``, ``tool_calls``,
    ``input_tokens``, ``output_tokens``, ``cost``, ``latency_s`` and the `evaluators`' scores.

    ```python
    frame = nbagent.compare(cases["input"], agents={"mini": agent_a, "claude": agent_b})
    frame = nbagent.compare(cases, agent=agent, models=["openai:gpt-4.1-mini", "local"],
                            evaluators=[nbagent.evals.contains()])
    frame.xs("cost", axis=1, level=1).sum()     # total cost per agent
    frame.view()                                 # the answers side by side
    ```

    Args:
        inputs: what `Agent.evaluate` takes (a Series of inputs, or a cases frame with ``input``
            and ``expected`` for the evaluators).
        agents: name -> `Agent`; or `agent` with `models` (copies of `agent`, one per model,
            named by the model).
        evaluators: scored per agent, as `Agent.evaluate` scores them.
        options: for ``agent.map`` (``concurrency``, ``progress``, ``executor``, ...).
    """
    named = _agents(agents, agent, models)
    table = case_table(inputs)
    parts, checks, reused = {}, None, {}
    for name, each in named.items():
        report = evaluate(each, table, evaluators, desc=name, **options)
        frame = report.frame
        checks = report.evaluators
        part = frame[["output", "status", "error"]].copy()
        part["tool_calls"] = _tool_calls(each, frame["thread"])
        for field in FIELDS[4:]:
            part[field] = frame[field]
        for check in checks:
            part[check] = frame[check]
        parts[name] = part
        reused[name] = int(frame["skipped"].sum())
    wide = pd.concat(parts, axis=1, names=["agent", "field"])
    out = ComparisonFrame(wide)
    out.agents, out.evaluators, out.inputs = list(named), list(checks or []), table["input"]
    out.reused = reused
    return out
