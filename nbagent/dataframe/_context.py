"""The context X-ray: each model call's request, by part, as a DataFrame, and its stacked bars.

Owns `context_frame` and `plot_context`; reads the usage rows' ``context`` (the request's
tokens per part and the model's window, which the run records with each call: see
`nbagent.ContextUsage`). Imports pandas; matplotlib only when a plot is drawn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pandas as pd

from ..context import PARTS
from ..exceptions import UserError
from ._frames import loaded_rows, loaded_usage
from ._sources import FRAME_COLUMNS, Loaded, load_now, thread_names

__all__ = ["CONTEXT_COLUMNS", "context_frame", "plot_context"]

CONTEXT_COLUMNS = ("run_id", "thread", "step", "time", "purpose", "model", "input_tokens", "window",
                   "fraction", *PARTS)
"""The context frame's columns, in order: the call (as in the usage frame), the model's
``window`` (Int64; <NA> when unknown), ``fraction`` = input_tokens / window (float64), and the
tokens of each part of the request (Int64: ``system``, ``tools``, ``history``,
``tool_results``, ``latest``; they add up to ``input_tokens``; <NA> for a call whose size was
not recorded)."""

_READ = (*FRAME_COLUMNS, "context")


def _texts(loaded: Loaded) -> list[str | None]:
    """Each row's stored ``context`` text, in the usage frame's row order."""
    texts: list[str | None] = [row.context for row in loaded_rows(loaded)]
    for columns in loaded.columns:
        if "context" in columns:
            texts.extend(columns["context"])
        else:
            length = getattr(columns, "length", None)
            if length is None:  # a plain mapping of lists (an older third-party store)
                length = len(columns[next(iter(columns))]) if columns else 0
            texts.extend([None] * length)
    return texts


def _parts(texts: list[str | None]) -> pd.DataFrame:
    names = ("window", *PARTS)
    values: dict[str, list[Any]] = {name: [] for name in names}
    for text in texts:
        try:
            sized = json.loads(text) if text else None
        except ValueError:
            sized = None
        sized = sized if isinstance(sized, dict) else {}
        for name in names:
            value = sized.get(name)
            values[name].append(value if isinstance(value, int) and not isinstance(value, bool) else None)
    return pd.DataFrame({name: pd.array(v, dtype="Int64") for name, v in values.items()})


def context_frame(source: Any, *, thread: str | Iterable[str] | None = None) -> pd.DataFrame:
    """One row per model call, compaction summaries included (``purpose``), with the tokens of
    each part of its request: what filled the context window, step by step.

    Args:
        source: what `usage_frame` takes: a `RunResult`, a list of them, usage rows, an `Agent`
            (its own threads) or a `Store` (every stored thread).
        thread: only these threads (a name or several).

    Columns: `CONTEXT_COLUMNS`. A compaction's summary call counts the instructions as its
    ``system`` and the transcript it summarises as its ``history``. A call made before nbagent
    recorded request sizes (or by a model nbagent did not size) has <NA> parts; ``fraction`` is
    NaN where the window is unknown.

    ```python
    frame = nbagent.context_frame(agent)
    frame[["step", "purpose", "fraction", "history", "tool_results"]]
    nbagent.dataframe.plot_context(frame)     # stacked bars per call
    ```
    """
    names = thread_names(thread)
    loaded = load_now(source, threads=names, usage_only=True, columns=_READ)
    parts = _parts(_texts(loaded))
    usage = loaded_usage(loaded, names, extra=parts)
    window = usage["window"].astype("Float64")
    usage["fraction"] = (usage["input_tokens"] / window).astype("float64")
    return usage[list(CONTEXT_COLUMNS)]


def plot_context(data: Any, *, thread: str | None = None, ax: Any = None, **kwargs: Any) -> Any:
    """Stacked bars of each model call's request by part (system, tools, history, tool
    results, latest), in call order, for one thread; returns the matplotlib Axes.

    `data` is a `context_frame` or what it takes. Compaction summaries are hatched bars
    labelled ``"<step> summary"``; a dashed line marks the window when it is known. Calls whose
    size was not recorded are left out.
    """
    frame = data if isinstance(data, pd.DataFrame) else context_frame(data)
    threads = frame["thread"].astype(object).dropna().unique()
    if thread is None and len(threads) > 1:
        raise UserError(f"plot_context draws one thread; pass thread=... (one of {', '.join(map(repr, threads))})")
    if thread is not None:
        frame = frame[frame["thread"] == thread]
    frame = frame[frame["latest"].notna()].reset_index(drop=True)
    labels = [f"{s} summary" if p == "compaction" else str(s)
              for s, p in zip(frame["step"], frame["purpose"].astype(object), strict=True)]
    bars = frame[list(PARTS)].astype("float64").set_axis(labels)
    bars.columns = [name.replace("_", " ") for name in PARTS]
    kwargs.setdefault("width", 0.8)
    ax = bars.plot.bar(stacked=True, ax=ax, **kwargs)
    for index, purpose in enumerate(frame["purpose"].astype(object)):
        if purpose == "compaction":
            for container in ax.containers:
                container[index].set_hatch("//")
    windows = frame["window"].dropna().unique()
    if len(windows) == 1:
        ax.axhline(float(windows[0]), linestyle="--", color="grey", linewidth=1, label="window")
    name = thread if thread is not None else (threads[0] if len(threads) else None)
    ax.set_title(f"context by part: {name}" if name else "context by part")
    ax.set_xlabel("step")
    ax.set_ylabel("input tokens")
    ax.legend()
    return ax
