"""`SQLiteStore`: threads kept in one SQLite file (standard library `sqlite3`, WAL mode).

Owns the on-disk format and the mapping of SQLite errors onto the `StoreError` family. Imports
the store protocol, messages, usage and exceptions only.

File format 1 (``format_version`` in the ``nbagent_meta`` table covers every JSON record below;
a record's JSON shape only gains fields with defaults, so format 1 files stay readable)::

    nbagent_meta  key, value                     format_version, created_by
    threads       id, version, step, meta JSON, created, updated, title, status,
                  messages, input_tokens, output_tokens, cost_total     (running totals)
    messages      thread, seq, step, version, data JSON (``Message.to_dict()``)
    usage         id, thread, run_id, step, time, provider, model, input_tokens, ...
                  one column per `ModelCallUsage` field, so usage reads column by column
    ledger        thread, call_id, tool, args_hash, status, time, version
    checkpoints   thread, version, step, time, messages, last_message, input_tokens,
                  output_tokens, cost_total, status
    usage_chunks  last_id, first_id, rows, data BLOB        (a columnar copy of the usage table)

The ``usage`` table stays the record (one row per model call, queryable with SQL).
``usage_chunks`` is a derived, columnar copy of it for fast reads (`usage_columns`): each chunk
holds every usage row with ``first_id <= id <= last_id`` (at most `CHUNK_ROWS` rows) as one blob
(format in `nbagent.store._columnar`). Chunks never overlap; rows above the last chunk, or in a
range whose chunk is gone, are read from the ``usage`` table. Triggers on ``usage`` delete the
chunk covering any row inserted, updated or deleted, so a chunk is never stale, even when the file
is changed by hand or by an nbagent that predates chunks; the range is packed again later. The
table and triggers are created in files that lack them (format 1 files written before chunks
existed: their rows are packed on the first `usage_columns` call), and a chunk whose format byte
is unknown is ignored, so the chunks need no format version of their own.

Durability: every `append` is one ``BEGIN IMMEDIATE`` transaction. WAL with
``synchronous=NORMAL`` means a committed append survives the process being killed (``kill -9``,
a kernel restart); a power cut may lose the last few appends but never corrupts the file. An
append's cost does not depend on the thread's length: it inserts the new rows and updates the
thread's row (version, running totals) and never reads or rewrites the history. A tool step
costs two appends (the answer with its usage row and ledger entries, then the result), so every
index is paid for twice per step: files created by this version have no index on
``threads.updated`` (listing the threads sorts them instead); older files keep theirs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..exceptions import ConflictError, StoreCorruptError, StoreError, StoreReadOnlyError, StoreVersionError
from ..messages import Message, message_from_dict
from ..usage import ModelCallUsage
from ._columnar import (
    ColumnBlock,
    UsageColumns,
    column_names,
    decode_chunk,
    encode_chunk,
    encode_rows,
    keep_matching,
)
from .base import FORMAT_VERSION, Checkpoint, LedgerEntry, Store, ThreadInfo, ThreadState, summarize
from .meta import ThreadMeta, meta_record

__all__ = ["CHUNK_ROWS", "USAGE_COLUMNS", "SQLiteStore"]

USAGE_COLUMNS = (
    "run_id", "thread", "step", "time", "provider", "model", "input_tokens", "cache_read_tokens",
    "cache_write_tokens", "output_tokens", "reasoning_tokens", "latency_s", "finish_reason",
    "tool_calls", "cost_input", "cost_output", "cost_total", "currency", "usage_reported",
)
"""The usage table's data columns, in `ModelCallUsage` field order (format 1)."""

_USAGE_TYPES = {
    "run_id": "TEXT", "thread": "TEXT", "step": "INTEGER", "time": "REAL", "provider": "TEXT",
    "model": "TEXT", "input_tokens": "INTEGER", "cache_read_tokens": "INTEGER",
    "cache_write_tokens": "INTEGER", "output_tokens": "INTEGER", "reasoning_tokens": "INTEGER",
    "latency_s": "REAL", "finish_reason": "TEXT", "tool_calls": "INTEGER", "cost_input": "REAL",
    "cost_output": "REAL", "cost_total": "REAL", "currency": "TEXT", "usage_reported": "INTEGER",
}

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS nbagent_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS threads (
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    step INTEGER NOT NULL DEFAULT 0,
    meta TEXT NOT NULL DEFAULT '{{}}',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    status TEXT,
    messages INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_total REAL
);
CREATE TABLE IF NOT EXISTS messages (
    thread TEXT NOT NULL,
    seq INTEGER NOT NULL,
    step INTEGER NOT NULL,
    version INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (thread, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY,
    {", ".join(f"{name} {kind}" for name, kind in _USAGE_TYPES.items())}
);
CREATE INDEX IF NOT EXISTS usage_thread ON usage (thread, id);
CREATE TABLE IF NOT EXISTS ledger (
    thread TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    time REAL NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (thread, call_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    thread TEXT NOT NULL,
    version INTEGER NOT NULL,
    step INTEGER NOT NULL,
    time REAL NOT NULL,
    messages INTEGER NOT NULL,
    last_message TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_total REAL,
    status TEXT,
    PRIMARY KEY (thread, version)
) WITHOUT ROWID;
"""

CHUNK_ROWS = 4096
"""Usage rows per chunk. An append that leaves this many rows unpacked packs them (10-40 ms,
once every 4,096 model calls, inside the append's transaction); a bigger chunk makes that pause
longer, a smaller one makes `usage_columns` handle more blobs."""

_SMALL_THREAD = 4 * CHUNK_ROWS
"""A thread with at most this many usage rows is read through the (thread, id) index."""

_MIN_ID, _MAX_ID = -(2**63), 2**63 - 1


def _drop_chunk(row: str) -> str:
    # The chunk whose range holds the row (ranges never overlap): found through the primary key.
    return (
        "DELETE FROM usage_chunks WHERE last_id = (SELECT min(last_id) FROM usage_chunks "
        f"WHERE last_id >= {row}) AND first_id <= {row};"
    )


_CHUNK_STATEMENTS = (
    """CREATE TABLE IF NOT EXISTS usage_chunks (
    last_id INTEGER PRIMARY KEY,
    first_id INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    data BLOB NOT NULL
)""",
    "CREATE TRIGGER IF NOT EXISTS usage_chunks_on_insert AFTER INSERT ON usage BEGIN "
    f"{_drop_chunk('NEW.id')} END",
    "CREATE TRIGGER IF NOT EXISTS usage_chunks_on_update AFTER UPDATE ON usage BEGIN "
    f"{_drop_chunk('OLD.id')} {_drop_chunk('NEW.id')} END",
    "CREATE TRIGGER IF NOT EXISTS usage_chunks_on_delete AFTER DELETE ON usage BEGIN "
    f"{_drop_chunk('OLD.id')} END",
)
_CHUNK_SCHEMA = "".join(f"{statement};\n" for statement in _CHUNK_STATEMENTS)
_CHUNK_OBJECTS = {
    "usage_chunks", "usage_chunks_on_insert", "usage_chunks_on_update", "usage_chunks_on_delete"
}

_TABLES = {"nbagent_meta", "threads", "messages", "usage", "ledger", "checkpoints"}
_HEADER = b"SQLite format 3\x00"
_BUSY_TIMEOUT_MS = 15_000

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
_INSERT_CHECKPOINT = "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_LEDGER = "INSERT OR REPLACE INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?)"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _usage_values(row: ModelCallUsage, thread: str) -> tuple[Any, ...]:
    return (
        row.run_id, thread, row.step, row.time, row.provider, row.model, row.input_tokens,
        row.cache_read_tokens, row.cache_write_tokens, row.output_tokens, row.reasoning_tokens,
        row.latency_s, row.finish_reason, row.tool_calls, row.cost_input, row.cost_output,
        row.cost_total, row.currency, int(row.usage_reported),
    )


def _usage_row(values: Sequence[Any]) -> ModelCallUsage:
    row = ModelCallUsage(*values)
    row.usage_reported = bool(row.usage_reported)
    return row


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
    OS threads (calls are serialised by a lock); each process opens its own connection.

    Args:
        path: the database file (``str`` or `Path`); ``~`` is expanded.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().absolute()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._inherited: list[sqlite3.Connection] = []
        self._tail_floor: int | None = None
        """A usage id at or below the start of the unpacked tail when last looked (None: look).
        An append whose new row id is less than CHUNK_ROWS above it has nothing to pack, so the
        look-ups are skipped. If it is stale (another writer packed, or dropped the last chunk)
        packing only happens later; reads are right either way (unpacked rows are read from the
        usage table)."""

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ opening
    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self._conn is not None:
            # Opened before a fork: SQLite connections must not cross a fork. Keep the object
            # alive (closing it here could release the parent's locks) and open a fresh one.
            self._inherited.append(self._conn)
        self._conn = None
        self._tail_floor = None
        self._conn = self._open()
        self._pid = os.getpid()
        return self._conn

    def _check_file(self) -> None:
        try:
            self._check_path()
        except PermissionError as exc:
            raise StoreReadOnlyError(
                f"the nbagent store {self.path} cannot be written or read: permission denied ({exc}); "
                "pass store=SQLiteStore(<writable path>) or set NBAGENT_STORE",
                path=str(self.path),
            ) from exc

    def _check_path(self) -> None:
        path = self.path
        if path.is_dir():
            raise StoreError(f"the nbagent store {path} is a folder; give a file path", path=str(path))
        if path.exists():
            size = path.stat().st_size
            with open(path, "rb") as f:
                header = f.read(100)
            if size and (len(header) < 100 or not header.startswith(_HEADER)):
                raise StoreCorruptError(
                    f"{path} is not an nbagent store: it is not a SQLite database "
                    f"({'truncated to ' + str(size) + ' bytes' if size < 100 else 'wrong header'}). "
                    "It was not changed; move it away or pass another path.",
                    path=str(path),
                )
            if size:
                page_size = int.from_bytes(header[16:18], "big")
                page_size = 65536 if page_size == 1 else page_size
                pages = int.from_bytes(header[28:32], "big")
                valid = header[24:28] == header[92:96]
                if valid and pages and size < pages * page_size:
                    raise StoreCorruptError(
                        f"{path} is truncated: {size} bytes, its header says {pages * page_size}. "
                        "It was not changed; restore it from a backup or move it away.",
                        path=str(path),
                    )
            if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
                raise StoreReadOnlyError(
                    f"the nbagent store {path} cannot be written (read-only file or folder); "
                    "pass store=SQLiteStore(<writable path>) or set NBAGENT_STORE",
                    path=str(path),
                )
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreReadOnlyError(
                f"cannot create the folder {path.parent} for the nbagent store {path}: "
                f"{exc.strerror or exc}; pass store=SQLiteStore(<writable path>) or set NBAGENT_STORE",
                path=str(path),
            ) from exc
        if not os.access(path.parent, os.W_OK):
            raise StoreReadOnlyError(
                f"the folder {path.parent} of the nbagent store {path} is read-only; "
                "pass store=SQLiteStore(<writable path>) or set NBAGENT_STORE",
                path=str(path),
            )

    def _open(self) -> sqlite3.Connection:
        self._check_file()
        try:
            conn = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._check_schema(conn)
            # Only now, once the file is known to be ours, may anything be written to it.
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch to WAL mode (got {mode!r})",
                                 path=str(self.path))
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc) from exc
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            # Idempotent, so two processes creating the same new file at once both succeed.
            conn.executescript(
                "BEGIN IMMEDIATE;" + _SCHEMA + _CHUNK_SCHEMA
                + f"INSERT OR IGNORE INTO nbagent_meta VALUES ('format_version', '{FORMAT_VERSION}');"
                "INSERT OR IGNORE INTO nbagent_meta VALUES ('created_by', 'nbagent');"
                "COMMIT;"
            )
            return
        if "nbagent_meta" not in tables:
            raise StoreCorruptError(
                f"{self.path} is a SQLite database but not an nbagent store (tables: "
                f"{', '.join(sorted(tables))}). It was not changed; pass another path.",
                path=str(self.path),
            )
        row = conn.execute("SELECT value FROM nbagent_meta WHERE key = 'format_version'").fetchone()
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            raise StoreCorruptError(
                f"{self.path}: the nbagent store has no valid format_version ({row!r}); it was not changed",
                path=str(self.path),
            ) from None
        if version > FORMAT_VERSION:
            raise StoreVersionError(
                f"{self.path} was written by a newer nbagent (store format {version}; this nbagent "
                f"reads formats up to {FORMAT_VERSION}). Upgrade nbagent to use it; it was not changed.",
                path=str(self.path),
            )
        missing = _TABLES - tables
        if missing:
            raise StoreCorruptError(
                f"{self.path}: the nbagent store is missing tables {sorted(missing)}; it was not changed",
                path=str(self.path),
            )
        if not _CHUNK_OBJECTS <= self._schema_names(conn):
            self._add_chunks(conn)

    @staticmethod
    def _schema_names(conn: sqlite3.Connection) -> set[str]:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        return {r[0] for r in rows}

    def _add_chunks(self, conn: sqlite3.Connection) -> None:
        """Give a file written before usage chunks existed the chunk table and its triggers."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            names = self._schema_names(conn)  # again: another process may have done it meanwhile
            if not _CHUNK_OBJECTS <= names:
                if "usage_chunks" in names:
                    # A trigger was dropped: the chunks may no longer match the rows.
                    conn.execute("DELETE FROM usage_chunks")
                for statement in _CHUNK_STATEMENTS:
                    conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _error(self, exc: sqlite3.Error) -> StoreError:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        path = str(self.path)
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return StoreCorruptError(
                f"{path} is corrupted or not an nbagent store ({exc}). It was not changed; restore it "
                "from a backup or move it away.", path=path)
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
            return StoreReadOnlyError(f"the nbagent store {path} cannot be written ({exc})", path=path)
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return StoreError(
                f"the nbagent store {path} stayed locked by another writer for more than "
                f"{_BUSY_TIMEOUT_MS / 1000:.0f} s ({exc})", path=path)
        return StoreError(f"the nbagent store {path} failed: {exc}", path=path)

    @contextmanager
    def _transaction(self, immediate: bool) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; SQLite errors become `StoreError`s naming the file."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
                try:
                    yield conn
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    # ------------------------------------------------------------------ the protocol
    async def load(self, thread: str) -> ThreadState | None:
        """The whole thread as one consistent snapshot, or None when it does not exist."""
        with self._transaction(immediate=False) as conn:
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
        loads = json.loads
        messages = [message_from_dict(loads(data)) for _, data in rows]
        return ThreadState(
            thread, head[0], messages, [step for step, _ in rows], ThreadMeta.from_dict(loads(head[1])),
            {r[0]: LedgerEntry(*r) for r in ledger}, [_usage_row(r) for r in usage],
        )

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
        whether usage rows need packing (see `_tail_floor`).
        """
        now = time.time()
        count_new = len(messages)
        data = [_dumps(m.to_dict()) for m in messages]
        record = meta_record(meta)
        meta_json = None if record is None else _dumps(record)
        tokens_in = tokens_out = 0
        cost = None
        for r in usage:
            tokens_in += r.input_tokens
            tokens_out += r.output_tokens
            if r.cost_total is not None:
                cost = (cost or 0.0) + r.cost_total
        title = next((m.content for m in messages if m.kind == "user"), "")  # type: ignore[union-attr]
        if title:
            title = " ".join(title.split())[:80]
        status = None if record is None else record.get("status")
        with self._transaction(immediate=True) as conn:
            if version == 0:
                # A new thread: its row is created with this checkpoint's totals.
                head = conn.execute(_INSERT_THREAD, (
                    thread, step, meta_json or "{}", now, now, title, status, count_new,
                    tokens_in, tokens_out, cost,
                )).fetchall()
                if not head:
                    stored = conn.execute("SELECT version FROM threads WHERE id = ?",
                                          (thread,)).fetchone()[0]
                    raise ConflictError(
                        f"thread {thread!r} already exists in {self.path} (version {stored}); this "
                        "writer expected a new thread (version 0). Load it again, or use another "
                        "thread id.",
                        path=str(self.path),
                    )
            else:
                head = conn.execute(_UPDATE_THREAD, (
                    step, now, count_new, tokens_in, tokens_out, cost, cost, meta_json,
                    meta is not None, status, title, thread, version,
                )).fetchall()
                if not head:
                    self._conflict(conn, thread, version)
            new_version, count, total_in, total_out, total_cost, status = head[0]
            if count_new:
                first = count - count_new
                if count_new == 1:
                    conn.execute(_INSERT_MESSAGE, (thread, first, step, new_version, data[0]))
                else:
                    conn.executemany(
                        _INSERT_MESSAGE,
                        [(thread, first + i, step, new_version, d) for i, d in enumerate(data)],
                    )
                conn.execute(_INSERT_CHECKPOINT, (
                    thread, new_version, step, now, count, summarize(messages[-1]), total_in,
                    total_out, total_cost, status,
                ))
            if usage:
                if len(usage) == 1:
                    top = conn.execute(_INSERT_USAGE, _usage_values(usage[0], thread)).lastrowid
                else:
                    conn.executemany(_INSERT_USAGE, [_usage_values(r, thread) for r in usage])
                    top = None
                floor = self._tail_floor
                if top is None or floor is None or top - floor >= CHUNK_ROWS:
                    # Amortised: one chunk per CHUNK_ROWS rows appended, never the whole
                    # backlog of a file that predates chunks (`usage_columns` packs that).
                    _pack_tail(conn, limit=len(usage) // CHUNK_ROWS + 1)
                    self._tail_floor = _tail_floor(conn)
            if ledger:
                if len(ledger) == 1:
                    e = ledger[0]
                    conn.execute(_INSERT_LEDGER, (thread, e.call_id, e.tool, e.args_hash, e.status,
                                                  e.time, new_version))
                else:
                    conn.executemany(_INSERT_LEDGER, [
                        (thread, e.call_id, e.tool, e.args_hash, e.status, e.time, new_version)
                        for e in ledger
                    ])
        return int(new_version)

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
        with self._transaction(immediate=False) as conn:
            rows = conn.execute(
                "SELECT id, messages, updated, status, title FROM threads ORDER BY updated DESC"
            ).fetchall()
        return [ThreadInfo(*r) for r in rows]

    async def checkpoints(self, thread: str) -> list[Checkpoint]:
        """The checkpoints of a thread (one per append that wrote messages), oldest first."""
        with self._transaction(immediate=False) as conn:
            rows = conn.execute(
                "SELECT thread, version, step, time, messages, last_message, input_tokens, "
                "output_tokens, cost_total, status FROM checkpoints WHERE thread = ? ORDER BY version",
                (thread,),
            ).fetchall()
        return [Checkpoint(*r) for r in rows]

    async def delete(self, thread: str) -> bool:
        """Remove a thread with its messages, usage, ledger and checkpoints; True if it existed."""
        with self._transaction(immediate=True) as conn:
            existed = conn.execute("DELETE FROM threads WHERE id = ?", (thread,)).rowcount
            for table in ("messages", "usage", "ledger", "checkpoints"):
                conn.execute(f"DELETE FROM {table} WHERE thread = ?", (thread,))
        return bool(existed)

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
        now = time.time()
        with self._transaction(immediate=True) as conn:
            src = conn.execute("SELECT messages FROM threads WHERE id = ?", (source,)).fetchone()
            if src is None:
                raise StoreError(f"thread {source!r} is not in {self.path}", path=str(self.path))
            if not 0 <= messages <= src[0]:
                raise StoreError(f"thread {source!r} has {src[0]} messages; cannot copy {messages}",
                                 path=str(self.path))
            created = conn.execute(
                "INSERT INTO threads (id, version, created, updated) VALUES (?, 0, ?, ?) "
                "ON CONFLICT (id) DO NOTHING", (target, now, now),
            ).rowcount
            if not created:
                raise ConflictError(f"thread {target!r} already exists in {self.path}", path=str(self.path))
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
                summary = summarize(message_from_dict(json.loads(data)))
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
                "INSERT INTO checkpoints SELECT ?, version, step, time, messages, last_message, "
                "input_tokens, output_tokens, cost_total, status FROM checkpoints "
                "WHERE thread = ? AND messages < ?", (target, source, messages),
            )
            version = conn.execute(
                "SELECT coalesce(max(version), 0) + 1 FROM checkpoints WHERE thread = ?", (target,)
            ).fetchone()[0]
            totals = conn.execute(
                "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), sum(cost_total) "
                "FROM usage WHERE thread = ?", (target,),
            ).fetchone()
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
            if messages:
                conn.execute(
                    "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (target, version, step, now, messages, summary, *totals, status),
                )
        return int(version)

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
        if thread is None and self._needs_packing():
            self._pack_all()
        with self._transaction(immediate=False) as conn:
            blocks = _read_blocks(conn, names, thread)
        return UsageColumns(blocks, names)

    def _needs_packing(self) -> bool:
        with self._transaction(immediate=False) as conn:
            gaps, tail = _uncovered(conn)
            return bool(gaps) or _tail_span(conn, tail) >= CHUNK_ROWS

    def _pack_all(self) -> None:
        packed = True
        while packed:
            with self._transaction(immediate=True) as conn:
                gaps, _ = _uncovered(conn)
                if gaps:
                    _pack_range(conn, *gaps[0])
                else:
                    packed = _pack_tail(conn, limit=1) > 0

    async def close(self) -> None:
        """Close this process's connection (the store reopens it if used again)."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()


# ---------------------------------------------------------------------------------------- usage chunks
_USAGE_SELECT = ", ".join(USAGE_COLUMNS)


def _uncovered(conn: sqlite3.Connection) -> tuple[list[tuple[int, int]], int]:
    """The id ranges below the last chunk that no chunk covers, and the first id above it."""
    gaps = []
    cursor = _MIN_ID
    for first, last in conn.execute("SELECT first_id, last_id FROM usage_chunks ORDER BY last_id"):
        if first > cursor:
            gaps.append((cursor, first - 1))
        cursor = last + 1
    return gaps, cursor


def _tail_span(conn: sqlite3.Connection, start: int) -> int:
    """How many ids the unpacked rows from `start` on span (an upper bound on their number)."""
    first = conn.execute("SELECT min(id) FROM usage WHERE id >= ?", (start,)).fetchone()[0]
    if first is None:
        return 0
    top = conn.execute("SELECT max(id) FROM usage").fetchone()[0]
    return int(top) - int(first) + 1


def _tail_floor(conn: sqlite3.Connection) -> int | None:
    """The id below the unpacked tail: the last chunk's last id, else the lowest id minus one."""
    last = conn.execute("SELECT max(last_id) FROM usage_chunks").fetchone()[0]
    if last is not None:
        return int(last)
    first = conn.execute("SELECT min(id) FROM usage").fetchone()[0]
    return None if first is None else int(first) - 1


def _pack_range(conn: sqlite3.Connection, lo: int, hi: int) -> int:
    """Pack the rows with ``lo <= id <= hi`` (the first CHUNK_ROWS of them) into one chunk that
    starts at `lo`; returns the chunk's last id."""
    rows = conn.execute(
        f"SELECT id, {_USAGE_SELECT} FROM usage WHERE id BETWEEN ? AND ? ORDER BY id LIMIT {CHUNK_ROWS}",
        (lo, hi),
    ).fetchall()
    last = rows[-1][0] if len(rows) == CHUNK_ROWS else hi
    block = encode_rows([r[1:] for r in rows])
    conn.execute(
        "INSERT INTO usage_chunks (last_id, first_id, rows, data) VALUES (?, ?, ?, ?)",
        (last, lo, len(rows), encode_chunk(block)),
    )
    return int(last)


def _pack_tail(conn: sqlite3.Connection, *, limit: int) -> int:
    """Pack the rows above the last chunk while they span CHUNK_ROWS ids, at most `limit`
    chunks; returns how many chunks were written. Costs two index look-ups when there is
    nothing to pack."""
    done = 0
    while done < limit:
        last = conn.execute("SELECT max(last_id) FROM usage_chunks").fetchone()[0]
        start = _MIN_ID if last is None else last + 1
        if _tail_span(conn, start) < CHUNK_ROWS:
            break
        top = conn.execute("SELECT max(id) FROM usage").fetchone()[0]
        _pack_range(conn, start, top)
        done += 1
    return done


def _rows_block(
    conn: sqlite3.Connection, names: Sequence[str], lo: int, hi: int, thread: str | None
) -> ColumnBlock:
    sql = f"SELECT {', '.join(names)} FROM usage WHERE id BETWEEN ? AND ?"
    params: tuple[Any, ...] = (lo, hi)
    if thread is not None:
        sql += " AND thread = ?"
        params += (thread,)
    return encode_rows(conn.execute(sql + " ORDER BY id", params).fetchall(), names)


def _read_blocks(conn: sqlite3.Connection, names: Sequence[str], thread: str | None) -> list[ColumnBlock]:
    lo, hi = _MIN_ID, _MAX_ID
    if thread is not None:
        count, lo, hi = conn.execute(
            "SELECT count(*), min(id), max(id) FROM usage WHERE thread = ?", (thread,)
        ).fetchone()
        if not count:
            return []
        if count <= _SMALL_THREAD:
            return [_rows_block(conn, names, lo, hi, thread)]
    need = list(names) if thread is None or "thread" in names else [*names, "thread"]
    blocks: list[ColumnBlock] = []
    cursor = lo
    chunks = conn.execute(
        "SELECT first_id, last_id, data FROM usage_chunks WHERE last_id >= ? AND first_id <= ? "
        "ORDER BY last_id", (lo, hi),
    ).fetchall()
    for first, last, data in chunks:
        if first > cursor:
            blocks.append(_rows_block(conn, names, cursor, first - 1, thread))
        block = decode_chunk(data, need)
        if block is None:  # written by a newer nbagent: read its rows instead
            block = _rows_block(conn, names, first, last, thread)
        elif thread is not None:
            block = keep_matching(block, "thread", thread)
            if block is not None and len(need) > len(names):
                block = ColumnBlock(block.length, {n: block.parts[n] for n in names}, block.keep)
        if block is not None:
            blocks.append(block)
        cursor = last + 1
    if cursor <= hi:
        blocks.append(_rows_block(conn, names, cursor, hi, thread))
    return blocks
