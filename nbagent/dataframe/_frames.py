"""The three frames: usage (one row per model call), tool calls (one per tool call), runs (one
per run), each with a sync function and an async twin (``a`` prefix) for code already on a loop.

Owns how rows are derived from results, stored threads and ledgers; imports pandas, the core and
the sibling `_columns` / `_sources` modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import UserError
from ..messages import AssistantMessage, Message, ToolResultMessage, call_results
from ..result import RunResult
from ..store.base import Checkpoint, LedgerEntry, ThreadState
from ..store.meta import ThreadMeta
from ..tracing import is_instrumented, trace_ids
from ..usage import ModelCallUsage
from ._columns import (
    USAGE_SCHEMA,
    categorical,
    empty_usage_frame,
    strings,
    times,
    usage_from_columns,
    usage_from_rows,
)
from ._sources import Loaded, load_now, thread_names

__all__ = [
    "RUN_SCHEMA",
    "TOOL_CALL_SCHEMA",
    "runs_frame",
    "tool_calls_frame",
    "usage_frame",
]

# ---------------------------------------------------------------------------------------- usage


def loaded_rows(loaded: Loaded) -> list[ModelCallUsage]:
    """The usage rows `loaded` holds as objects (those of its results and threads included), in
    the order the usage frame lists them: before the rows of its columns."""
    rows = list(loaded.rows)
    for result in loaded.results:
        rows.extend(result.usage.calls)
    for state in loaded.threads:
        rows.extend(state.usage)
    return rows


def loaded_usage(loaded: Loaded, threads: list[str] | None, extra: pd.DataFrame | None = None) -> pd.DataFrame:
    """The usage frame of `loaded`, only `threads` (None: all); `extra`: columns of the same rows
    (in `loaded_rows` then column order) to add before the filter."""
    rows = loaded_rows(loaded)
    frames = [usage_from_columns(c) for c in loaded.columns]
    if rows or not frames:
        frames.insert(0, usage_from_rows(rows) if rows else empty_usage_frame())
    df = frames[0] if len(frames) == 1 else _concat(frames)
    if extra is not None:
        df = pd.concat([df, extra], axis=1)
    if threads is not None and (loaded.rows or loaded.results or loaded.columns):
        df = df[df["thread"].isin(threads)].reset_index(drop=True)
        df["thread"] = df["thread"].cat.remove_unused_categories()
        df["run_id"] = df["run_id"].cat.remove_unused_categories()
    return df


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    # Concatenating categoricals with different categories gives object columns: re-encode.
    df = pd.concat(frames, ignore_index=True)
    for name, dtype in frames[0].dtypes.items():
        if isinstance(dtype, pd.CategoricalDtype) and not isinstance(df[name].dtype, pd.CategoricalDtype):
            df[name] = categorical(
                df[name].to_numpy(dtype=object), sort_limit=0 if name in ("run_id", "thread") else 1000
            )
    return df


SUMMARY_COLUMNS = ("thread", "step", "model", "input_tokens", "output_tokens", "cost_total", "latency_s", "time")
"""``usage_frame(..., columns="summary")``: what a person asks of a call first, in a cell's width."""


def usage_frame(
    source: Any, *, thread: str | Iterable[str] | None = None, columns: str | Sequence[str] | None = None
) -> pd.DataFrame:
    """One row per model call, as a pandas DataFrame.

    Args:
        source: a `RunResult` (its run), a list of them, a `Usage`, `ModelCallUsage` rows, a
            mapping of usage columns, an `Agent` (its own threads: those it ran, resumed, forked
            or showed in this process, see `Agent.threads`) or a `Store` (every stored thread).
        thread: only these threads (a name or several; with an `Agent`, any of its store's).
        columns: None (every column below), ``"summary"`` (`SUMMARY_COLUMNS`: thread, step,
            model, tokens in and out, cost, latency, time: fits a notebook cell), or the names
            wanted, in that order.

    Columns (dtypes): ``run_id``, ``thread`` (category), ``step`` (int64), ``time``
    (datetime64[ns, UTC], start of the call), ``provider``, ``model`` (category),
    ``input_tokens`` (all prompt tokens, cached included), ``cache_read_tokens``,
    ``cache_write_tokens``, ``output_tokens`` (reasoning included), ``reasoning_tokens`` (int64),
    ``latency_s`` (float64), ``finish_reason`` (category), ``tool_calls`` (int64: calls the
    answer asked for), ``cost_input``, ``cost_output``, ``cost_total`` (float64, USD as priced
    when the call was made; NaN where the price is unknown), ``currency`` (category),
    ``usage_reported`` (bool: False when the provider sent no counts), ``purpose`` (category:
    ``"run"`` for an agent's own calls, ``"compaction"`` for a context summary, ``"eval"`` for
    an evaluator's judge call; rows stored before it existed read ``"run"``), ``replayed`` and
    ``recorded_cost`` (answered from a recording: free), ``batch`` (bool: answered through a
    provider's batch API, ``agent.map(..., batch_api=True)``, at the batch price). With tracing on
    (`nbagent.tracing.instrument`), also ``trace_id`` and ``span_id`` (string: the row's ``chat``
    span, 32 and 16 hex digits; missing for rows this process did not trace).

    Works in a notebook cell (where a loop runs) and in scripts.
    """
    wanted = _wanted_columns(columns)  # a bad name fails before anything is read
    names = thread_names(thread)
    df = loaded_usage(load_now(source, threads=names, usage_only=True), names)
    if is_instrumented() or (wanted is not None and any(c in TRACE_COLUMNS for c in wanted)):
        df = _with_trace_ids(df)
    return df if wanted is None else df[list(wanted)]


TRACE_COLUMNS = ("trace_id", "span_id")
"""The usage frame's columns when tracing is on (`nbagent.tracing`): the ``chat`` span of each
row (32 and 16 hex digits; missing for a row this process did not trace)."""


def _with_trace_ids(df: pd.DataFrame) -> pd.DataFrame:
    seen: dict[tuple[Any, Any, Any], int] = {}
    traces: list[str | None] = []
    spans: list[str | None] = []
    keys = zip(df["run_id"].to_numpy(dtype=object), df["step"].to_numpy(), df["purpose"].to_numpy(dtype=object),
               strict=True)
    for key in keys:
        nth = seen.get(key, 0)
        seen[key] = nth + 1
        found = trace_ids(*key, nth)
        traces.append(found[0] if found else None)
        spans.append(found[1] if found else None)
    df = df.copy()
    df["trace_id"] = pd.array(traces, dtype="string")
    df["span_id"] = pd.array(spans, dtype="string")
    return df


def _wanted_columns(columns: str | Sequence[str] | None) -> Sequence[str] | None:
    if columns is None:
        return None
    if columns == "summary":
        return SUMMARY_COLUMNS
    if isinstance(columns, str):
        columns = [columns]
    unknown = [c for c in columns if c not in USAGE_SCHEMA and c not in TRACE_COLUMNS]
    if unknown:
        raise UserError(f"usage_frame(columns=...): no column {', '.join(map(repr, unknown))}; the columns are "
                        f"{', '.join(USAGE_SCHEMA)} (or columns='summary')")
    return list(columns)


# ---------------------------------------------------------------------------------------- tool calls

TOOL_CALL_SCHEMA: dict[str, str] = {
    "run_id": "category",
    "thread": "category",
    "step": "Int64",
    "call_id": "string",
    "tool": "category",
    "status": "category",
    "is_error": "boolean",
    "duration_s": "float64",
    "args_chars": "int64",
    "args": "object",
    "original_args": "object",
    "result_chars": "Int64",
    "decision": "category",
    "decided_at": "datetime64[ns, UTC]",
    "decided_by": "string",
    "time": "datetime64[ns, UTC]",
}
"""Column -> dtype of the tool-calls frame (``string``: pandas' default string dtype, ``str`` on
pandas 3 and ``object`` on pandas 2)."""


@dataclass
class _ThreadView:
    """What the tool-call rows of one thread are derived from."""

    thread: str
    messages: Sequence[Message]
    steps: list[int | None]
    """Per message, the thread step that wrote it (None when unknown)."""
    run_of_step: dict[int, str]
    ledger: dict[str, LedgerEntry]
    pending: set[str]
    first_index: int = 0
    """Only calls answered (or waiting) at or after this message index are rows."""
    run_id: str | None = None
    """For a RunResult: its run id, used for every row."""
    answered_at: dict[int, float] = field(default_factory=dict)
    """When the model's answer of each step arrived (its usage row: start + latency)."""


def _view_of_result(result: RunResult) -> _ThreadView:
    messages = result.messages
    steps: list[int | None] = []
    assistant_positions: list[int] = []
    n = 0
    for i, m in enumerate(messages):
        if m.kind == "assistant":
            n += 1
            if i >= result.new_message_index:
                assistant_positions.append(i)
        steps.append(n)
    # This run's answers have exact steps in its usage rows (a cut-off answer is never stored,
    # and only ever the last call of a run); its sub-agents' rows are of their own threads.
    own = [c for c in result.usage.calls if c.thread == result.thread]
    for i, call in zip(assistant_positions, own, strict=False):
        steps[i] = call.step
    for i in range(1, len(messages)):
        if messages[i].kind != "assistant":
            steps[i] = steps[i - 1]
    return _ThreadView(
        result.thread,
        messages,
        steps,
        {c.step: c.run_id for c in own},
        dict(result.ledger),
        {p.id for p in result.pending},
        first_index=result.new_message_index,
        run_id=result.run_id,
        answered_at=_answered_at(result.usage.calls),
    )


def _answered_at(rows: Sequence[ModelCallUsage]) -> dict[int, float]:
    return {r.step: r.time + (r.latency_s or 0.0) for r in rows}


def _view_of_thread(state: ThreadState) -> _ThreadView:
    steps: list[int | None] = list(state.message_steps)
    if len(steps) != len(state.messages):
        steps = [None] * len(state.messages)
    return _ThreadView(
        state.thread,
        state.messages,
        steps,
        {u.step: u.run_id for u in state.usage},
        dict(state.ledger),
        {p.id for p in state.meta.pending},
        answered_at=_answered_at(state.usage),
    )


def _decision(result: ToolResultMessage | None) -> str | None:
    """The decision recorded on the result by the run loop; ``auto`` for a call that ran with no
    decision needed (the loop stamps every person's decision, and always-allowed runs)."""
    if result is None:
        return None
    if result.decision is not None:
        return result.decision
    if result.status == "denied":  # threads written before decisions were stamped
        return "denied"
    if result.duration_s is None:  # never executed: it failed before running (or an old client result)
        return "client" if result.status == "done" and not result.is_error else None
    return "auto"


def _tool_rows(view: _ThreadView, out: dict[str, list[Any]]) -> None:
    messages = view.messages
    results = call_results(messages)
    for i, m in enumerate(messages):
        if m.kind != "assistant":
            continue
        assert isinstance(m, AssistantMessage)
        for call in m.tool_calls:
            found = results.get((i, call.id))
            result_index, result = found if found is not None else (None, None)
            if result is None and call.id not in view.pending and i < view.first_index:
                continue
            if result_index is not None and result_index < view.first_index:
                continue
            step = view.steps[i] if i < len(view.steps) else None
            entry = view.ledger.get(call.id)
            out["run_id"].append(view.run_id or (view.run_of_step.get(step) if step is not None else None))
            out["thread"].append(view.thread)
            out["step"].append(step)
            out["call_id"].append(call.id)
            out["tool"].append(call.name)
            out["status"].append(result.status if result is not None else "pending")
            out["is_error"].append(result.is_error if result is not None else None)
            out["duration_s"].append(result.duration_s if result is not None else None)
            out["args_chars"].append(len(call.args_json))
            edited = result.edited_args if result is not None else None
            out["args"].append(dict(edited) if edited is not None else _args_dict(call.args))
            out["original_args"].append(_args_dict(call.args) if edited is not None else None)
            out["result_chars"].append(len(result.content) if result is not None else None)
            out["decision"].append(_decision(result))
            decided_at = result.decided_at if result is not None else None
            if decided_at is None and entry is not None and entry.status == "denied":
                decided_at = entry.time  # older threads: when the resumed run applied the denial
            out["decided_at"].append(decided_at)
            out["decided_by"].append(result.decided_by if result is not None else None)
            # When the call's state was recorded: its outcome (the ledger), else the answer that
            # asked for it (results known without running are committed with it; or it waits).
            out["time"].append(entry.time if entry is not None else view.answered_at.get(step) if step is not None
                               else None)


def _args_dict(args: Any) -> dict[str, Any] | None:
    """A copy of a call's arguments (None when the model's JSON was not an object)."""
    return dict(args) if isinstance(args, Mapping) else None


def _tool_frame(loaded: Loaded, threads: list[str] | None) -> pd.DataFrame:
    out: dict[str, list[Any]] = {name: [] for name in TOOL_CALL_SCHEMA}
    for result in loaded.results:
        _tool_rows(_view_of_result(result), out)
    for state in loaded.threads:
        _tool_rows(_view_of_thread(state), out)
    data: dict[str, Any] = {}
    for name, kind in TOOL_CALL_SCHEMA.items():
        values = out[name]
        if kind == "category":
            data[name] = categorical(values, sort_limit=0 if name in ("run_id", "thread") else 1000)
        elif kind.startswith("datetime"):
            data[name] = times(np.array(values, dtype=np.float64))
        elif kind == "string":
            data[name] = strings(values)
        elif kind == "object":
            column = np.empty(len(values), dtype=object)
            column[:] = values  # dicts kept as they are (not spread into rows)
            data[name] = column
        else:
            data[name] = pd.array(values, dtype=kind)
    df = pd.DataFrame(data)
    if threads is not None:
        df = df[df["thread"].isin(threads)].reset_index(drop=True)
    return df


def tool_calls_frame(source: Any, *, thread: str | Iterable[str] | None = None) -> pd.DataFrame:
    """One row per tool call, as a pandas DataFrame.

    Args:
        source: a `RunResult` (the calls it answered or left waiting), a list of them, an `Agent`
            (its own threads, as for `usage_frame`) or a `Store` (every stored thread).
        thread: only these threads.

    Columns: ``run_id`` (for a RunResult: that run; for stored threads: the run whose model call
    asked for the call), ``thread``, ``step`` (the model call that asked), ``call_id``, ``tool``,
    ``status`` (done, failed, denied, cancelled, interrupted, pending), ``is_error``,
    ``duration_s`` (NaN when it never ran), ``args_chars`` (length of the arguments JSON),
    ``args`` (a dict: the arguments the call ran with, a person's edit included; None when the
    model's JSON was not an object), ``original_args`` (for an edited call only: the model's own
    arguments, as a dict; else None), ``result_chars``, ``decision``, ``decided_at``,
    ``decided_by``, ``time`` (when the call's state was recorded: its outcome; for a call that
    waits, or was answered without running, when the model's answer that asked for it arrived).

    ``decision`` is ``auto`` (ran without asking), ``approved`` (a person approved it),
    ``edited`` (approved with changed arguments), ``denied``, ``repeat-denied`` (the same call as
    one a person denied earlier in the turn, denied again without asking), ``client`` (a client
    supplied the result), ``always-allowed`` (approved by an earlier "always allow"), or missing
    when it cannot be known. The run loop records the decision, its time and who made it
    (``resume(decided_by=...)``; the view records the OS user) on each tool result;
    ``decided_at`` / ``decided_by`` are missing for calls that needed no decision. For threads
    written before decisions were recorded, the decision is inferred (an `Agent` source
    re-evaluates each tool's approval policy on the stored arguments).
    """
    names = thread_names(thread)
    return _tool_frame(load_now(source, threads=names), names)


# ---------------------------------------------------------------------------------------- runs

RUN_SCHEMA: dict[str, str] = {
    "run_id": "string",
    "thread": "string",
    "status": "category",
    "stop_reason": "category",
    "steps": "int64",
    "input_tokens": "int64",
    "cache_read_tokens": "int64",
    "cache_write_tokens": "int64",
    "output_tokens": "int64",
    "reasoning_tokens": "int64",
    "total_tokens": "int64",
    "tool_calls": "int64",
    "cost_total": "float64",
    "started": "datetime64[ns, UTC]",
    "wall_s": "float64",
    "error": "string",
}
"""Column -> dtype of the runs frame."""

_SUMS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "tool_calls",
)


def _run_end(meta: ThreadMeta | None, ends: dict[str, Checkpoint], run_id: str) -> tuple[Any, Any, Any]:
    """How a stored run ended, as (status, stop_reason, error): the latest run of its thread from
    the thread's meta record (also while it goes on), an earlier one from its last checkpoint.
    Unknown (None) for an earlier run whose last checkpoint says ``running`` (its process died;
    a later run could start only after that) or that has none with its id (written before
    nbagent 0.2)."""
    if meta is not None and meta.run_id == run_id:
        return meta.status, meta.stop_reason, meta.error
    end = ends.get(run_id)
    if end is None or end.status in (None, "running"):
        return None, None, None
    return end.status, end.stop_reason, end.error


def _runs_from_usage(
    usage: pd.DataFrame,
    meta_by_thread: dict[str, ThreadMeta],
    ends_by_thread: dict[str, dict[str, Checkpoint]],
    extra: list[dict[str, Any]],
) -> pd.DataFrame:
    out: dict[str, list[Any]] = {name: [] for name in RUN_SCHEMA}
    if len(usage):
        end = usage["time"] + pd.to_timedelta(usage["latency_s"].fillna(0.0), unit="s")
        # A judge's call (purpose "eval") is made after the run, maybe days later: not its time.
        timed = usage["purpose"] != "eval"
        # A step is one of the run's own model calls: a compaction summary or a judge call is
        # not one (its tokens and cost still count).
        frame = usage.assign(_start=usage["time"].where(timed), _end=end.where(timed),
                             _own=(usage["purpose"] == "run").astype("int64"))
        # by thread too: a fork holds copies of its source's runs (same ids, rows of their own)
        grouped = frame.groupby(["thread", "run_id"], observed=True, sort=False)
        agg = grouped.agg(
            steps=("_own", "sum"),
            started=("_start", "min"),
            ended=("_end", "max"),
            first=("time", "min"),
            cost_total=("cost_total", lambda s: s.sum(min_count=1)),
            **{name: (name, "sum") for name in _SUMS},
        )
        agg["started"] = agg["started"].fillna(agg["first"])  # only judges' rows (no time of its own)
        agg = agg.sort_values("started", kind="stable")
        for (thread_name, run_id), row in agg.iterrows():
            thread = str(thread_name)
            status, stop_reason, error = _run_end(meta_by_thread.get(thread), ends_by_thread.get(thread, {}),
                                                  str(run_id))
            out["run_id"].append(str(run_id))
            out["thread"].append(thread)
            out["status"].append(status)
            out["stop_reason"].append(stop_reason)
            out["steps"].append(int(row["steps"]))
            for name in _SUMS:
                out[name].append(int(row[name]))
            out["total_tokens"].append(int(row["input_tokens"]) + int(row["output_tokens"]))
            out["cost_total"].append(row["cost_total"])
            out["started"].append(row["started"].timestamp())
            out["wall_s"].append(np.nan if pd.isna(row["ended"]) else (row["ended"] - row["started"]).total_seconds())
            out["error"].append(error)
    for row in extra:
        for name in RUN_SCHEMA:
            out[name].append(row.get(name))
    return _typed(out, RUN_SCHEMA)


def _typed(out: dict[str, list[Any]], schema: dict[str, str]) -> pd.DataFrame:
    data: dict[str, Any] = {}
    for name, kind in schema.items():
        values = out[name]
        if kind == "category":
            data[name] = categorical(values)
        elif kind.startswith("datetime"):
            data[name] = times(np.array(values, dtype=np.float64))
        elif kind == "string":
            data[name] = strings(values)
        elif kind == "float64":
            data[name] = np.array(values, dtype=np.float64)
        else:
            data[name] = np.array(values, dtype=kind)
    return pd.DataFrame(data)


def _result_row(result: RunResult) -> dict[str, Any]:
    calls = result.usage.calls
    u = result.usage
    started = min((c.time for c in calls), default=None)
    ended = max((c.time + (c.latency_s or 0.0) for c in calls), default=None)
    return {
        "run_id": result.run_id,
        "thread": result.thread,
        "status": result.status,
        "stop_reason": result.stop_reason,
        "steps": result.steps,
        "input_tokens": u.input_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "output_tokens": u.output_tokens,
        "reasoning_tokens": u.reasoning_tokens,
        "total_tokens": u.total_tokens,
        "tool_calls": u.tool_calls,
        "cost_total": u.cost_total,
        "started": started,
        "wall_s": None if started is None or ended is None else ended - started,
        "error": result.error,
    }


def _runs(loaded: Loaded, threads: list[str] | None) -> pd.DataFrame:
    extra = [_result_row(r) for r in loaded.results if threads is None or r.thread in threads]
    if loaded.threads or loaded.columns or loaded.rows:
        usage = loaded_usage(Loaded(threads=loaded.threads, columns=loaded.columns, rows=loaded.rows), threads)
        meta = {t.thread: t.meta for t in loaded.threads}
        return _runs_from_usage(usage, meta, loaded.ends, extra)
    return _runs_from_usage(empty_usage_frame(), {}, {}, extra)


def runs_frame(source: Any, *, thread: str | Iterable[str] | None = None) -> pd.DataFrame:
    """One row per run, as a pandas DataFrame.

    Args:
        source: `RunResult`s (exact), or an `Agent` (its own threads, as for `usage_frame`) /
            a `Store` (every thread): runs rebuilt from the stored usage rows, grouped by run id.
        thread: only these threads.

    Columns: ``run_id``, ``thread``, ``status``, ``stop_reason``, ``steps`` (the run's own model
    calls; a compaction summary is not one, its tokens and cost count), token totals
    (``input_tokens`` ... ``total_tokens``), ``tool_calls`` (asked for), ``cost_total``
    (USD, NaN when no call had a price), ``started`` (first model call), ``wall_s`` (from the
    start of the first model call to the end of the last one: time spent in tools after the last
    call and before the first is not counted, nor a judge's call, ``purpose="eval"``, made
    after the run), ``error``.
    From a store, each run's ``status`` / ``stop_reason`` / ``error`` come from the last
    checkpoint it wrote (`Store.last_checkpoints`; the error's first 500 characters), the
    latest run's from its thread's meta record (also while it goes on); they are missing for a
    run that never ended (its process died) and for the earlier runs of threads written before
    nbagent 0.2 (store format 1), whose checkpoints do not say which run wrote them.
    """
    names = thread_names(thread)
    return _runs(load_now(source, threads=names, ends=True), names)
