"""Batch runs: many independent conversations, concurrently, into one DataFrame.

Owns `batch` (the local path, on asyncio, and the hand-over to a cluster executor) and
`output_frame`. A row, the inputs, thread ids and the frame are `_rows`'; the cluster driver is
`_executors`, imported only when a cluster is chosen. `batch` only runs rows and returns their
frame: forecasting a batch and asking before it runs (``agent.map(..., dry_run=True)``,
``confirm_over=``) sit above it, in `nbagent.evals`.

Imports pandas, the core (agent, sync, result) and `_rows`. Rate limits are the model's
business: each row's model calls go through the agent's `Retry` (which honours
``Retry-After``); the batch only bounds how many rows run at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..agent import Agent
from ..approvals import Decisions
from ..exceptions import UserError
from ._rows import Progress, batch_frame, checked_inputs, one_row

__all__ = ["batch", "output_frame"]


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
    values, index, prompts, threads = checked_inputs(agent, inputs, concurrency, thread_prefix)
    rows: list[dict[str, Any] | None] = [None] * len(values)
    bar = Progress(len(values), progress, desc)
    positions = iter(range(len(values)))

    async def worker() -> None:
        for i in positions:  # one shared iterator: each row is taken by exactly one worker
            rows[i] = row = await one_row(agent, prompts[i], threads[i])
            bar.settled(i, row)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(values)) or 1)))
    finally:
        bar.close()
    return batch_frame(values, index, [r for r in rows if r is not None])


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
    batch_api: bool = False,
    wait: bool | None = None,
    poll_s: float | None = None,
    decisions: Mapping[Any, Decisions] | None = None,
) -> pd.DataFrame:
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
        batch_api: send the rows' model requests through the provider's batch API, at half
            price: one batch per agent step across all rows, its id kept in the store (the same
            map run again, after a restart too, re-attaches to the batches in flight). See
            docs/batch_api.md. `OpenAIModel`, `OpenAIResponsesModel` and `AnthropicModel`; any
            other model is refused (`UserError`), nothing falls back to live calls. All rows wait
            in each round together (`concurrency` does not apply); local only (no `executor`).
        wait: with `batch_api`: wait for each round's batches, polling every `poll_s` (True,
            default; the kernel's Interrupt stops waiting and leaves the batches running), or
            submit and return at once (False): rows still in a batch get the status
            ``submitted`` / ``in_progress``, and the same call later collects them.
        poll_s: with `batch_api`: seconds between polls of a batch (default 30; the interval
            grows up to 4 times while nothing moves).
        decisions: with `batch_api`: ``{row: Decisions}`` (a row by its index label or its
            thread id) to continue rows that paused for approval, their tools run here and their
            next request going into the next round.

    Returns:
        One row per input, in input order: ``input``, ``output`` (the final answer or None),
        ``status`` (completed, paused, stopped, failed, cancelled; with `batch_api` also
        submitted, in_progress, expired), ``error``, ``input_tokens``,
        ``output_tokens``, ``cost`` (USD, NaN when unknown), ``duration_s``, ``steps`` (model
        calls), ``thread``, ``run_id``, ``skipped``. Tokens and cost count every model call of
        the row's thread but a judge's (``purpose="eval"``: `nbagent.evals` counts those in its
        ``eval_cost``).

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

    To forecast a batch from a sample of its rows first, or to ask before it spends more than a
    limit, use ``agent.map(inputs, dry_run=True)`` or ``agent.map(inputs, confirm_over=1.00)``
    (`nbagent.evals.estimate`, `nbagent.evals.confirm`): they run on top of this.
    """
    if batch_api:
        if executor is not None and not (isinstance(executor, str) and executor == "local"):
            raise UserError("batch_api=True runs the rows here, between the provider's batch rounds: no executor=")
        from ._batch_api import map_batch_api

        return map_batch_api(agent, inputs, wait=True if wait is None else wait,
                             poll_s=30.0 if poll_s is None else poll_s, decisions=decisions,
                             thread_prefix=thread_prefix, progress=progress, desc=desc)
    if wait is not None or poll_s is not None or decisions is not None:
        raise UserError("wait=, poll_s= and decisions= go with batch_api=True")
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

