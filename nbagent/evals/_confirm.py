"""``agent.map(rows, confirm_over=...)``: forecast the batch first, and ask before spending more.

Owns `BatchConfirmation` (the forecast with Run and Cancel buttons) and `confirm`. Imports the
batch (`nbagent.dataframe`), `estimate`, and ipywidgets only when the buttons are shown.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from ..exceptions import UserError
from ..usage import usd
from ._forecast import Forecast, estimate

__all__ = ["BatchConfirmation", "confirm"]


def over_limit(forecast: Forecast, limit: float) -> bool:
    """Whether the batch may cost more than `limit`: the high end of the forecast's cost is
    over it, or the cost is unknown (a model without a price)."""
    high = forecast.cost[2]
    return math.isnan(high) or high > limit


class BatchConfirmation:
    """What ``agent.map(rows, confirm_over=limit)`` returns when the forecast passes `limit`: the
    forecast, and the batch waiting for a decision. Only the sampled rows have run.

    In a notebook it shows the forecast with **Run** and **Cancel** buttons; Run runs the whole
    batch (the sampled rows are skipped, not paid twice) and keeps its frame in `frame`. In code,
    `run` and `cancel` do the same.

    ```python
    pending = agent.map(df["question"], confirm_over=1.00)   # a DataFrame when under $1.00
    answers = pending.run()                                  # or click Run
    ```
    """

    def __init__(self, forecast: Forecast, limit: float, start: Callable[[], pd.DataFrame]) -> None:
        self.forecast = forecast
        self.limit = limit
        self.status = "waiting"
        """``waiting``, ``running``, ``done``, ``cancelled`` or ``failed``."""
        self.frame: pd.DataFrame | None = None
        """The batch's frame once it ran (`agent.map`'s columns)."""
        self._start = start
        self._widget: Any = None

    def run(self) -> pd.DataFrame:
        """Run the whole batch and return its frame (the frame it already has, when it ran)."""
        if self.frame is not None:
            return self.frame
        if self.status == "cancelled":
            raise UserError("this batch was cancelled; run agent.map(rows) again to run it")
        self.status = "running"
        try:
            self.frame = self._start()
        except BaseException:
            self.status = "failed"
            raise
        self.status = "done"
        return self.frame

    def cancel(self) -> None:
        """Do not run the batch (the sampled rows stay in the store; a later ``agent.map`` of the
        same rows skips them)."""
        if self.status == "waiting":
            self.status = "cancelled"

    def _why(self) -> str:
        _, mid, high = self.forecast.cost
        if math.isnan(high):
            return f"its cost is unknown (the model has no price) and confirm_over is {usd(self.limit)}"
        return f"it may cost up to {usd(high)} (forecast {usd(mid)}), over confirm_over={usd(self.limit)}"

    def summary(self) -> str:
        """One line: where the batch stands."""
        rows, sampled = self.forecast.rows, len(self.forecast.sample)
        if self.status == "waiting":
            return f"{rows:,} rows waiting: {self._why()}; the {sampled} sampled rows ran"
        if self.status == "cancelled":
            return f"cancelled: only the {sampled} sampled rows of {rows:,} ran"
        if self.status == "done" and self.frame is not None:
            return f"done: {len(self.frame):,} rows, cost {usd(self.frame['cost'].sum(min_count=1))}"
        return f"{self.status}: {rows:,} rows"

    def __repr__(self) -> str:
        return f"BatchConfirmation({self.summary()}; .run() or .cancel())"

    def _repr_html_(self) -> str:
        note = html.escape(self.summary())
        return f"<div class='nbagent-confirm'>{self.forecast._repr_html_()}<p>{note}</p></div>"

    def widget(self) -> Any:
        """The forecast with Run and Cancel buttons (an ipywidgets box), made once."""
        if self._widget is None:
            self._widget = _ConfirmBox(self)
        return self._widget.box

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle: dict[str, Any] = self.widget()._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = repr(self)
        bundle.setdefault("text/html", self._repr_html_())
        return bundle


class _ConfirmBox:
    """`BatchConfirmation.widget`: the forecast, Run and Cancel, a status line, an output area
    for what the run shows (a click's output has no cell of its own), and a `ViewFrame` (the
    stylesheet that tints Run like the chat view's buttons)."""

    def __init__(self, pending: BatchConfirmation) -> None:
        import ipywidgets as widgets

        from ..widgets.frame import ViewFrame
        from ..widgets.tool_table import themed_button

        self.pending = pending
        self.run_button = themed_button("Run", "primary", "run the whole batch")
        self.cancel_button = themed_button("Cancel", "", "do not run the batch")
        self.status = widgets.HTML()
        self.run_button.on_click(lambda _: self.run())
        self.cancel_button.on_click(lambda _: self.cancel())
        self.output = widgets.Output()  # what the run shows (its progress bar) goes under the buttons
        forecast = widgets.HTML(pending.forecast._repr_html_())
        frame = ViewFrame("")  # loads view.css, which tints Run as the chat view's Send
        frame.notice = "kernel restarted: run this cell again"
        self.box = widgets.VBox([forecast, widgets.HBox([self.run_button, self.cancel_button]), self.status,
                                 self.output, frame])
        self.box.add_class("nbagent-confirm")
        self.refresh()

    def refresh(self) -> None:
        waiting = self.pending.status == "waiting"
        self.run_button.disabled = self.cancel_button.disabled = not waiting
        self.status.value = f"<small class='mathjax_ignore'>{html.escape(self.pending.summary())}</small>"

    def run(self) -> None:
        self.run_button.disabled = self.cancel_button.disabled = True
        self.status.value = "<small>running...</small>"
        try:
            with self.output:
                self.pending.run()
        except Exception as exc:  # a click has no caller to raise to: say it under the buttons
            self.refresh()
            self.status.value = f"<small>failed: {html.escape(f'{type(exc).__name__}: {exc}')}</small>"
            return
        self.refresh()

    def cancel(self) -> None:
        self.pending.cancel()
        self.refresh()


def confirm(agent: Any, inputs: Any, limit: Any, sample: int, options: dict[str, Any]) -> Any:
    """`batch` with ``confirm_over=limit``: forecast from `sample` rows; the batch's frame when
    the forecast stays within `limit`, else a `BatchConfirmation`."""
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit >= 0:
        raise UserError(f"confirm_over is a cost in USD (a number >= 0), got {limit!r}")
    from ..dataframe import batch

    forecast = estimate(agent, inputs, sample=sample, concurrency=options["concurrency"],
                        thread_prefix=options["thread_prefix"], progress=options["progress"],
                        executor=options["executor"], chunk_size=options["chunk_size"])

    def start() -> pd.DataFrame:
        return batch(agent, inputs, **options)  # type: ignore[no-any-return]

    if not over_limit(forecast, float(limit)):
        return start()
    return BatchConfirmation(forecast, float(limit), start)
