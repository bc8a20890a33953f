"""Read-only query tools over one DataFrame: `dataframe_tools`.

The model asks structured questions (describe, head, filter, group and aggregate, count values,
sort) and never sends code: a filter is a list of ``{column, op, value}`` conditions, an
aggregation one of `AGGREGATIONS`. Nothing here evaluates a string (no ``eval``, no
``DataFrame.query``), and no tool changes the frame.

Each tool returns a `FrameAnswer`: a pandas frame (``.frame``, what the pandas expression gives)
and a line saying what it is (``.note``: how many rows matched, how many groups...). The model
reads the note and ``frame.to_string()``; the view shows the frame as a table. Results go through
the agent's usual result cap like any tool's.
"""

from __future__ import annotations

import html
import operator
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, Union, get_args

import pandas as pd
from pandas.api import types as ptypes
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..exceptions import ModelRetry, ToolDefinitionError
from ..tools import Tool

__all__ = ["AGGREGATIONS", "MAX_GROUPS", "OPERATORS", "Condition", "FrameAnswer", "dataframe_tools"]

Op = Literal["==", "!=", "<", "<=", ">", ">=", "in", "contains", "isnull", "notnull"]
Agg = Literal["count", "sum", "mean", "median", "min", "max", "std", "nunique"]
OPERATORS: tuple[str, ...] = get_args(Op)
"""The operators a filter condition may use."""
AGGREGATIONS: tuple[str, ...] = get_args(Agg)
"""The aggregations ``{name}_groupby_agg`` offers (pandas' names)."""
MAX_GROUPS = 200
"""The most groups ``{name}_groupby_agg`` returns (the note says how many there were)."""
CELL_CHARS = 100
"""A cell's text is cut to this many characters in what the model reads."""
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,50}")  # + "_value_counts" stays within 64 characters
_MAX_LISTED = 60

Scalar = Union[str, int, float, bool, None]  # noqa: UP007  # pydantic reads it at runtime on 3.10
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


class Condition(BaseModel):
    """One filter condition, e.g. {"column": "city", "op": "==", "value": "Paris"}."""

    model_config = ConfigDict(extra="forbid")
    column: str = Field(description="a column name")
    op: Op = Field(description="the comparison")
    value: Union[Scalar, list[Scalar]] = Field(  # noqa: UP007
        None, description="what to compare with: a list for 'in', text for 'contains', nothing for isnull/notnull")


def _condition(value: Any) -> Condition:
    """A condition the model sent (already checked by the tool's schema) or a dict given to a
    direct call, checked here."""
    if isinstance(value, Condition):
        return value
    try:
        return Condition.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'condition'}: {e['msg']}"
                             for e in exc.errors(include_url=False))
        raise ModelRetry(f"invalid condition {value!r}: {problems}") from None


class FrameAnswer:
    """What a DataFrame tool returns: `frame` (a pandas DataFrame, the pandas expression's result)
    and `note` (one line: the source's name and shape, how many rows matched...).

    ``str()`` is what the model reads: the note, then ``frame.to_string()`` with cells cut to
    `CELL_CHARS` characters. In the view the frame shows as a table.
    """

    __slots__ = ("frame", "note")

    def __init__(self, frame: pd.DataFrame, note: str) -> None:
        self.frame = frame
        self.note = note

    def to_string(self, **_: Any) -> str:
        """The text the model reads (keyword arguments of the usual frame rendering are ignored:
        the rows were already limited by the tool's own ``n`` / ``limit``)."""
        return f"{self.note}\n{self.frame.to_string(max_colwidth=CELL_CHARS)}"

    def _repr_html_(self) -> str:
        table = self.frame._repr_html_() or f"<pre>{html.escape(self.frame.to_string())}</pre>"
        return f"<p>{html.escape(self.note)}</p>{table}"

    def __str__(self) -> str:
        return self.to_string()

    __repr__ = __str__


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


@contextmanager
def _pandas_errors(tool_name: str) -> Iterator[None]:
    """Turn what pandas raises on the model's arguments into an error result the model reads."""
    try:
        yield
    except ModelRetry:
        raise
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise ModelRetry(f"{tool_name}: pandas could not do this ({type(exc).__name__}: {exc}); "
                         "change the arguments") from None


class _Queries:
    """The tools' bodies, over one frame (a reference: they see its current contents)."""

    def __init__(self, df: pd.DataFrame, name: str) -> None:
        self.df = df
        self.name = name

    # ------------------------------------------------------------------ helpers
    def _column(self, column: str) -> Any:
        """The frame's label for `column` (labels that are not text match their ``str``)."""
        labels = list(self.df.columns)
        for label in labels:
            if label == column:
                return label
        for label in labels:
            if str(label) == column:
                return label
        raise ModelRetry(f"{self.name} has no column {column!r}; its columns are: "
                         f"{_listed([str(c) for c in labels])}")

    def _shape(self) -> str:
        rows, cols = self.df.shape
        return f"{self.name}: {rows:,} rows x {cols:,} columns"

    def _coerce(self, series: pd.Series, column: str, value: Any) -> Any:
        """`value` in the column's terms: a number given as text for a numeric column, a date
        given as text for a datetime column, a number for a text column."""
        if isinstance(value, str) and ptypes.is_numeric_dtype(series) and not ptypes.is_bool_dtype(series):
            try:
                return float(value)
            except ValueError:
                raise ModelRetry(f"column {column!r} of {self.name} holds numbers ({series.dtype}); "
                                 f"{value!r} is not a number") from None
        if isinstance(value, str) and ptypes.is_datetime64_any_dtype(series):
            try:
                return pd.Timestamp(value)
            except ValueError:
                raise ModelRetry(f"column {column!r} of {self.name} holds dates ({series.dtype}); "
                                 f"{value!r} is not a date") from None
        if (isinstance(value, (int, float)) and not isinstance(value, bool)
                and ptypes.is_string_dtype(series) and not ptypes.is_object_dtype(series)):
            return str(value)
        return value

    def _mask(self, condition: Condition) -> pd.Series:
        """The rows `condition` keeps; a missing value matches only ``isnull``."""
        label = self._column(condition.column)
        series = self.df[label]
        if isinstance(series, pd.DataFrame):
            raise ModelRetry(f"{self.name} has more than one column named {condition.column!r}")
        op, value = condition.op, condition.value
        if op in ("isnull", "notnull"):
            return series.isna() if op == "isnull" else series.notna()
        present = series.notna()
        if op == "contains":
            if not isinstance(value, str):
                raise ModelRetry(f"'contains' needs a text value, got {value!r}")
            found = series.astype("string").str.contains(value, case=False, regex=False)
            return found.fillna(False).astype(bool) & present
        if op == "in":
            if not isinstance(value, list):
                raise ModelRetry(f"'in' needs a list of values, got {value!r}")
            return series.isin([self._coerce(series, condition.column, v) for v in value]) & present
        if value is None or isinstance(value, list):
            raise ModelRetry(f"{op!r} needs one value, got {value!r} (use 'isnull' / 'notnull' for missing "
                             "values and 'in' for a list)")
        target = self._coerce(series, condition.column, value)
        try:
            compared = _COMPARE[op](series.where(present), target)
        except TypeError as exc:
            raise ModelRetry(f"cannot compare column {condition.column!r} ({series.dtype}) with {value!r} "
                             f"using {op!r}: {exc}") from None
        return compared.fillna(False).astype(bool) & present

    # ------------------------------------------------------------------ the tools
    def describe(self, columns: list[str] | None = None) -> FrameAnswer:
        """Summary statistics of some or all columns.

        Args:
            columns: the columns to describe (default: all of them).
        """
        with _pandas_errors(f"{self.name}_describe"):
            labels = [self._column(c) for c in columns] if columns else list(self.df.columns)
            part = self.df[labels]
            dtypes = ", ".join(f"{c} {t}" for c, t in list(part.dtypes.items())[:_MAX_LISTED])
            return FrameAnswer(part.describe(include="all"), f"{self._shape()}; dtypes: {dtypes}")

    def head(self, n: Annotated[int, Field(ge=1, le=1000)] = 5) -> FrameAnswer:
        """The first rows.

        Args:
            n: how many rows.
        """
        shown = self.df.head(n)
        return FrameAnswer(shown, f"{self._shape()}; head({n})")

    def filter(self, conditions: list[Condition],
               limit: Annotated[int, Field(ge=1, le=1000)] = 50) -> FrameAnswer:
        """The rows where every condition holds.

        Args:
            conditions: all must hold (AND); an empty list keeps every row.
            limit: the most rows returned (the note says how many matched).
        """
        with _pandas_errors(f"{self.name}_filter"):
            mask = pd.Series(True, index=self.df.index)
            for condition in conditions:  # dicts too, when the tool is called directly
                mask &= self._mask(_condition(condition))
            matched = self.df[mask]
            shown = matched.head(limit)
            return FrameAnswer(shown, f"{self._shape()}; matching rows: {len(matched):,}, shown: "
                                      f"{len(shown):,}")

    def groupby_agg(self, by: str | list[str], column: str, agg: Agg) -> FrameAnswer:
        """One column aggregated per group.

        Args:
            by: the column (or columns) to group by.
            column: the column to aggregate.
            agg: the aggregation.
        """
        with _pandas_errors(f"{self.name}_groupby_agg"):
            keys = [self._column(b) for b in ([by] if isinstance(by, str) else by)]
            if not keys:
                raise ModelRetry("'by' needs at least one column")
            label = self._column(column)
            grouped = self.df.groupby(keys[0] if isinstance(by, str) else keys)[label].agg(agg)
            shown = grouped.head(MAX_GROUPS).to_frame()
            cut = f", the first {MAX_GROUPS} shown" if len(grouped) > MAX_GROUPS else ""
            return FrameAnswer(shown, f"{self._shape()}; {agg} of {column!r} by {by!r}: "
                                      f"{len(grouped):,} groups{cut}")

    def value_counts(self, column: str, top: Annotated[int, Field(ge=1, le=1000)] = 20) -> FrameAnswer:
        """The most frequent values of a column.

        Args:
            column: the column whose values are counted.
            top: how many of the most frequent values.
        """
        with _pandas_errors(f"{self.name}_value_counts"):
            series = self.df[self._column(column)]
            counts = series.value_counts()
            shown = counts.head(top).to_frame()
            return FrameAnswer(shown, f"{self._shape()}; {column!r} has {len(counts):,} distinct values and "
                                      f"{int(series.isna().sum()):,} missing; the most frequent {top}")

    def sort_top(self, column: str, n: Annotated[int, Field(ge=1, le=1000)] = 10,
                 ascending: bool = False) -> FrameAnswer:
        """The rows with the largest (or smallest) values of a column.

        Args:
            column: the column to sort by.
            n: how many rows.
            ascending: True for the smallest values first.
        """
        with _pandas_errors(f"{self.name}_sort_top"):
            shown = self.df.sort_values(self._column(column), ascending=ascending).head(n)
            which = "smallest" if ascending else "largest"
            return FrameAnswer(shown, f"{self._shape()}; top {n} by {column!r}, {which} first")


_DESCRIPTIONS = {
    "describe": "Summary statistics of the columns of the DataFrame {name} (pandas describe(include='all')), "
                "with its shape and dtypes. Call it first to learn the column names.",
    "head": "The first n rows of the DataFrame {name}.",
    "filter": "Rows of the DataFrame {name} where every condition holds. A condition is "
              "{{column, op, value}} with op one of " + " ".join(OPERATORS) + "; 'in' takes a list, "
              "'contains' is a case-insensitive substring match, and a missing value matches only "
              "'isnull'. Says how many rows matched and returns at most `limit` of them.",
    "groupby_agg": "Group the DataFrame {name} by the column(s) `by` and aggregate `column` with `agg` "
                   "(one of " + " ".join(AGGREGATIONS) + f"). At most {MAX_GROUPS} groups are returned.",
    "value_counts": "The most frequent values of a column of the DataFrame {name}, with their counts "
                    "(missing values are not counted).",
    "sort_top": "The n rows of the DataFrame {name} with the largest values of `column` (the smallest with "
                "ascending=true); missing values come last.",
}


def dataframe_tools(df: Any, name: str = "sales") -> list[Tool]:
    """Typed, read-only query tools over one DataFrame, for ``Agent(tools=...)``.

    ```python
    tools = dataframe_tools(df, name="sales")
    agent = Agent(model, tools=tools)    # sales_describe, sales_head, sales_filter, ...
    ```

    The tools are ``{name}_describe(columns=None)``, ``{name}_head(n=5)``,
    ``{name}_filter(conditions, limit=50)`` (conditions: a list of ``{column, op, value}``, op one
    of `OPERATORS`), ``{name}_groupby_agg(by, column, agg)`` (agg one of `AGGREGATIONS`),
    ``{name}_value_counts(column, top=20)`` and ``{name}_sort_top(column, n=10, ascending=False)``.
    None runs code, none changes the frame and none needs approval. An unknown column, an
    operator that does not fit the value, or a comparison pandas refuses comes back to the model
    as an error result naming what is valid, and the model can try again.

    The tools keep a reference to `df`, not a copy: they see its current contents (a change made in
    place shows in the next call; ``df = other`` rebinds your name, not the tools' frame).

    Args:
        df: a pandas DataFrame.
        name: the prefix of the tools' names, also how the descriptions call the frame: a
            letter, then up to 50 letters, digits, ``_`` or ``-``.

    Raises:
        ToolDefinitionError: `df` is not a DataFrame, or `name` cannot prefix a tool name.
    """
    if not isinstance(df, pd.DataFrame):
        raise ToolDefinitionError(
            f"dataframe_tools needs a pandas DataFrame, got {type(df).__name__}"
            + (" (a Series: pass series.to_frame())" if isinstance(df, pd.Series) else ""))
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ToolDefinitionError(
            f"dataframe_tools(name={name!r}): the name prefixes the tools' names ({name}_filter...); use a "
            "letter, then up to 50 letters, digits, '_' or '-'")
    queries = _Queries(df, name)
    tools = []
    for kind, description in _DESCRIPTIONS.items():
        made = Tool.from_function(getattr(queries, kind), name=f"{name}_{kind}",
                                  description=description.format(name=name), idempotent=True)
        made.parameters = _inline_refs(made.parameters)
        tools.append(made)
    return tools


def _inline_refs(schema: Any, defs: dict[str, Any] | None = None) -> Any:
    """`schema` with its ``$ref``s replaced by the definitions they name (small models and some
    providers read a flat schema better); the conditions' schema has no recursion."""
    if defs is None and isinstance(schema, dict):
        defs = schema.get("$defs", {})
        schema = {k: v for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and defs is not None:
            return _inline_refs(defs[ref.rsplit("/", 1)[-1]], defs)
        return {k: _inline_refs(v, defs) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_inline_refs(v, defs) for v in schema]
    return schema
