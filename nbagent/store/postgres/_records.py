"""The JSON of `PostgresStore`'s records: what an append sends and what a load decodes.

Owns `append_params` (the parameters of the schema's ``append_step`` / ``begin_thread``
functions, with every record as JSON text) and `decode_thread` (the thread from
``load_thread``'s JSON text). JSON only, never pickle; the records have the same shapes as
SQLite's, so threads copy across as they are; every string goes through `_text`'s encoding of
NUL, which PostgreSQL cannot hold. Imports the messages, usage, the store's shapes and meta
records, `_schema` (the usage columns) and `_text`; nothing of psycopg.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...messages import Message, message_from_dict
from ...usage import ModelCallUsage
from ..base import LedgerEntry, ThreadState, summarize
from ..meta import ThreadMeta, meta_record
from ._schema import USAGE_TYPES
from ._text import display_text, guard_json, might_need_restore, restore

__all__ = ["append_params", "decode_thread"]

_FLOATS = [i for i, kind in enumerate(USAGE_TYPES.values()) if kind == "double precision"]
_DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)


def _finite(value: float | None) -> float | None:
    # JSON (and so jsonb) has no NaN: a NaN cost is stored as NULL, as SQLite does.
    return None if value is None or math.isnan(value) else value


def _usage_json(row: ModelCallUsage) -> list[Any]:
    return [
        row.run_id, None, row.step, row.time, row.provider, row.model, row.input_tokens,
        row.cache_read_tokens, row.cache_write_tokens, row.output_tokens, row.reasoning_tokens,
        _finite(row.latency_s), row.finish_reason, row.tool_calls, _finite(row.cost_input),
        _finite(row.cost_output), _finite(row.cost_total), row.currency, bool(row.usage_reported), row.purpose,
        row.context, bool(row.replayed), _finite(row.recorded_cost), row.agent, row.depth, row.parent_call_id,
        bool(row.batch),
    ]


def _usage_row(values: list[Any]) -> ModelCallUsage:
    for i in _FLOATS:  # JSON gives 1 for 1.0
        if values[i] is not None:
            values[i] = float(values[i])
    row = ModelCallUsage(*values)
    row.replayed = bool(row.replayed)  # NULL in a row written before the column existed
    row.depth = row.depth or 0
    row.batch = bool(row.batch)
    return row


def append_params(
    thread: str, step: int, messages: Sequence[Message], usage: Sequence[ModelCallUsage],
    ledger: Sequence[LedgerEntry], meta: ThreadMeta | Mapping[str, Any] | None, lease_s: float,
) -> tuple[dict[str, Any], dict[str, Any] | None, str | None]:
    """The parameters of ``append_step`` / ``begin_thread`` (all but the version, with a new
    ``write_id`` mark), the meta record, and the run whose lease the write takes (None: none)."""
    record = meta_record(meta)
    tokens_in = sum(r.input_tokens for r in usage)
    tokens_out = sum(r.output_tokens for r in usage)
    costs = [r.cost_total for r in usage if r.cost_total is not None and not math.isnan(r.cost_total)]
    title = next((m.content for m in messages if m.kind == "user"), "")
    status = None if record is None else record.get("status")
    lease_run = None
    if record is not None and status == "running" and record.get("owner") and record.get("run_id"):
        lease_run = str(record["run_id"])
    entries = {e.call_id: e for e in ledger}  # one row per call in one statement
    params = {
        "thread": thread, "step": step, "now": time.time(),
        "n": len(messages), "tin": tokens_in, "tout": tokens_out, "cost": sum(costs) if costs else None,
        "meta": None if record is None else guard_json(record), "status": status,
        "title": display_text(" ".join(title.split())[:80]) if title else "",
        "lease_run": lease_run, "lease_s": float(lease_s), "write_id": os.urandom(8).hex(),
        "msgs": guard_json([m.to_dict() for m in messages]),
        "summary": display_text(summarize(messages[-1])) if messages else "",
        "usage": guard_json([_usage_json(r) for r in usage]) if usage else None,
        "ledger": guard_json([[e.call_id, e.tool, e.args_hash, e.status, e.time] for e in entries.values()])
        if entries else None,
    }
    return params, record, lease_run


def decode_thread(
    thread: str, text: str | bytes, damaged: Callable[[str, str, BaseException], Exception]
) -> ThreadState:
    """The thread from ``load_thread``'s JSON text (see `_schema`; bytes: UTF-8).

    Raises:
        Exception: ``damaged(thread, what, cause)`` for a meta record or a message that does not
            decode (the store's `StoreCorruptError`).
    """
    loaded = json.loads(text)
    if might_need_restore(text):
        loaded = restore(loaded)
    version, meta_data, leased, pairs, usage_rows, ledger_rows = loaded
    try:
        meta = ThreadMeta.from_dict(meta_data)
    except _DECODE_ERRORS as exc:
        raise damaged(thread, "its meta record", exc) from exc
    messages, steps = [], []
    for i, (step, data) in enumerate(pairs):
        try:
            messages.append(message_from_dict(data))
        except _DECODE_ERRORS as exc:
            raise damaged(thread, f"message {i}", exc) from exc
        steps.append(step)
    ledger = {r[0]: LedgerEntry(r[0], r[1], r[2], r[3], float(r[4])) for r in ledger_rows}
    usage = [_usage_row(r) for r in usage_rows]
    return ThreadState(thread, int(version), messages, steps, meta, ledger, usage, leased=bool(leased))
