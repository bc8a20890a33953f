"""``agent.map(rows, confirm_over=...)``: forecast the batch first, and ask before spending more.

Owns `BatchConfirmation` (the forecast, and the batch waiting for a person's Run or Cancel),
`confirm`, and `map_with_forecast`, which `Agent.map` hands its forecast options to
(``dry_run=True``, ``confirm_over=``, ``sample=``): `nbagent.dataframe.batch` only runs rows and
returns their frame; forecasting and asking sit here, above it.

Imports pandas, the batch (`nbagent.dataframe`), `estimate`, and the Run / Cancel box
(`nbagent.widgets.confirm`, and so ipywidgets) only when the buttons are shown.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..dataframe import batch
from ..exceptions import UserError
from ..usage import usd
from ._forecast import Forecast, estimate

if TYPE_CHECKING:
    from ..widgets.confirm import ConfirmBox

__all__ = ["BatchConfirmation", "confirm", "map_with_forecast"]


def over_limit(forecast: Forecast, limit: float) -> bool:
    """Whether the batch may cost more than `limit`: the high end of the forecast's cost (at the
    batch price for ``batch_api=True``) is over it, or the cost is unknown (a model without a price)."""
    high = (forecast.batch_cost or forecast.cost)[2]
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
        self._widget: ConfirmBox | None = None

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
        _, mid, high = self.forecast.batch_cost or self.forecast.cost
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

    def widget(self) -> ConfirmBox:
        """The forecast with Run and Cancel buttons (a `nbagent.widgets.confirm.ConfirmBox`, an
        ipywidgets box), made once."""
        if self._widget is None:
            from ..widgets.confirm import ConfirmBox

            self._widget = ConfirmBox(self, self.forecast._repr_html_())
        return self._widget

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle: dict[str, Any] = self.widget()._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = repr(self)
        bundle.setdefault("text/html", self._repr_html_())
        return bundle


def confirm(agent: Any, inputs: Any, limit: float, *, sample: int = 5, **options: Any,
            ) -> pd.DataFrame | BatchConfirmation:
    """Forecast the batch from `sample` rows (`estimate`); run it when the forecast's high end
    stays within `limit` (USD) and return its frame, else return a `BatchConfirmation` (only the
    sampled rows have run). An unknown cost (a model without a price) asks too.

    ``agent.map(inputs, confirm_over=limit)`` calls this; `options` are `batch`'s
    (``concurrency``, ``thread_prefix``, ``progress``, ``desc``, ``executor``, ``chunk_size``).

    Raises:
        UserError: `limit` is not a number >= 0.
    """
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit >= 0:
        raise UserError(f"confirm_over is a cost in USD (a number >= 0), got {limit!r}")
    forecast = estimate(agent, inputs, sample=sample, **{k: v for k, v in options.items() if k != "desc"})

    def start() -> pd.DataFrame:
        return batch(agent, inputs, **options)

    if not over_limit(forecast, float(limit)):
        return start()
    return BatchConfirmation(forecast, float(limit), start)


def map_with_forecast(agent: Any, inputs: Any, *, dry_run: bool = False, confirm_over: float | None = None,
                      sample: int = 5, **options: Any) -> pd.DataFrame | Forecast | BatchConfirmation:
    """`Agent.map` with its forecast options, which `nbagent.dataframe.batch` does not take.

    ``dry_run=True``: run `sample` rows and return the batch's `Forecast` (`estimate`).
    ``confirm_over=limit``: the batch's frame when its forecast stays within `limit`, else a
    `BatchConfirmation` (`confirm`). Neither: the batch's frame (`batch`). `options` are
    `batch`'s; a progress bar shows unless ``progress=False``, as for ``agent.map``.

    Raises:
        UserError: both ``dry_run=True`` and ``confirm_over=``.
    """
    options.setdefault("progress", True)
    if confirm_over is not None:
        if dry_run:
            raise UserError("dry_run=True only forecasts; confirm_over= forecasts, then asks before running")
        return confirm(agent, inputs, confirm_over, sample=sample, **options)
    if dry_run:
        options.pop("desc", None)  # the forecast's bar says "estimate"
        return estimate(agent, inputs, sample=sample, **options)
    return batch(agent, inputs, **options)
