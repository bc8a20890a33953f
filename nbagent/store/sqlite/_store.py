"""The `SQLiteStore` class: the store protocol on one SQLite file.

Owns the protocol's SQL (load, append, listings, delete, copy, usage columns) and the JSON of
stored records. Imports `_database` (connection, transactions, errors), `_chunks` (usage packing
and columnar reads), `_schema` (the usage columns), the store protocol, messages, usage and
exceptions; ``_chunks.CHUNK_ROWS`` is read at call time.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...exceptions import ConflictError, StoreCorruptError, StoreError
from ...messages import Message, message_from_dict
from ...usage import ModelCallUsage
from .._columnar import UsageColumns, column_names
from ..base import (
    ERROR_KEPT,
    Checkpoint,
    LedgerEntry,
    Store,
    ThreadInfo,
    ThreadState,
    cut_run_ends,
    short_error,
    summarize,
)
from ..meta import ThreadMeta, meta_record
from . import _chunks
from ._chunks import pack_range, pack_tail, read_blocks, tail_floor, tail_span, uncovered
from ._database import Database
from ._schema import CHECKPOINT_COLUMNS, USAGE_COLUMNS

_INSERT_USAGE = (
    f"INSERT INTO usage ({', '.join(USAGE_COLUMNS)}) VALUES ({', '.join('?' * len(USAGE_COLUMNS))})"
)
_UPDATE_THREAD = """
UPDATE threads SET
    version = version + 1,
    step = ?,
    updated = ?,
    messages = messages + ?,
    input_tokens = input_tokens + ?,
    output_tokens = output_tokens + ?,
    cost_total = CASE WHEN ? IS NULL THEN cost_total ELSE coalesce(cost_total, 0.0) + ? END,
    meta = coalesce(?, meta),
    status = CASE WHEN ? THEN ? ELSE status END,
    title = CASE WHEN title = '' THEN ? ELSE title END
WHERE id = ? AND version = ?
RETURNING version, messages, input_tokens, output_tokens, cost_total, status
"""
_INSERT_THREAD = """
INSERT INTO threads (id, version, step, meta, created, updated, title, status, messages,
                     input_tokens, output_tokens, cost_total)
VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING
RETURNING version, messages, input_tokens, output_tokens, cost_total, status
"""
_INSERT_MESSAGE = "INSERT INTO messages (thread, seq, step, version, data) VALUES (?, ?, ?, ?, ?)"
_CHECKPOINT_NAMES = ", ".join(CHECKPOINT_COLUMNS)
_INSERT_CHECKPOINT = f"""
INSERT INTO checkpoints ({_CHECKPOINT_NAMES})
VALUES (?, ?, ?, ?, ?, coalesce(?, (SELECT last_message FROM checkpoints WHERE thread = ?
                                    ORDER BY version DESC LIMIT 1), ''), ?, ?, ?, ?, ?, ?, ?)
"""
"""A checkpoint whose run comes from the meta record written with it; its last message from the
previous checkpoint when it wrote none (the subquery only runs then)."""
_INSERT_CHECKPOINT_OF_STORED_META = f"""
INSERT INTO checkpoints ({_CHECKPOINT_NAMES})
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, r, s, substr(e, 1, {ERROR_KEPT})
FROM (SELECT json_extract(meta, '$.run_id') AS r, json_extract(meta, '$.stop_reason') AS s,
             json_extract(meta, '$.error') AS e FROM threads WHERE id = ?)
"""
"""A checkpoint of messages written without a meta record: its run is the stored record's."""
_LAST_CHECKPOINTS = f"""
SELECT {_CHECKPOINT_NAMES.replace("version", "max(version)", 1)} FROM checkpoints
WHERE thread = ? AND run_id IS NOT NULL GROUP BY run_id ORDER BY 2
"""
"""The last checkpoint of each run (SQLite takes the other columns of a max() row from it)."""
_INSERT_LEDGER = "INSERT OR REPLACE INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?)"


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""A stored record's JSON: what ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``
gives, without building an encoder per call (``dumps`` does, for any non-default option: a few
µs of every append, which encodes each message and the meta record)."""


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _usage_values(row: ModelCallUsage, thread: str) -> tuple[Any, ...]:
    return (
        row.run_id, thread, row.step, row.time, row.provider, row.model, row.input_tokens,
        row.cache_read_tokens, row.cache_write_tokens, row.output_tokens, row.reasoning_tokens,
        row.latency_s, row.finish_reason, row.tool_calls, row.cost_input, row.cost_output,
        row.cost_total, row.currency, int(row.usage_reported), row.purpose,
        row.context, int(row.replayed), row.recorded_cost, row.agent, row.depth, row.parent_call_id,
        int(row.batch),
    )


def _usage_row(values: Sequence[Any]) -> ModelCallUsage:
    row = ModelCallUsage(*values)
    row.usage_reported = bool(row.usage_reported)
    row.replayed = bool(row.replayed)
    row.batch = bool(row.batch)
    return row


def _copy_thread(
    conn: sqlite3.Connection, path: Path, source: str, target: str, messages: int,
    last: Message | None, meta: ThreadMeta | Mapping[str, Any] | None, now: float,
) -> int:
    """The rows of `SQLiteStore.copy`, in the caller's transaction; returns the new version."""
    step, summary = _copy_rows(conn, path, source, target, messages, last, now)
    return _copy_head(conn, source, target, messages, step, summary, meta, now)


def _copy_rows(
    conn: sqlite3.Connection, path: Path, source: str, target: str, messages: int, last: Message | None, now: float,
) -> tuple[int, str]:
    """The copy's new thread row, and its messages, usage rows, ledger entries and checkpoints
    copied; returns the step and the summary of its last message."""
    src = conn.execute("SELECT messages FROM threads WHERE id = ?", (source,)).fetchone()
    if src is None:
        raise StoreError(f"thread {source!r} is not in {path}", path=str(path))
    if not 0 <= messages <= src[0]:
        raise StoreError(f"thread {source!r} has {src[0]} messages; cannot copy {messages}",
                         path=str(path))
    created = conn.execute(
        "INSERT INTO threads (id, version, created, updated) VALUES (?, 0, ?, ?) "
        "ON CONFLICT (id) DO NOTHING", (target, now, now),
    ).rowcount
    if not created:
        raise ConflictError(f"thread {target!r} already exists in {path}", path=str(path))
    conn.execute(
        "INSERT INTO messages SELECT ?, seq, step, version, data FROM messages "
        "WHERE thread = ? AND seq < ?", (target, source, messages),
    )
    step, summary = 0, ""
    if messages:
        step, data = conn.execute(
            "SELECT step, data FROM messages WHERE thread = ? AND seq = ?", (target, messages - 1)
        ).fetchone()
        if last is not None:
            data = _dumps(last.to_dict())
            conn.execute("UPDATE messages SET data = ? WHERE thread = ? AND seq = ?",
                         (data, target, messages - 1))
        try:
            summary = summarize(message_from_dict(json.loads(data)))
        except _DECODE_ERRORS as exc:
            raise _Undecodable(f"message {messages - 1}", exc) from exc
    cols = ", ".join(c for c in USAGE_COLUMNS if c != "thread")
    conn.execute(
        f"INSERT INTO usage (thread, {cols}) SELECT ?, {cols} FROM usage "
        "WHERE thread = ? AND step <= ? ORDER BY id", (target, source, step),
    )
    conn.execute(
        "INSERT INTO ledger SELECT ?, call_id, tool, args_hash, status, time, version FROM ledger "
        "WHERE thread = ? AND call_id IN (SELECT json_extract(c.value, '$.id') FROM messages, "
        "json_each(messages.data, '$.tool_calls') AS c WHERE messages.thread = ?)",
        (target, source, target),
    )
    conn.execute(
        f"INSERT INTO checkpoints ({_CHECKPOINT_NAMES}) SELECT ?, {_CHECKPOINT_NAMES.split(', ', 1)[1]} "
        "FROM checkpoints WHERE thread = ? AND messages < ?", (target, source, messages),
    )
    return step, summary


def _copy_head(
    conn: sqlite3.Connection, source: str, target: str, messages: int, step: int, summary: str,
    meta: ThreadMeta | Mapping[str, Any] | None, now: float,
) -> int:
    """The copy's checkpoints for the runs it cut, its thread row's totals and meta, and its own
    checkpoint; returns its version."""
    version = conn.execute(
        "SELECT coalesce(max(version), 0) + 1 FROM checkpoints WHERE thread = ?", (target,)
    ).fetchone()[0]
    totals = conn.execute(
        "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), sum(cost_total) "
        "FROM usage WHERE thread = ?", (target,),
    ).fetchone()
    # The copied runs whose last checkpoint comes later keep how they ended (see `Store.copy`).
    history = [Checkpoint(*r) for r in conn.execute(_LAST_CHECKPOINTS, (source,))]
    held = {r for (r,) in conn.execute(
        "SELECT run_id FROM checkpoints WHERE thread = ? AND run_id IS NOT NULL "
        "UNION SELECT run_id FROM usage WHERE thread = ?", (target, target))}
    for end in cut_run_ends(history, held, messages, step):
        conn.execute(f"INSERT INTO checkpoints ({_CHECKPOINT_NAMES}) VALUES ({', '.join('?' * 13)})", (
            target, version, step, now, messages, summary, *totals, end.status, end.run_id, end.stop_reason,
            end.error,
        ))
        version += 1
    title_row = conn.execute(
        "SELECT json_extract(data, '$.content') FROM messages WHERE thread = ? "
        "AND json_extract(data, '$.kind') = 'user' ORDER BY seq LIMIT 1", (target,),
    ).fetchone()
    title = " ".join((title_row[0] if title_row else "").split())[:80]
    record = meta_record(meta) or {}
    status = record.get("status")
    conn.execute(
        "UPDATE threads SET version = ?, step = ?, meta = ?, title = ?, status = ?, messages = ?, "
        "input_tokens = ?, output_tokens = ?, cost_total = ? WHERE id = ?",
        (version, step, _dumps(record), title, status, messages, *totals, target),
    )
    conn.execute(  # the copy's own: written with its meta record, as every checkpoint is
        f"INSERT INTO checkpoints ({_CHECKPOINT_NAMES}) VALUES ({', '.join('?' * 13)})",
        (target, version, step, now, messages, summary, *totals, status, _text(record.get("run_id")),
         _text(record.get("stop_reason")), short_error(record.get("error"))),
    )
    return int(version)


class _Undecodable(Exception):
    """A stored row that does not decode (turned into `StoreCorruptError` by the store)."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(what)
        self.what, self.cause = what, cause


_DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError)
"""What decoding a damaged message row raises: JSONDecodeError is a ValueError, an unknown kind
a ValueError, a missing field a KeyError, JSON that is not an object an AttributeError."""


def _decodes(data: str) -> bool:
    try:
        message_from_dict(json.loads(data))
    except _DECODE_ERRORS:
        return False
    return True


def _prune_rows(conn: sqlite3.Connection, cutoff: float) -> list[str]:
    """The rows of `SQLiteStore.prune`, in the caller's transaction: the threads not written since
    `cutoff`, with everything stored for them; returns their ids, sorted."""
    gone = [r[0] for r in conn.execute("SELECT id FROM threads WHERE updated < ? ORDER BY id", (cutoff,))]
    for thread in gone:
        _delete_rows(conn, thread)
    return gone


def _delete_rows(conn: sqlite3.Connection, thread: str) -> bool:
    """A thread's rows, deleted in the caller's transaction; True if it existed."""
    existed = conn.execute("DELETE FROM threads WHERE id = ?", (thread,)).rowcount
    for table in ("messages", "usage", "ledger", "checkpoints", "recordings"):
        conn.execute(f"DELETE FROM {table} WHERE thread = ?", (thread,))
    return bool(existed)


def _needs_packing(conn: sqlite3.Connection) -> bool:
    gaps, tail = uncovered(conn)
    return bool(gaps) or tail_span(conn, tail) >= _chunks.CHUNK_ROWS


def _pack_one(conn: sqlite3.Connection) -> bool:
    """Pack the first gap, else one chunk of the tail; False when there was nothing to pack."""
    gaps, _ = uncovered(conn)
    if gaps:
        pack_range(conn, *gaps[0])
        return True
    return pack_tail(conn, limit=1) > 0


class _Append:
    """One `SQLiteStore.append`: what it writes, prepared before the transaction."""

    __slots__ = ("cost", "data", "ledger", "messages", "meta_json", "now", "record", "run", "status", "step",
                 "thread", "title", "tokens_in", "tokens_out", "usage", "version")

    def __init__(self, thread: str, version: int, step: int, messages: Sequence[Message],
                 usage: Sequence[ModelCallUsage], ledger: Sequence[LedgerEntry],
                 meta: ThreadMeta | Mapping[str, Any] | None) -> None:
        self.thread, self.version, self.step = thread, version, step
        self.messages, self.usage, self.ledger = messages, usage, ledger
        self.now = time.time()
        self.data = [_dumps(m.to_dict()) for m in messages]
        self.record = record = meta_record(meta)
        self.meta_json = None if record is None else _dumps(record)
        self.tokens_in = self.tokens_out = 0
        self.cost: float | None = None
        for r in usage:
            self.tokens_in += r.input_tokens
            self.tokens_out += r.output_tokens
            if r.cost_total is not None:
                self.cost = (self.cost or 0.0) + r.cost_total
        title = next((m.content for m in messages if m.kind == "user"), "")
        self.title = " ".join(title.split())[:80] if title else title
        self.status = None if record is None else record.get("status")
        self.run = None if record is None else (
            _text(record.get("run_id")), _text(record.get("stop_reason")), short_error(record.get("error")))


class SQLiteStore(Store):
    """Threads in one SQLite file: survives kernel restarts; several processes may share it.

    ```python
    store = SQLiteStore("threads.db")        # nothing is opened until the first use
    agent = Agent(model, tools=[...], store=store)
    ```

    The file and its folder are created on first use. A file this version cannot use is never
    written to: not a database, truncated or corrupted → `StoreCorruptError`; written by a newer
    nbagent → `StoreVersionError`; a location that cannot be written → `StoreReadOnlyError`. Each
    error names the file.

    Writers of the same thread are checked optimistically (`ConflictError` for the one that
    loses); different threads are written concurrently. One store object may be used from several
    OS threads (calls are serialised by a lock); each process opens its own connection (a forked
    child too). While another process holds the file's write lock, calls wait up to 15 s without
    blocking the event loop. A thread whose stored rows do not decode raises `StoreCorruptError`
    naming it, and is not written to again.

    Args:
        path: the database file (``str`` or `Path`); ``~`` is expanded.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().absolute()
        self._db = Database(self.path)
        self._damaged: dict[str, str] = {}
        """Threads whose stored rows could not be decoded, with the error: never appended to."""

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """Pickled as its path: another process (a Ray or Dask worker) opens its own connection
        to the same file (``agent.map(..., executor=...)``)."""
        return (SQLiteStore, (str(self.path),))

    async def load(self, thread: str) -> ThreadState | None:
        """The whole thread as one consistent snapshot, or None when it does not exist."""
        def read(conn: sqlite3.Connection) -> tuple[Any, list[Any], list[Any], list[Any]] | None:
            head = conn.execute("SELECT version, meta FROM threads WHERE id = ?", (thread,)).fetchone()
            if head is None:
                return None
            rows = conn.execute(
                "SELECT step, data FROM messages WHERE thread = ? ORDER BY seq", (thread,)
            ).fetchall()
            usage = conn.execute(
                f"SELECT {', '.join(USAGE_COLUMNS)} FROM usage WHERE thread = ? ORDER BY id", (thread,)
            ).fetchall()
            ledger = conn.execute(
                "SELECT call_id, tool, args_hash, status, time FROM ledger WHERE thread = ? "
                "ORDER BY version, time", (thread,)
            ).fetchall()
            return head, rows, usage, ledger

        got = await self._db.run(read, write=False)
        if got is None:
            return None
        head, rows, usage, ledger = got
        try:
            record = json.loads(head[1])
            if not isinstance(record, dict):
                raise TypeError(f"a JSON {type(record).__name__}, not an object")
            meta = ThreadMeta.from_dict(record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise self._damage(thread, "its meta record", exc) from exc
        try:
            loads = json.loads
            messages = [message_from_dict(loads(data)) for _, data in rows]
        except _DECODE_ERRORS as exc:
            seq = next(i for i, (_, data) in enumerate(rows) if not _decodes(data))
            raise self._damage(thread, f"message {seq}", exc) from exc
        return ThreadState(
            thread, head[0], messages, [step for step, _ in rows], meta,
            {r[0]: LedgerEntry(*r) for r in ledger}, [_usage_row(r) for r in usage],
        )

    def _damage(self, thread: str, what: str, exc: BaseException) -> StoreCorruptError:
        """The error for a thread whose rows cannot be decoded; the thread is not written again."""
        message = (
            f"{self.path}: thread {thread!r} is damaged: {what} cannot be read "
            f"({type(exc).__name__}: {exc}). It was not changed, and nbagent will not add to this "
            "thread; the other threads are unaffected. Restore the file from a backup, or delete "
            f"the thread (store.delete_thread({thread!r}))."
        )
        self._damaged[thread] = message
        return StoreCorruptError(message, path=str(self.path))

    async def append(
        self,
        thread: str,
        *,
        version: int,
        step: int,
        messages: Sequence[Message] = (),
        usage: Sequence[ModelCallUsage] = (),
        ledger: Sequence[LedgerEntry] = (),
        meta: ThreadMeta | Mapping[str, Any] | None = None,
    ) -> int:
        """Append one checkpoint in one transaction; see `Store.append`.

        The hot path of every run (two commits per tool step): a few prepared statements, no
        reads besides the ``RETURNING`` of the version check, and no extra look-ups to decide
        whether usage rows need packing (see `Database.tail_floor`).
        """
        if self._damaged and thread in self._damaged:
            raise StoreCorruptError(self._damaged[thread], path=str(self.path))
        write = _Append(thread, version, step, messages, usage, ledger, meta)
        return await self._db.run(lambda conn: self._write(conn, write), write=True)

    def _write(self, conn: sqlite3.Connection, a: _Append) -> int:
        """`append`'s rows, in the caller's transaction; returns the new version."""
        new_version, count, total_in, total_out, total_cost, new_status = self._write_head(conn, a)
        if a.data:
            first = count - len(a.data)
            if len(a.data) == 1:
                conn.execute(_INSERT_MESSAGE, (a.thread, first, a.step, new_version, a.data[0]))
            else:
                conn.executemany(_INSERT_MESSAGE, [(a.thread, first + i, a.step, new_version, d)
                                                   for i, d in enumerate(a.data)])
        last = summarize(a.messages[-1]) if a.messages else None
        if a.run is not None:
            conn.execute(_INSERT_CHECKPOINT, (a.thread, new_version, a.step, a.now, count, last, a.thread,
                                              total_in, total_out, total_cost, new_status, *a.run))
        elif a.messages:
            conn.execute(_INSERT_CHECKPOINT_OF_STORED_META, (a.thread, new_version, a.step, a.now, count, last,
                                                             total_in, total_out, total_cost, new_status, a.thread))
        if a.usage:
            self._write_usage(conn, a)
        if a.ledger:
            rows = [(a.thread, e.call_id, e.tool, e.args_hash, e.status, e.time, new_version) for e in a.ledger]
            if len(rows) == 1:
                conn.execute(_INSERT_LEDGER, rows[0])
            else:
                conn.executemany(_INSERT_LEDGER, rows)
        return int(new_version)

    def _write_head(self, conn: sqlite3.Connection, a: _Append) -> tuple[Any, ...]:
        """The thread's row, created (a new thread) or updated under the version check; its new
        version, message count, totals and status."""
        if a.version == 0:
            # A new thread: its row is created with this checkpoint's totals.
            head = conn.execute(_INSERT_THREAD, (
                a.thread, a.step, a.meta_json or "{}", a.now, a.now, a.title, a.status, len(a.data),
                a.tokens_in, a.tokens_out, a.cost,
            )).fetchall()
            if not head:
                stored = conn.execute("SELECT version FROM threads WHERE id = ?", (a.thread,)).fetchone()[0]
                raise ConflictError(
                    f"thread {a.thread!r} already exists in {self.path} (version {stored}); this "
                    "writer expected a new thread (version 0). Load it again, or use another thread id.",
                    path=str(self.path),
                )
        else:
            head = conn.execute(_UPDATE_THREAD, (
                a.step, a.now, len(a.data), a.tokens_in, a.tokens_out, a.cost, a.cost, a.meta_json,
                a.record is not None, a.status, a.title, a.thread, a.version,
            )).fetchall()
            if not head:
                self._conflict(conn, a.thread, a.version)
        return tuple(head[0])

    def _write_usage(self, conn: sqlite3.Connection, a: _Append) -> None:
        """The usage rows, and packing into chunks when enough are unpacked."""
        if len(a.usage) == 1:
            top = conn.execute(_INSERT_USAGE, _usage_values(a.usage[0], a.thread)).lastrowid
        else:
            conn.executemany(_INSERT_USAGE, [_usage_values(r, a.thread) for r in a.usage])
            top = None
        floor, chunk_rows = self._db.tail_floor, _chunks.CHUNK_ROWS
        if top is None or floor is None or top - floor >= chunk_rows:
            # Amortised: one chunk per CHUNK_ROWS rows appended, never the whole backlog of a
            # file that predates chunks (`usage_columns` packs that).
            pack_tail(conn, limit=len(a.usage) // chunk_rows + 1)
            self._db.tail_floor = tail_floor(conn)

    def _conflict(self, conn: sqlite3.Connection, thread: str, version: int) -> None:
        stored = conn.execute("SELECT version FROM threads WHERE id = ?", (thread,)).fetchone()
        if stored is None:
            raise ConflictError(
                f"thread {thread!r} no longer exists in {self.path} (this writer expected "
                f"version {version}); it was deleted by another writer",
                path=str(self.path),
            )
        raise ConflictError(
            f"thread {thread!r} was changed by another writer: the store has version "
            f"{stored[0]}, this writer expected version {version}. Nothing was written; load "
            "the thread again to continue from what the other writer saved.",
            path=str(self.path),
        )

    async def threads(self) -> list[ThreadInfo]:
        """All stored threads, most recently updated first."""
        rows = await self._db.run(lambda conn: conn.execute(
            "SELECT id, messages, updated, status, title FROM threads ORDER BY updated DESC"
        ).fetchall(), write=False)
        return [ThreadInfo(*r) for r in rows]

    async def checkpoints(self, thread: str) -> list[Checkpoint]:
        """The checkpoints of a thread, oldest first (see `Checkpoint`)."""
        rows = await self._db.run(lambda conn: conn.execute(
            f"SELECT {_CHECKPOINT_NAMES} FROM checkpoints WHERE thread = ? ORDER BY version", (thread,),
        ).fetchall(), write=False)
        return [Checkpoint(*r) for r in rows]

    async def last_checkpoints(self, thread: str) -> dict[str, Checkpoint]:
        """One query for `Store.last_checkpoints`: the last checkpoint of each run, by run id."""
        rows = await self._db.run(lambda conn: conn.execute(_LAST_CHECKPOINTS, (thread,)).fetchall(),
                                  write=False)
        return {r[10]: Checkpoint(*r) for r in rows}

    async def delete_thread(self, thread: str) -> bool:
        """Remove a thread with its messages, usage, ledger, checkpoints and recorded model calls;
        True if it existed."""
        existed = await self._db.run(lambda conn: _delete_rows(conn, thread), write=True)
        self._damaged.pop(thread, None)
        return existed

    async def _prune(self, cutoff: float) -> list[str]:
        gone = await self._db.run(lambda conn: _prune_rows(conn, cutoff), write=True)
        for thread in gone:
            self._damaged.pop(thread, None)
        return gone

    async def copy(
        self,
        source: str,
        target: str,
        *,
        messages: int,
        last: Message | None = None,
        meta: ThreadMeta | Mapping[str, Any] | None = None,
    ) -> int:
        """Copy the start of a thread into a new thread in one transaction; see `Store.copy`."""
        if source in self._damaged:
            raise StoreCorruptError(self._damaged[source], path=str(self.path))
        now = time.time()
        try:
            return await self._db.run(
                lambda conn: _copy_thread(conn, self.path, source, target, messages, last, meta, now), write=True
            )
        except _Undecodable as bad:
            raise self._damage(source, bad.what, bad.cause) from bad.cause

    async def usage_columns(
        self, thread: str | None = None, columns: Sequence[str] | None = None
    ) -> UsageColumns:
        """Stored usage rows as columns, in write order; see `Store.usage_columns`.

        Reads the columnar chunks (one blob per `CHUNK_ROWS` rows) plus the few rows not packed
        yet, so a DataFrame of a million model calls costs a few hundred blob reads instead of a
        million row tuples. A thread with few rows is read through the ``(thread, id)`` index; a
        large one from the chunks it appears in. Rows not yet packed (a file written before
        chunks existed, ranges whose chunk a deletion dropped) are packed first, one chunk per
        short transaction, so other writers are never held up for long.
        """
        names = column_names(columns)
        if thread is None and await self._db.run(_needs_packing, write=False):
            while await self._db.run(_pack_one, write=True):
                pass
        blocks = await self._db.run(lambda conn: read_blocks(conn, names, thread), write=False)
        return UsageColumns(blocks, names)

    async def add_recording(self, thread: str, entry: Mapping[str, Any]) -> None:
        """Keep one recorded model call in the ``recordings`` table; see `Store.add_recording`."""
        data = json.dumps(dict(entry), ensure_ascii=False, default=str)
        await self._db.run(lambda conn: conn.execute(
            "INSERT INTO recordings (thread, data) VALUES (?, ?)", (thread, data)), write=True)

    async def recordings(self, threads: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The recorded model calls of `threads` (None: all); see `Store.recordings`."""
        def read(conn: sqlite3.Connection) -> list[Any]:
            if threads is None:
                return conn.execute("SELECT data FROM recordings ORDER BY id").fetchall()
            return [r for t in threads for r in conn.execute(
                "SELECT data FROM recordings WHERE thread = ? ORDER BY id", (t,)).fetchall()]

        return [json.loads(r[0]) for r in await self._db.run(read, write=False)]

    async def close(self) -> None:
        """Close this process's connection (the store reopens it if used again)."""
        self._db.close()

