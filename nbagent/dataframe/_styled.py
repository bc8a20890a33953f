"""`ReadableFrame`, the pandas ``Styler`` that `readable` returns.

A module of its own because importing pandas' ``Styler`` imports Jinja2 (about 60 ms, and an
ImportError where Jinja2 is missing): `readable` imports this module when it is called, so
``import nbagent.dataframe`` needs neither.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

__all__ = ["ReadableFrame"]


class ReadableFrame(Styler):
    """What `readable` returns: a pandas ``Styler`` whose plain text (``repr``, a saved notebook's
    ``text/plain``) is the frame with the same formats, not ``<Styler at 0x…>``."""

    def __init__(self, data: pd.DataFrame, *args: Any,
                 plain_formats: dict[Any, Callable[[Any], str]] | None = None, **kwargs: Any) -> None:
        super().__init__(data, *args, **kwargs)  # (pandas builds copies with the Styler's arguments)
        self._plain_formats = dict(plain_formats or {})
        self.format(self._plain_formats)

    def __repr__(self) -> str:
        # (DataFrame.to_string(formatters=...) skips missing values: an unknown cost would read NaN)
        shown = self.data.copy()
        for name, form in self._plain_formats.items():
            shown[name] = shown[name].map(form)
        return shown.to_string()
