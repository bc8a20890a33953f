"""Batch runs: many independent conversations, concurrently, into one DataFrame.

Owns `batch` and the deterministic thread ids that make a re-run skip finished rows;
imports pandas, the core (agent, store, sync) and ``tqdm.auto`` (only when a progress bar is
shown). Rate limits are the model's business: each row's model calls go through the agent's
`Retry` (which honours ``Retry-After``); the batch only bounds how many rows run at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..agent import Agent
from ..approvals import PendingCall
from ..exceptions import UserError
from ..store.meta import ThreadMeta
from ..usage import ModelCallUsage, Usage
from ._columns import categorical, strings

__all__ = ["BATCH_COLUMNS", "batch", "batch_thread_ids", "output_frame"]

BATCH_COLUMNS = (
    "input",
    "output",
    "status",
    "error",
    "input_tokens",
    "output_tokens",
    "cost",
    "duration_s",
    "steps",
    "thread",
    "run_id",
    "skipped",
)
"""Columns of the frame `batch` returns."""


def _fingerprint(agent: Agent) -> str:
    model = agent.model
    spec = [
        agent.name,
        getattr(model, "provider", None),
        getattr(model, "model_name", None),
        agent.system,
        sorted(agent.tools),
    ]
    if agent.output is not None:  # another output type is another batch (text agents' ids unchanged)
        spec.append(agent.output.tool.parameters)
    if agent.tool_sources:  # MCP servers & co. (their tools are not known before a run)
        spec.append([repr(source) for source in agent.tool_sources])
    return hashlib.sha256(json.dumps(spec, default=str).encode()).hexdigest()[:8]


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def batch_thread_ids(
    agent: Agent, prompts: list[str | None], keys: list[Any], thread_prefix: str | None = None
) -> list[str]:
    """The thread id of each row: ``{prefix}-{key}-{hash of the input}``.

    `keys` are the row positions (or the Series' index labels). The default prefix is
    ``batch-`` plus a hash of the agent's name, model, system prompt, tool names, tool sources and
    output type's schema, so the same cell run again finds its threads, and a changed agent or a changed input
    gets new ones.
    """
    prefix = thread_prefix if thread_prefix is not None else f"batch-{_fingerprint(agent)}"
    return [f"{prefix}-{key}-{_hash(p or '')}" for key, p in zip(keys, prompts, strict=True)]


def _rows_of(inputs: Any) -> tuple[list[Any], pd.Index]:
    if isinstance(inputs, pd.DataFrame):
        if inputs.shape[1] != 1:
            raise UserError(
                "batch() takes one column of inputs: pass df['question'], not the whole DataFrame"
            )
        inputs = inputs.iloc[:, 0]
    if isinstance(inputs, pd.Series):
        return inputs.tolist(), inputs.index
    if isinstance(inputs, (str, bytes)):
        raise UserError("batch() takes a list (or a pandas Series) of inputs, not one string")
    if isinstance(inputs, pd.Index):
        values = inputs.tolist()
    elif isinstance(inputs, Iterable):
        values = list(inputs)
    else:
        raise UserError(f"batch() takes a list or a pandas Series of inputs, got {type(inputs).__name__}")
    return values, pd.RangeIndex(len(values))


def _prompt(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    return value if isinstance(value, str) else str(value)


def _skipped(
    row: dict[str, Any], before: list[ModelCallUsage], meta: ThreadMeta, **fields: Any
) -> dict[str, Any]:
    """A row already settled by an earlier batch: its stored totals, not run again."""
    total = Usage.of(before)
    row.update(input_tokens=total.input_tokens, output_tokens=total.output_tokens, cost=total.cost_total,
               steps=len(before), run_id=meta.run_id, skipped=True, **fields)
    return row


async def _one(agent: Agent, prompt: str | None, thread: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "output": None,
        "status": "failed",
        "error": None,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost": None,
        "duration_s": None,
        "steps": 0,
        "thread": thread,
        "run_id": None,
        "skipped": False,
    }
    if prompt is None:
        row["error"] = "missing input (None / NaN): nothing was run"
        return row
    clock = time.perf_counter()
    try:
        previous = await agent.store.load(thread)
        before: list[ModelCallUsage] = list(previous.usage) if previous is not None else []
        meta = previous.meta if previous is not None else ThreadMeta()
        if previous is not None and meta.status == "completed":
            output = meta.output
            if agent.output is not None:  # a structured answer is stored as JSON: rebuild it
                output = agent.output.load(output)
            return _skipped(row, before, meta, status="completed", output=output)
        open_calls = previous.open_calls() if previous is not None else []
        if open_calls and meta.status == "paused":
            return _skipped(row, before, meta, status="paused", error=_waiting(meta.pending, thread))
        # A thread left failed / stopped / cancelled by an earlier batch continues; a new one starts.
        if open_calls:  # an interrupted run (a crash, a killed kernel): its open calls come first
            result = await agent.resume(thread=thread)
        else:
            has_prompt = previous is not None and any(m.kind == "user" for m in previous.messages)
            result = await agent.run(None if has_prompt else prompt, thread=thread)
    except Exception as exc:  # one row failing never stops the others
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["duration_s"] = time.perf_counter() - clock
        return row
    total = Usage.of(before + result.usage.calls)
    row.update(
        output=result.output,
        status=result.status,
        error=result.error,
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        cost=total.cost_total,
        duration_s=time.perf_counter() - clock,
        steps=len(before) + len(result.usage.calls),
        run_id=result.run_id,
    )
    if result.status == "paused":
        row["error"] = _waiting(result.pending, thread)
    return row


def _waiting(pending: Sequence[PendingCall], thread: str) -> str:
    """A paused row's note: each waiting call as the tool and its arguments (what a person
    decides on; ids are in ``agent.pending(thread)``), then how to go on."""
    calls = []
    for p in pending:
        args = p.args if isinstance(p.args, dict) else {}
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
        calls.append(f"{p.name}({shown[:77] + '...' if len(shown) > 80 else shown})")
    return f"waiting for a decision: {', '.join(calls)}; use agent.resume(thread={thread!r}, ...)"


def _inputs(
    agent: Agent, inputs: Any, concurrency: int, thread_prefix: str | None
) -> tuple[list[Any], pd.Index, list[str | None], list[str]]:
    """The checked inputs of a batch: values, index, prompts and thread ids (local or on a cluster)."""
    if not isinstance(agent, Agent):
        raise UserError(f"batch() needs an Agent, got {type(agent).__name__}")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UserError(f"concurrency must be a positive integer, got {concurrency!r}")
    values, index = _rows_of(inputs)
    prompts = [_prompt(v) for v in values]
    keys = list(range(len(values))) if isinstance(index, pd.RangeIndex) else [str(k) for k in index]
    threads = batch_thread_ids(agent, prompts, keys, thread_prefix)
    if len(set(threads)) != len(threads):
        raise UserError("batch(): the index of the inputs has duplicate labels; reset_index() first")
    for prompt, thread in zip(prompts, threads, strict=True):
        if prompt is not None:  # a row's thread is this agent's: run here, on a cluster, or skipped
            agent._touch(thread)
    return values, index, prompts, threads


def _progress(total: int, enabled: bool, desc: str | None) -> Any:
    # tqdm's own switch, TQDM_DISABLE, is ignored by tqdm.notebook (4.70): honour it here, so a
    # notebook executed to be saved does not keep a bar that says 0% forever.
    if not enabled or os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true"):
        return None
    from tqdm.auto import tqdm

    # smoothing=0: the rate shown is rows / elapsed time. tqdm's default (a moving average
    # updated only when the bar redraws) kept the rate of the first row when the others settled
    # at once, so a re-run read "8/8 [00:00<00:00, 1.21row/s]".
    return tqdm(total=total, desc=desc or "batch", unit="row", smoothing=0)


async def _map_local(
    agent: Agent,
    inputs: Any,
    *,
    concurrency: int = 8,
    thread_prefix: str | None = None,
    progress: bool = True,
    desc: str | None = None,
) -> pd.DataFrame:
    """`batch` on the running loop (the local executor): rows run as `concurrency` workers."""
    values, index, prompts, threads = _inputs(agent, inputs, concurrency, thread_prefix)
    rows: list[dict[str, Any] | None] = [None] * len(values)
    bar = _progress(len(values), progress, desc)
    failed = 0
    positions = iter(range(len(values)))

    async def worker() -> None:
        nonlocal failed
        for i in positions:  # one shared iterator: each row is taken by exactly one worker
            rows[i] = row = await _one(agent, prompts[i], threads[i])
            if bar is not None:
                if row["status"] == "failed":
                    failed += 1
                    bar.set_postfix(failed=failed, refresh=False)
                bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(values)) or 1)))
    finally:
        if bar is not None:
            bar.close()
    return _frame(values, index, [r for r in rows if r is not None])


def _text(values: list[Any], index: pd.Index) -> pd.Series:
    series = (
        strings(values)
        if all(v is None or isinstance(v, str) for v in values)
        else pd.Series(values, dtype=object)
    )
    series.index = index
    return series


def _frame(values: list[Any], index: pd.Index, rows: list[dict[str, Any]]) -> pd.DataFrame:
    col = {name: [r[name] for r in rows] for name in BATCH_COLUMNS if name != "input"}
    data = {
        "input": _text(values, index),
        "output": _text(col["output"], index),
        "status": pd.Series(categorical(col["status"]), index=index),
        "error": _text(col["error"], index),
        "input_tokens": pd.Series(np.array(col["input_tokens"], dtype=np.int64), index=index),
        "output_tokens": pd.Series(np.array(col["output_tokens"], dtype=np.int64), index=index),
        "cost": pd.Series(np.array(col["cost"], dtype=np.float64), index=index),
        "duration_s": pd.Series(np.array(col["duration_s"], dtype=np.float64), index=index),
        "steps": pd.Series(np.array(col["steps"], dtype=np.int64), index=index),
        "thread": _text(col["thread"], index),
        "run_id": _text(col["run_id"], index),
        "skipped": pd.Series(np.array(col["skipped"], dtype=bool), index=index),
    }
    return pd.DataFrame(data, index=index)


def batch(
    agent: Agent,
    inputs: Any,
    *,
    concurrency: int = 8,
    thread_prefix: str | None = None,
    progress: bool = True,
    desc: str | None = None,
    executor: Any = None,
    chunk_size: int | None = None,
    dry_run: bool = False,
    sample: int = 5,
    confirm_over: float | None = None,
) -> Any:
    """Run one independent conversation per input, `concurrency` at a time; return a DataFrame.

    ```python
    answers = agent.map(df["question"], concurrency=8)
    df.join(answers[["output", "cost"]])
    answers = agent.map(df["question"], executor="ray", concurrency=32)     # on a Ray cluster
    answers = agent.map(df["question"], executor=client, concurrency=32)    # a dask Client
    ```

    Args:
        agent: the agent to run.
        inputs: a list, a pandas Series (its index becomes the result's index) or a one-column
            DataFrame of prompts; non-strings are converted with ``str()``, None / NaN rows are
            not run (status ``failed``).
        concurrency: rows running at once (each row's model calls are retried by the agent's
            `Retry`, which honours rate-limit ``Retry-After`` headers).
        thread_prefix: thread ids are ``{thread_prefix}-{row}-{hash of the input}``; default
            ``batch-{hash of the agent's name, model, system prompt and tools}``.
        progress: show a ``tqdm.auto`` progress bar (a widget in notebooks).
        desc: the progress bar's label.
        executor: where the rows run: None or ``"local"`` (this process, on asyncio), ``"ray"``
            (the Ray cluster this process is connected to, `ray.init` first), or a
            ``dask.distributed.Client`` (``"dask"``: the current one). On a cluster the rows go
            to the workers in chunks, each chunk runs with asyncio concurrency, and
            `concurrency` caps the rows running at once across all workers; see docs/scale.md
            for what travels to the workers and how.
        chunk_size: rows per chunk sent to a worker (cluster executors only; default: enough
            chunks that every worker gets several).
        dry_run: run only `sample` rows and return a forecast of the whole batch (an
            `nbagent.evals.Forecast`, as `Agent.estimate` does) instead of the frame.
        sample: how many rows a dry run (or `confirm_over`'s forecast) runs.
        confirm_over: a cost in USD: forecast the batch first (from `sample` rows, as
            `Agent.estimate` does), run it when the forecast's high end stays within it, else
            return an `nbagent.evals.BatchConfirmation`, which shows the forecast with Run and
            Cancel buttons in a notebook (`run()` / `cancel()` in code). An unknown cost (a model
            without a price) asks too.

    Returns:
        One row per input, in input order: ``input``, ``output`` (the final answer or None),
        ``status`` (completed, paused, stopped, failed, cancelled), ``error``, ``input_tokens``,
        ``output_tokens``, ``cost`` (USD, NaN when unknown), ``duration_s``, ``steps`` (model
        calls), ``thread``, ``run_id``, ``skipped``. Tokens and cost count every model call of
        the row's thread.

    One row failing never stops the others: its ``status`` is ``failed`` and ``error`` says why.

    Re-running skips finished rows: each row's thread id is deterministic, so running the same
    batch again (same agent, same store) loads rows whose thread completed (``skipped=True``,
    ``duration_s`` NaN, tokens and cost as stored), reports paused rows as paused (decide them
    with ``agent.resume(thread=...)``), and continues failed / stopped / cancelled threads
    where they ended. A changed input gets a new thread. To run everything again, pass a new
    `thread_prefix`. With a MemoryStore this holds within the session; with a persistent store
    (SQLite) across kernel restarts.

    Works in notebook cells and scripts (runs on nbagent's private loop, no nest_asyncio).
    KeyboardInterrupt (the kernel's stop button) cancels the
    rows still running (on a cluster: the remaining chunks too); finished rows are stored and
    skipped next time.
    """
    if confirm_over is not None:
        if dry_run:
            raise UserError("dry_run=True only forecasts; confirm_over= forecasts, then asks before running")
        from ..evals._confirm import confirm

        return confirm(agent, inputs, confirm_over, sample, {
            "concurrency": concurrency, "thread_prefix": thread_prefix, "progress": progress, "desc": desc,
            "executor": executor, "chunk_size": chunk_size})
    if dry_run:
        from ..evals import estimate

        return estimate(agent, inputs, sample=sample, concurrency=concurrency, thread_prefix=thread_prefix,
                        progress=progress, executor=executor, chunk_size=chunk_size)
    if executor is not None and not (isinstance(executor, str) and executor == "local"):
        from ._executors import run_on_cluster

        return run_on_cluster(
            agent, inputs, executor, concurrency=concurrency, thread_prefix=thread_prefix,
            progress=progress, desc=desc, chunk_size=chunk_size,
        )
    if chunk_size is not None:
        raise UserError("chunk_size= is for cluster executors (executor='ray' or a dask Client); "
                        "the local path runs rows one by one")
    from .._sync import run_sync

    return run_sync(
        lambda: _map_local(
            agent, inputs, concurrency=concurrency, thread_prefix=thread_prefix, progress=progress, desc=desc
        )
    )


def _fields(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # a pydantic model
        return dict(dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return dict(value)
    return {"output": value}


def output_frame(source: Any) -> pd.DataFrame:
    """Structured answers (``Agent(output_type=...)``) as columns: one row per answer, one column
    per field, with the index of `source`.

    ```python
    answers = agent.map(df["report"])                 # output column: Weather objects
    df.join(nbagent.output_frame(answers))            # city, temperature_c columns
    ```

    Args:
        source: ``agent.map``'s DataFrame (its ``output`` column), a Series of answers, or a list of
            `RunResult`s or answers.

    Returns:
        pydantic models and dataclasses give one column per field (nested values stay objects:
        use ``pd.json_normalize`` to flatten them), dicts one column per key, anything else one
        ``output`` column; a row with no answer (failed, paused) is all NaN.
    """
    from ..result import RunResult

    if isinstance(source, pd.DataFrame):
        if "output" not in source.columns:
            raise UserError("output_frame() needs agent.map()'s DataFrame (with an 'output' column), "
                            f"got columns {list(source.columns)[:8]}")
        values, index = list(source["output"]), source.index
    elif isinstance(source, pd.Series):
        values, index = list(source), source.index
    else:
        values = [item.output if isinstance(item, RunResult) else item for item in source]
        index = pd.RangeIndex(len(values))
    return pd.DataFrame([_fields(v) for v in values], index=index)

