"""`readable`: a frame shown for reading, with costs in dollars, while its values stay numbers.

A cost column holds floats in US dollars so that pandas can sum, group and plot it; pandas prints
such small floats as ``0.000200``. `readable` returns the frame's ``Styler`` with each cost cell
written the way nbagent writes a cost everywhere else (`nbagent.usage.usd`: ``$0.000200``,
``$1.24``, ``$0`` for a free model, ``n/a`` for an unknown price) and seconds with two decimals.
Nothing in the frame changes: ``readable(frame).data`` is the frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..usage import usd

if TYPE_CHECKING:
    import pandas as pd

    from ._styled import ReadableFrame

__all__ = ["readable"]

_SECONDS = ("latency_s", "wall_s", "duration_s", "elapsed_s", "seconds")


def _is_cost(name: Any) -> bool:
    return isinstance(name, str) and (name.startswith("cost") or name.endswith("_cost") or name.endswith("_usd"))


def _seconds(value: float) -> str:
    return "" if value != value else f"{value:.2f} s"


def readable(frame: pd.DataFrame) -> ReadableFrame:
    """`frame` for reading in a cell: cost columns (``cost_total``, ``cost_input``,
    ``recorded_cost``, any ``cost*`` / ``*_cost`` / ``*_usd``) as dollars, second columns
    (``latency_s``...) with two decimals; every other cell as pandas shows it.

    The values stay numbers (this is a pandas ``Styler``: ``.data`` is `frame`, unchanged; its
    plain text, ``repr``, uses the same formats), so keep
    the frame for analysis and show ``readable(frame)``::

        frame = nbagent.usage_frame(agent, columns="summary")
        nbagent.dataframe.readable(frame)   # cost_total reads $0.000200, not 0.000200

    Needs Jinja2 (pandas' ``Styler`` does; it comes with the ``pandas`` extra).
    """
    from ._styled import ReadableFrame  # imports Jinja2: only when a frame is shown

    formats: dict[Any, Callable[[Any], str]] = {}
    for name in frame.columns:
        if _is_cost(name) and frame[name].dtype.kind == "f":
            formats[name] = usd
        elif name in _SECONDS and frame[name].dtype.kind == "f":
            formats[name] = _seconds
    return ReadableFrame(frame, cell_ids=False, plain_formats=formats)
