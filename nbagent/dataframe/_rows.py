"""One row of a batch, and the batch's inputs and frame: what every executor shares.

Owns the batch's columns (`BATCH_COLUMNS`), the deterministic thread ids that make a re-run skip
finished rows (`batch_thread_ids`), the checked inputs (`batch_inputs`, `checked_inputs`), one row
run to its end (`one_row`: a settled thread skipped, an interrupted one resumed), the progress
bar (`Progress`: skipped rows leave its rate) and the frame in input order (`batch_frame`). The
local path (`_batch`), the cluster driver (`_executors`) and the workers (`_worker`) all build
on it, so a row means the same wherever it runs.

Imports pandas and numpy, the core (agent, store, usage) and ``tqdm.auto`` (only when a
progress bar is shown); nothing else of this package but `_columns`.
"""

from __future__ import annotations

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
from ..approvals import Decisions, PendingCall
from ..exceptions import UserError
from ..store.meta import ThreadMeta
from ..usage import ModelCallUsage, Usage
from ._columns import categorical, strings

__all__ = ["BATCH_COLUMNS", "Progress", "batch_frame", "batch_inputs", "batch_thread_ids", "checked_inputs",
           "fingerprint", "one_row", "progress_bar", "rows_of"]

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


def fingerprint(agent: Agent) -> str:
    """A hash of what makes the agent's batch another batch (its name, model, system prompt,
    tools, tool sources and output type): the default thread prefix's."""
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
    prefix = thread_prefix if thread_prefix is not None else f"batch-{fingerprint(agent)}"
    return [f"{prefix}-{key}-{_hash(p or '')}" for key, p in zip(keys, prompts, strict=True)]


def rows_of(inputs: Any) -> tuple[list[Any], pd.Index]:
    """The values of a batch's `inputs` and their index (a list's: positions)."""
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


def batch_inputs(inputs: Any) -> pd.Series:
    """The inputs `batch` would run, as one Series indexed by each row's key (which, with the
    input, makes its thread id): its position for a list or a Series with a default
    ``RangeIndex``, else its label.

    Any part of it run as a batch keeps those rows' thread ids, so the whole batch afterwards
    skips them: ``batch(agent, batch_inputs(rows).iloc[[3, 7]])`` runs rows 3 and 7 of
    ``batch(agent, rows)`` (`nbagent.evals.estimate` samples a batch this way).

    Raises:
        UserError: what `batch` refuses: one string, a DataFrame of several columns, no iterable.
    """
    values, index = rows_of(inputs)
    # A RangeIndex keys rows by position; its slices can be RangeIndexes again (iloc[[3, 7]] is
    # range(3, 11, 4)), which would key them 0, 1: the positions are written out instead.
    keys = pd.Index(np.arange(len(values))) if isinstance(index, pd.RangeIndex) else index
    return pd.Series(values, index=keys, dtype=object)


def _prompt(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    return value if isinstance(value, str) else str(value)


def _own(rows: list[ModelCallUsage]) -> list[ModelCallUsage]:
    """The thread's usage rows but a judge's (``purpose="eval"``, appended by `nbagent.evals`
    after the run): the evaluation's cost, not the row's, which would count it again."""
    return [r for r in rows if r.purpose != "eval"]


def _skipped(
    row: dict[str, Any], before: list[ModelCallUsage], meta: ThreadMeta, **fields: Any
) -> dict[str, Any]:
    """A row already settled by an earlier batch: its stored totals, not run again."""
    total = Usage.of(before)
    row.update(input_tokens=total.input_tokens, output_tokens=total.output_tokens, cost=total.cost_total,
               steps=len(before), run_id=meta.run_id, skipped=True, **fields)
    return row


async def one_row(agent: Agent, prompt: str | None, thread: str, decisions: Decisions | None = None) -> dict[str, Any]:
    """Run one row to its end: a settled thread is skipped (its stored totals), a paused one
    reported paused (continued with `decisions` when given), an interrupted or failed one
    continued, a new one started. Never raises: a failure is the row's ``error``."""
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
        before: list[ModelCallUsage] = _own(previous.usage) if previous is not None else []
        meta = previous.meta if previous is not None else ThreadMeta()
        if previous is not None and meta.status == "completed":
            output = meta.output
            if agent.output is not None:  # a structured answer is stored as JSON: rebuild it
                output = agent.output.load(output)
            return _skipped(row, before, meta, status="completed", output=output)
        open_calls = previous.open_calls() if previous is not None else []
        if open_calls and meta.status == "paused" and decisions is None:
            return _skipped(row, before, meta, status="paused", error=_waiting(meta.pending, thread))
        # A thread left failed / stopped / cancelled by an earlier batch continues; a new one starts.
        if open_calls:  # paused and decided, or an interrupted run (a crash, a killed kernel)
            result = await agent.resume(thread=thread, decisions=decisions)
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
        steps=len(before) + sum(1 for c in result.usage.calls if c.thread == thread),  # sub-agents' aside
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


def checked_inputs(
    agent: Agent, inputs: Any, concurrency: int, thread_prefix: str | None
) -> tuple[list[Any], pd.Index, list[str | None], list[str]]:
    """The checked inputs of a batch: values, index, prompts and thread ids (local or on a cluster)."""
    if not isinstance(agent, Agent):
        raise UserError(f"batch() needs an Agent, got {type(agent).__name__}")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UserError(f"concurrency must be a positive integer, got {concurrency!r}")
    values, index = rows_of(inputs)
    prompts = [_prompt(v) for v in values]
    keys = list(range(len(values))) if isinstance(index, pd.RangeIndex) else [str(k) for k in index]
    threads = batch_thread_ids(agent, prompts, keys, thread_prefix)
    if len(set(threads)) != len(threads):
        raise UserError("batch(): the index of the inputs has duplicate labels; reset_index() first")
    for prompt, thread in zip(prompts, threads, strict=True):
        if prompt is not None:  # a row's thread is this agent's: run here, on a cluster, or skipped
            agent._touch(thread)
    return values, index, prompts, threads


def progress_bar(total: int, enabled: bool, desc: str | None) -> Any:
    """A ``tqdm.auto`` bar of `total` rows (None when off: `enabled` False or ``TQDM_DISABLE``)."""
    # tqdm's own switch, TQDM_DISABLE, is ignored by tqdm.notebook (4.70): honour it here, so a
    # notebook executed to be saved does not keep a bar that says 0% forever.
    if not enabled or os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true"):
        return None
    from tqdm.auto import tqdm

    # smoothing=0: the rate shown is rows / elapsed time. tqdm's default (a moving average
    # updated only when the bar redraws) kept the rate of the first row when the others settled
    # at once, so a re-run read "8/8 [00:00<00:00, 1.21row/s]".
    return tqdm(total=total, desc=desc or "batch", unit="row", smoothing=0)


class Progress:
    """A batch's progress: its bar (`progress_bar`) moved once per settled row, whichever report
    of the row comes first, with the failed and skipped rows counted after it.

    A skipped row (settled by an earlier batch: loaded, not run) is not a row run at speed:
    tqdm's rate is the rows past its ``initial`` over the elapsed time, so each skipped row moves
    ``initial`` up with the count. The rate and the time left are the rows that ran ("6/6
    [00:08, 2.1s/row, skipped=2]"), where they said 457 rows/s after two rows loaded at once.
    """

    def __init__(self, total: int, enabled: bool, desc: str | None) -> None:
        self.bar = progress_bar(total, enabled, desc)
        self._seen: set[int] = set()
        self._failed: set[int] = set()
        self._skipped: set[int] = set()

    def settled(self, position: int, row: dict[str, Any] | None = None, *, failed: bool = False) -> None:
        """Row `position` is settled: `row` is its frame row when known (None: a cluster's early
        report, which only says it ended); `failed` marks a row lost with no frame row."""
        bar = self.bar
        if position not in self._seen:
            self._seen.add(position)
            if bar is not None:
                bar.update(1)
        failed = (failed or (row is not None and row["status"] == "failed")) and position not in self._failed
        skipped = row is not None and bool(row["skipped"]) and position not in self._skipped
        if failed:
            self._failed.add(position)
        if skipped:
            self._skipped.add(position)
            if bar is not None:
                bar.initial += 1
        if (failed or skipped) and bar is not None:
            counts = {"failed": len(self._failed), "skipped": len(self._skipped)}
            bar.set_postfix(refresh=False, **{k: v for k, v in counts.items() if v})

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _text(values: list[Any], index: pd.Index) -> pd.Series:
    series = (
        strings(values)
        if all(v is None or isinstance(v, str) for v in values)
        else pd.Series(values, dtype=object)
    )
    series.index = index
    return series


def batch_frame(values: list[Any], index: pd.Index, rows: list[dict[str, Any]]) -> pd.DataFrame:
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


