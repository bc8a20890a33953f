"""``agent.map(..., batch_api=True)``: the rows of a map through the provider's batch API, at
half price, one batch round per agent step; and ``agent.cancel_batches()``.

Owns `map_batch_api` (the checks made before anything runs, the agent with its batched model,
the rows run by `_rounds.Rounds`, the frame) and `cancel_batches`. A row is the local path's
(`_rows.one_row`: settled threads skipped, paused rows reported, interrupted ones continued), so
a row means the same through a batch as live; the frame has the local path's columns, and a row
whose request waits in a batch, or whose batch ended without running it, gets the status
``submitted``, ``in_progress``, ``expired`` or ``cancelled``. See docs/batch_api.md.

Imports pandas, the core (agent, sync, store, usage, models' shapes), `_rows`, `_rounds` and
`_batch_record`.
"""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..agent import Agent
from ..approvals import Decisions
from ..exceptions import UserError
from ..models.base import Model
from ..models.fallback import FallbackModel
from ..usage import Usage
from ._batch_record import BatchRecord, record_thread
from ._rounds import Rounds
from ._rows import batch_frame, checked_inputs, fingerprint, one_row

__all__ = ["cancel_batches", "map_batch_api"]

STOPPED = ("submitted", "in_progress")
"""A row's status while its request waits in a batch (the map returned first: ``wait=False``)."""


def _prefix(agent: Agent, thread_prefix: str | None) -> str:
    return thread_prefix if thread_prefix is not None else f"batch-{fingerprint(agent)}"


def _checked(poll_s: Any, wait: Any, decisions: Any) -> dict[Any, Decisions]:
    if isinstance(poll_s, bool) or not isinstance(poll_s, (int, float)) or not poll_s > 0 or math.isinf(poll_s):
        raise UserError(f"poll_s is seconds between polls of a batch (a number > 0), got {poll_s!r}")
    if not isinstance(wait, bool):
        raise UserError(f"wait is True (wait for the batches to end) or False (submit and return), got {wait!r}")
    if decisions is None:
        return {}
    if not isinstance(decisions, Mapping) or not all(isinstance(d, Decisions) for d in decisions.values()):
        raise UserError("decisions= maps a row (its index label, or its thread id) to a nbagent.Decisions")
    return dict(decisions)


def _batched(agent: Agent, rounds: Rounds) -> Agent:
    """A copy of `agent` whose model answers through `rounds` (its threads, store and tools are
    `agent`'s own).

    Raises:
        UserError: the model has no batch API, or the agent would make a call the batch cannot
            carry (a compaction summarizer of its own, `Compaction.native()`).
    """
    model: Model = agent.model
    if isinstance(model, FallbackModel):
        raise UserError("batch_api=True takes one model: a FallbackModel cannot fall back inside a provider's batch "
                        "(its models answer in other batches, or live). Map with one of its models")
    batched = model.batched(rounds)
    if batched is None:
        raise UserError(
            f"batch_api=True needs a model whose provider has a batch API (OpenAIModel, OpenAIResponsesModel or "
            f"AnthropicModel); {model!r} has none. Nothing was submitted; run the map without batch_api=True")
    compaction = agent.compaction
    # Anthropic's native context management is a request parameter (it goes in the batch line);
    # OpenAI's native compaction and a summarizer of its own are calls of their own, live.
    if compaction is not None and ((compaction.policy == "native" and model.native_compaction)
                                   or compaction.summarizer is not None):
        raise UserError("batch_api=True sends every model call through the batch; this agent's compaction would "
                        "call a model live (Compaction.native() on the Responses API, or a summarizer of its own): "
                        "use Compaction() with the agent's own model, or none")
    clone = copy.copy(agent)
    clone.model = batched  # Agent.__setattr__: a config of its own
    return clone


async def _rows_of(agent: Agent, rounds: Rounds, prompts: list[str | None], threads: list[str],
                   decided: list[Decisions | None]) -> list[dict[str, Any]]:
    def job(i: int) -> Any:
        return lambda: one_row(agent, prompts[i], threads[i], decided[i])

    outcomes = await rounds.run([(threads[i], job(i)) for i in range(len(threads))])
    rows = []
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, asyncio.CancelledError):  # its request waits in a batch: wait=False
            outcome = await _waiting_row(agent, threads[i], rounds.status.get(threads[i], "in_progress"))
        elif isinstance(outcome, BaseException):
            raise outcome
        elif outcome["status"] == "failed" and rounds.status.get(threads[i]) in ("expired", "cancelled"):
            outcome["status"] = rounds.status[threads[i]]
        rows.append(outcome)
    return rows


async def _waiting_row(agent: Agent, thread: str, status: str) -> dict[str, Any]:
    """The row of a thread whose request waits in a batch: what its stored steps cost so far."""
    loaded = await agent.store.load(thread)
    total = Usage.of(list(loaded.usage) if loaded is not None else [])
    return {"output": None, "status": status, "error": None, "input_tokens": total.input_tokens,
            "output_tokens": total.output_tokens, "cost": total.cost_total, "duration_s": None,
            "steps": len(total.calls), "thread": thread, "run_id": loaded.meta.run_id if loaded else None,
            "skipped": False}


async def _map(agent: Agent, prompts: list[str | None], threads: list[str], decided: list[Decisions | None],
               prefix: str, wait: bool, poll_s: float, progress: bool, desc: str | None) -> list[dict[str, Any]]:
    record = BatchRecord(agent.store, record_thread(prefix))
    rounds = Rounds(record, wait=wait, poll_s=float(poll_s), progress=progress, desc=desc)
    batched = _batched(agent, rounds)
    assert rounds.wire is not None
    await rounds.wire.probe()  # a server without the API is named before any row runs
    await record.load()
    return await _rows_of(batched, rounds, prompts, threads, decided)


def map_batch_api(
    agent: Agent,
    inputs: Any,
    *,
    wait: bool = True,
    poll_s: float = 30.0,
    decisions: Mapping[Any, Decisions] | None = None,
    thread_prefix: str | None = None,
    progress: bool = True,
    desc: str | None = None,
) -> pd.DataFrame:
    """`nbagent.dataframe.batch` with ``batch_api=True`` (see its docstring and docs/batch_api.md)."""
    allowed = _checked(poll_s, wait, decisions)
    values, index, prompts, threads = checked_inputs(agent, inputs, 1, thread_prefix)
    labels = list(range(len(values))) if isinstance(index, pd.RangeIndex) else list(index)
    decided = [allowed.get(thread, allowed.get(label)) for label, thread in zip(labels, threads, strict=True)]
    from .._sync import run_sync

    rows = run_sync(lambda: _map(agent, prompts, threads, decided, _prefix(agent, thread_prefix), wait, poll_s,
                                 progress, desc))
    return batch_frame(values, index, rows)


def cancel_batches(agent: Agent, *, thread_prefix: str | None = None) -> pd.DataFrame:
    """Cancel the provider batches of ``agent.map(..., batch_api=True)`` still in flight.

    See `Agent.cancel_batches`. Returns one row per batch of the map's record: ``batch_id``,
    ``status`` (the provider's, after the cancel), ``requests``.
    """
    from .._sync import run_sync

    async def cancel() -> list[dict[str, Any]]:
        record = BatchRecord(agent.store, record_thread(_prefix(agent, thread_prefix)))
        rounds = Rounds(record, wait=False, poll_s=1.0, progress=False, desc=None)
        batched = _batched(agent, rounds)
        del batched
        assert rounds.wire is not None
        await record.load()
        out = []
        for entry in list(record.entries.values()):
            if entry.id is None or entry.api != rounds.wire.api:
                continue
            state = await rounds.wire.cancel(entry.id)
            out.append({"batch_id": entry.id, "status": state.status, "requests": len(entry.rows)})
        return out

    return pd.DataFrame(run_sync(cancel), columns=["batch_id", "status", "requests"])
