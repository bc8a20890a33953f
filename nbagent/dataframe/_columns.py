"""Columnar construction of the usage frame: column lists / arrays -> typed DataFrame.

Owns the usage frame's schema (`USAGE_SCHEMA`) and the fast builders; imports pandas and numpy
(this is the edge), nbagent.usage and the store's columnar shape (`UsageColumns`). Rows never go
through a list of dicts: each column is turned into one numpy array or categorical at a time.
From a store's `UsageColumns` every column is ``np.frombuffer`` over its blocks' buffers plus one
``np.concatenate`` (text: the blocks' dictionaries merged, codes remapped with numpy), so
1,000,000 stored rows become a frame in well under a second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd

from ..store.base import ColumnBlock, TextPart, UsageColumns
from ..usage import ModelCallUsage
from ._sources import FRAME_COLUMNS

__all__ = [
    "USAGE_SCHEMA",
    "categorical",
    "empty_usage_frame",
    "strings",
    "times",
    "usage_from_columns",
    "usage_from_rows",
]

USAGE_SCHEMA: dict[str, str] = {
    "run_id": "category",
    "thread": "category",
    "step": "int64",
    "time": "datetime64[ns, UTC]",
    "provider": "category",
    "model": "category",
    "input_tokens": "int64",
    "cache_read_tokens": "int64",
    "cache_write_tokens": "int64",
    "output_tokens": "int64",
    "reasoning_tokens": "int64",
    "latency_s": "float64",
    "finish_reason": "category",
    "tool_calls": "int64",
    "cost_input": "float64",
    "cost_output": "float64",
    "cost_total": "float64",
    "currency": "category",
    "usage_reported": "bool",
    "purpose": "category",
    "replayed": "bool",
    "recorded_cost": "float64",
    "agent": "category",
    "depth": "int64",
    "parent_call_id": "category",
    "batch": "bool",
}
"""Column -> dtype of the usage frame, in column order. Repeated strings are categoricals
(small, fast to group by, and they round-trip through parquet)."""
assert set(USAGE_SCHEMA) == set(FRAME_COLUMNS), "the usage frame holds every stored column but context"

_STR: Any = "str" if int(pd.__version__.split(".")[0]) >= 3 else object
"""pandas' default string dtype."""

_DEFAULTS: dict[str, Any] = {
    "currency": "USD",
    "usage_reported": True,
    "purpose": "run",
    "replayed": False,
    "recorded_cost": np.nan,
    "batch": False,
    "latency_s": np.nan,
    "cost_input": np.nan,
    "cost_output": np.nan,
    "cost_total": np.nan,
}


def _sorted_codes(codes: np.ndarray, cats: pd.Index, sort_limit: int) -> tuple[np.ndarray, pd.Index]:
    """Sort the categories (and remap the codes) when there are 2..`sort_limit` of them."""
    if 1 < len(cats) <= sort_limit:
        order = np.argsort(np.asarray(cats, dtype=object).astype(str), kind="stable")
        remap = np.empty(len(order), dtype=codes.dtype)
        remap[order] = np.arange(len(order), dtype=codes.dtype)
        codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1)
        cats = cats[order]
    return codes, cats


def categorical(values: Any, *, sort_limit: int = 1000) -> pd.Categorical:
    """A categorical from a list / array of strings (None -> NaN), built with one hash pass.

    Categories are sorted when there are at most `sort_limit` of them (models, providers), and
    kept in order of first appearance otherwise (run ids, threads: sorting 100,000 ids costs more
    than the rest of the frame).
    """
    if isinstance(values, pd.Categorical):
        return values
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    if arr.ndim != 1:  # np.asarray of a list of tuples; keep strings as they are
        arr = np.empty(len(values), dtype=object)
        arr[:] = list(values)
    codes, uniques = pd.factorize(arr, use_na_sentinel=True)
    # No categories at all (an all-missing column): still string categories, so parquet keeps the
    # column categorical instead of reading it back as object.
    cats = pd.Index([], dtype=_STR) if len(uniques) == 0 else pd.Index(uniques)
    codes, cats = _sorted_codes(codes, cats, sort_limit)
    return pd.Categorical.from_codes(codes, categories=cats)


def times(seconds: Any) -> pd.DatetimeIndex:
    """Seconds since the epoch (floats, NaN allowed) -> tz-aware UTC datetimes (ns dtype),
    rounded to the millisecond: a float's last digits are no measurement, and a cell shows
    ``06:15:56.824`` rather than ``06:15:56.823590400``."""
    secs = np.asarray(seconds, dtype=np.float64)
    missing = np.isnan(secs)
    ns = np.where(missing, 0, np.round(secs * 1e3)).astype(np.int64) * 1_000_000
    out = pd.to_datetime(ns, unit="ns", utc=True)
    if missing.any():
        out = out.where(~missing)
    return out


def strings(values: Sequence[Any]) -> pd.Series:
    """A column of text in pandas' default string dtype (``str`` on pandas 3, ``object`` on 2);
    an all-missing column stays ``object``."""
    if all(v is None for v in values):
        return pd.Series(list(values), dtype=object)
    return pd.Series(list(values))


def _ints(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _floats(values: Any) -> np.ndarray:
    # np.array converts None to NaN for a float dtype.
    return np.array(values, dtype=np.float64)


def _column(name: str, values: Any) -> Any:
    kind = USAGE_SCHEMA[name]
    if kind == "int64":
        return _ints(values)
    if kind == "float64":
        return _floats(values)
    if kind == "category":
        return categorical(values, sort_limit=1000 if name not in ("run_id", "thread") else 0)
    if kind == "bool":
        return np.asarray(values, dtype=bool)
    return times(values)


def empty_usage_frame() -> pd.DataFrame:
    """A usage frame with no rows and the right columns and dtypes."""
    return usage_from_columns({name: [] for name in USAGE_SCHEMA}, length=0)


def usage_from_columns(columns: Mapping[str, Any], *, length: int | None = None) -> pd.DataFrame:
    """Build the usage frame from columns (lists or arrays keyed by `ModelCallUsage` field names,
    or a store's `UsageColumns`).

    Missing columns get their defaults (0 tokens, NaN cost, ``"USD"``, ``usage_reported=True``,
    ``purpose="run"``);
    unknown keys are ignored. This is what a store's columnar reader feeds.
    """
    if isinstance(columns, UsageColumns):
        return _from_store_columns(columns)
    if length is None:
        length = next((len(columns[name]) for name in USAGE_SCHEMA if name in columns), 0)
    data: dict[str, Any] = {}
    for name in USAGE_SCHEMA:
        values = columns.get(name)
        if values is None:
            default = _DEFAULTS.get(name, 0 if USAGE_SCHEMA[name] == "int64" else None)
            values = (
                [default] * length
                if USAGE_SCHEMA[name] in ("category", "datetime64[ns, UTC]")
                else np.full(length, default if default is not None else np.nan)
            )
        elif len(values) != length:
            raise ValueError(f"usage column {name!r} has {len(values)} values, expected {length}")
        data[name] = _column(name, values)
    return pd.DataFrame(data, copy=False)


# ------------------------------------------------------------------- from a store's UsageColumns
def _keep(block: ColumnBlock) -> np.ndarray | None:
    return None if block.keep is None else np.frombuffer(block.keep, dtype=np.int32)


def _numbers(blocks: list[ColumnBlock], name: str, dtype: Any) -> np.ndarray:
    arrays = []
    for block in blocks:
        values = np.frombuffer(block.parts[name], dtype=dtype)  # type: ignore[arg-type]
        keep = _keep(block)
        arrays.append(values if keep is None else values[keep])
    if not arrays:
        return np.empty(0, dtype=dtype)
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0].copy()


def _text(blocks: list[ColumnBlock], name: str, sort_limit: int) -> pd.Categorical:
    """One categorical from the blocks' dictionaries: categories merged in order of first use,
    each block's codes remapped with one numpy take."""
    index: dict[str, int] = {}
    add = index.setdefault
    pieces = []
    filtered = False
    for block in blocks:
        part = block.parts[name]
        assert isinstance(part, TextPart)
        # The extra -1 at the end maps code -1 (None) to itself.
        remap = np.fromiter(
            (add(c, len(index)) for c in part.categories), dtype=np.int32, count=len(part.categories)
        )
        remap = np.append(remap, np.int32(-1))
        codes = np.frombuffer(part.codes, dtype=np.int32)
        keep = _keep(block)
        if keep is not None:
            codes, filtered = codes[keep], True
        pieces.append(remap[codes])
    codes = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int32)
    cats = pd.Index(list(index), dtype=_STR) if index else pd.Index([], dtype=_STR)
    if filtered:
        # A chunk shared with other threads lists their values too: keep the used ones, in
        # order of first use among the rows kept.
        present = codes >= 0
        used, first = np.unique(codes[present], return_index=True)
        used = used[np.argsort(first, kind="stable")]
        remap = np.full(len(cats) + 1, -1, dtype=np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        codes = remap[codes]
        cats = cats[used]
    codes, cats = _sorted_codes(codes, cats, sort_limit)
    return pd.Categorical.from_codes(codes, categories=cats, validate=False)


def _from_store_columns(columns: UsageColumns) -> pd.DataFrame:
    blocks = columns.blocks
    length = columns.length
    data: dict[str, Any] = {}
    for name in USAGE_SCHEMA:
        kind = USAGE_SCHEMA[name]
        if name not in columns.names:
            default = _DEFAULTS.get(name, 0 if kind == "int64" else None)
            if kind in ("category", "datetime64[ns, UTC]"):
                data[name] = _column(name, [default] * length)
            else:
                data[name] = np.full(length, default if default is not None else np.nan)
        elif kind == "category":
            data[name] = _text(blocks, name, 1000 if name not in ("run_id", "thread") else 0)
        elif kind == "int64":
            data[name] = _numbers(blocks, name, np.int64)
        elif kind == "float64":
            data[name] = _numbers(blocks, name, np.float64)
        elif kind == "bool":
            data[name] = _numbers(blocks, name, np.uint8).view(bool)
        else:
            data[name] = times(_numbers(blocks, name, np.float64))
    return pd.DataFrame(data, copy=False)


_GETTERS = {name: attrgetter(name) for name in USAGE_SCHEMA}


def usage_from_rows(rows: Sequence[ModelCallUsage]) -> pd.DataFrame:
    """Build the usage frame from `ModelCallUsage` rows, one column at a time."""
    n = len(rows)
    columns: dict[str, Any] = {}
    for name, get in _GETTERS.items():
        kind = USAGE_SCHEMA[name]
        if kind == "int64":
            columns[name] = np.fromiter(map(get, rows), dtype=np.int64, count=n)
        elif kind in ("float64", "datetime64[ns, UTC]"):
            columns[name] = np.array(list(map(get, rows)), dtype=np.float64)  # None -> NaN
        elif kind == "bool":
            columns[name] = np.fromiter(map(get, rows), dtype=bool, count=n)
        else:
            columns[name] = list(map(get, rows))
    return usage_from_columns(columns, length=n)
