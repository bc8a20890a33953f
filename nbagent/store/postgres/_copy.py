"""The rows of `PostgresStore.copy` (a fork): the start of a thread copied into a new one.

Owns `copy_rows`, which runs in the caller's transaction on the caller's (asyncio) connection, the same
steps as SQLite's fork copy: the new thread's row, its messages (the last one possibly
replaced), the usage rows of the steps copied, the ledger entries of the copied tool calls, the
checkpoints (with the outcomes of the copied runs, `cut_run_ends`), then the totals. Imports the
exceptions, messages, the store's shapes and summaries, and the checkpoint statements of `_sql`.
"""

from __future__ import annotations

import json
from typing import Any

from ...exceptions import ConflictError, StoreError
from ...messages import Message, message_from_dict
from ..base import Checkpoint, cut_run_ends, short_error, summarize
from ._schema import USAGE_TYPES
from ._sql import CHECKPOINT_NAMES, LAST_CHECKPOINTS
from ._text import display_text, encode_text, guard_json, restore, restore_text

_COLS = ", ".join(c for c in USAGE_TYPES if c != "thread")


class Undecodable(Exception):
    """A stored message that does not decode (the store turns it into `StoreCorruptError`)."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(what)
        self.what, self.cause = what, cause


async def copy_rows(
    conn: Any, s: str, where: str, source: str, target: str, messages: int, last: Message | None,
    record: dict[str, Any], now: float, write_id: str,
) -> int:
    """Copy, in the caller's transaction; returns the new thread's version.

    Raises:
        StoreError: `source` does not exist or has fewer messages.
        ConflictError: `target` exists.
    """
    step, summary = await _rows(conn, s, where, source, target, messages, last, now)
    return await _head(conn, s, source, target, messages, step, summary, record, now, write_id)


async def _rows(
    conn: Any, s: str, where: str, source: str, target: str, messages: int, last: Message | None, now: float,
) -> tuple[int, str]:
    """The copy's new thread row, and its messages, usage rows, ledger entries and checkpoints
    copied; returns the step and the summary of its last message."""
    src = await (await conn.execute(f"SELECT messages FROM {s}.threads WHERE id = %s", (source,))).fetchone()
    if src is None:
        raise StoreError(f"thread {source!r} is not in {where}", path=where)
    if not 0 <= messages <= src[0]:
        raise StoreError(f"thread {source!r} has {src[0]} messages; cannot copy {messages}", path=where)
    created = await (await conn.execute(
        f"INSERT INTO {s}.threads (id, version, created, updated) VALUES (%s, 0, %s, %s) "
        "ON CONFLICT (id) DO NOTHING RETURNING id", (target, now, now),
    )).fetchone()
    if created is None:
        raise ConflictError(f"thread {target!r} already exists in {where}", path=where)
    await conn.execute(
        f"INSERT INTO {s}.messages SELECT %s, seq, step, version, data FROM {s}.messages "
        "WHERE thread = %s AND seq < %s", (target, source, messages),
    )
    step, summary = 0, ""
    if messages:
        step, data = await (await conn.execute(
            f"SELECT step, data::text FROM {s}.messages WHERE thread = %s AND seq = %s", (target, messages - 1)
        )).fetchone()
        if last is not None:
            data = guard_json(last.to_dict())
            await conn.execute(f"UPDATE {s}.messages SET data = %s::jsonb WHERE thread = %s AND seq = %s",
                         (data, target, messages - 1))
        try:
            summary = display_text(summarize(message_from_dict(restore(json.loads(data)))))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Undecodable(f"message {messages - 1}", exc) from exc
    await conn.execute(
        f"INSERT INTO {s}.usage (thread, {_COLS}) SELECT %s, {_COLS} FROM {s}.usage "
        "WHERE thread = %s AND step <= %s ORDER BY id", (target, source, step),
    )
    await conn.execute(
        f"INSERT INTO {s}.ledger SELECT %s, call_id, tool, args_hash, status, time, version FROM {s}.ledger "
        f"WHERE thread = %s AND call_id IN (SELECT c->>'id' FROM {s}.messages m, jsonb_array_elements("
        "CASE WHEN jsonb_typeof(m.data->'tool_calls') = 'array' THEN m.data->'tool_calls' ELSE '[]' END) c "
        "WHERE m.thread = %s)",
        (target, source, target),
    )
    await conn.execute(
        f"INSERT INTO {s}.checkpoints ({CHECKPOINT_NAMES}) SELECT %s, {CHECKPOINT_NAMES.split(', ', 1)[1]} "
        f"FROM {s}.checkpoints WHERE thread = %s AND messages < %s",
        (target, source, messages),
    )
    return step, summary


async def _head(
    conn: Any, s: str, source: str, target: str, messages: int, step: int, summary: str,
    record: dict[str, Any], now: float, write_id: str,
) -> int:
    """The copy's checkpoints for the runs it cut, its thread row's totals and meta, and its own
    checkpoint; returns its version."""
    (version,) = await (await conn.execute(
        f"SELECT coalesce(max(version), 0) + 1 FROM {s}.checkpoints WHERE thread = %s", (target,)
    )).fetchone()
    totals = await (await conn.execute(
        f"SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), sum(cost_total) "
        f"FROM {s}.usage WHERE thread = %s", (target,),
    )).fetchone()
    # The copied runs whose last checkpoint comes later keep how they ended (see `Store.copy`).
    ends = await (await conn.execute(LAST_CHECKPOINTS.replace("{s}", s), (source,))).fetchall()
    history = [Checkpoint(*r) for r in ends]
    held = {r for (r,) in await (await conn.execute(
        f"SELECT run_id FROM {s}.checkpoints WHERE thread = %s AND run_id IS NOT NULL "
        f"UNION SELECT run_id FROM {s}.usage WHERE thread = %s", (target, target))).fetchall()}
    insert = f"INSERT INTO {s}.checkpoints ({CHECKPOINT_NAMES}) VALUES ({', '.join(['%s'] * 13)})"
    for end in cut_run_ends(history, held, messages, step):
        await conn.execute(insert, (target, version, step, now, messages, summary, *totals, end.status, end.run_id,
                              end.stop_reason, end.error))
        version += 1
    title_row = await (await conn.execute(
        f"SELECT data->>'content' FROM {s}.messages WHERE thread = %s AND data->>'kind' = 'user' "
        "ORDER BY seq LIMIT 1", (target,),
    )).fetchone()
    title = display_text(" ".join(restore_text(title_row[0] if title_row and title_row[0] else "").split())[:80])
    status = record.get("status")
    await conn.execute(
        f"UPDATE {s}.threads SET version = %s, step = %s, meta = %s::jsonb, title = %s, status = %s, "
        "messages = %s, input_tokens = %s, output_tokens = %s, cost_total = %s, last_write = %s WHERE id = %s",
        (version, step, guard_json(record), title, status, messages, *totals, write_id, target),
    )
    run = [None if record.get(k) is None else str(record[k]) for k in ("run_id", "stop_reason")]
    await conn.execute(insert, (target, version, step, now, messages, summary, *totals, status, *run,  # the copy's own
                          short_error(None if record.get("error") is None else encode_text(str(record["error"])))))
    return int(version)
