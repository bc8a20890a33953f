"""The file's schema: DDL, the checks a file must pass before anything writes to it, migrations.

Owns the table layout (see the package docstring), the file checks made before SQLite opens the
file (folder, header, truncation, permissions), the schema checks made once it is open (an
nbagent store of a format this version reads) and the migrations (adding usage chunks to a
format 1 file written before they existed; making a format 1 or 2 file format 3). Imports the
exceptions, `FORMAT_VERSION` and `ERROR_KEPT` only; it never holds a connection of its own
(callers pass theirs).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from ...exceptions import StoreCorruptError, StoreError, StoreReadOnlyError, StoreVersionError
from ..base import ERROR_KEPT, FORMAT_VERSION

USAGE_COLUMNS = (
    "run_id", "thread", "step", "time", "provider", "model", "input_tokens", "cache_read_tokens",
    "cache_write_tokens", "output_tokens", "reasoning_tokens", "latency_s", "finish_reason",
    "tool_calls", "cost_input", "cost_output", "cost_total", "currency", "usage_reported", "purpose",
    "context", "replayed", "recorded_cost", "agent", "depth", "parent_call_id", "batch",
)
"""The usage table's data columns, in `ModelCallUsage` field order (format 1's, ``purpose``,
which a format 1 or 2 file gets when it is opened, ``context``, which a format 1 to 3 file
gets, ``agent``, ``depth`` and ``parent_call_id``, which a format 1 to 4 file gets, and
``batch``, which a format 1 to 5 file gets: `_migrate`)."""

_USAGE_TYPES = {
    "run_id": "TEXT", "thread": "TEXT", "step": "INTEGER", "time": "REAL", "provider": "TEXT",
    "model": "TEXT", "input_tokens": "INTEGER", "cache_read_tokens": "INTEGER",
    "cache_write_tokens": "INTEGER", "output_tokens": "INTEGER", "reasoning_tokens": "INTEGER",
    "latency_s": "REAL", "finish_reason": "TEXT", "tool_calls": "INTEGER", "cost_input": "REAL",
    "cost_output": "REAL", "cost_total": "REAL", "currency": "TEXT", "usage_reported": "INTEGER",
    "purpose": "TEXT DEFAULT 'run'", "context": "TEXT", "replayed": "INTEGER DEFAULT 0", "recorded_cost": "REAL",
    "agent": "TEXT", "depth": "INTEGER DEFAULT 0", "parent_call_id": "TEXT",
    "batch": "INTEGER DEFAULT 0",
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
    run_id TEXT,
    stop_reason TEXT,
    error TEXT,
    PRIMARY KEY (thread, version)
) WITHOUT ROWID;
"""

CHECKPOINT_COLUMNS = (
    "thread", "version", "step", "time", "messages", "last_message", "input_tokens", "output_tokens",
    "cost_total", "status", "run_id", "stop_reason", "error",
)
"""The checkpoints table's columns (format 2: format 1's and the last three, which a format 1
file gets when it is opened: `_migrate`)."""

_RUN_COLUMNS = {"run_id": "TEXT", "stop_reason": "TEXT", "error": "TEXT"}


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


# ---------------------------------------------------------------------------------------- before opening
def check_file(path: Path) -> None:
    """Refuse a path that is not, or cannot become, a writable nbagent store (nothing is written
    to the file; its folder is created when missing)."""
    try:
        _check_path(path)
    except PermissionError as exc:
        raise StoreReadOnlyError(
            f"the nbagent store {path} cannot be written or read: permission denied ({exc}); "
            "pass store=SQLiteStore(<writable path>) or set NBAGENT_STORE",
            path=str(path),
        ) from exc


def _check_path(path: Path) -> None:
    if path.is_dir():
        raise StoreError(f"the nbagent store {path} is a folder; give a file path", path=str(path))
    if path.exists():
        if _header_problem(path) is not None:
            problem = _confirmed_problem(path)
            if problem is not None:
                raise StoreCorruptError(problem[1], path=str(path))
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


def _header_problem(path: Path) -> tuple[bool, str] | None:
    """What the file's first 100 bytes and its size show to be wrong, as (is it a truncation,
    the message); None when nothing is."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = f.read(100)
    if not size:
        return None
    if len(header) < 100 or not header.startswith(_HEADER):
        return False, (
            f"{path} is not an nbagent store: it is not a SQLite database "
            f"({'truncated to ' + str(size) + ' bytes' if size < 100 else 'wrong header'}). "
            "It was not changed; move it away or pass another path."
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]
    if valid and pages and size < pages * page_size:
        return True, (
            f"{path} is truncated: {size} bytes, its header says {pages * page_size}. "
            "It was not changed; restore it from a backup or move it away."
        )
    return None


_CONFIRM_DELAYS = (0.0, 0.02, 0.05, 0.1)
"""Pauses before reading the header again to confirm a problem (only when one was seen)."""


def _confirmed_problem(path: Path) -> tuple[bool, str] | None:
    """The header's problem if it is still there when looked at again, else None.

    The header and the size agree only at rest: while another connection writes, a WAL
    checkpoint writes page 1 (with the new page count) before it extends the file, and a new
    file's first commit writes its pages one by one. So a truncation is judged only when no
    ``-wal``, ``-shm`` or ``-journal`` file shows a connection at work (otherwise SQLite judges
    the file itself, under its locks: missing pages give SQLITE_CORRUPT), and every problem must
    still be there in a few fresh reads over 0.2 s.
    """
    problem = None
    for delay in _CONFIRM_DELAYS:
        time.sleep(delay)
        problem = _header_problem(path)
        if problem is None or (problem[0] and _in_use(path)):
            return None
    return problem


def _in_use(path: Path) -> bool:
    return any(os.path.exists(f"{path}{suffix}") for suffix in ("-wal", "-shm", "-journal"))


# ---------------------------------------------------------------------------------------- once open
def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the schema in an empty file; otherwise refuse a file that is not an nbagent store
    this version reads, and add usage chunks to a file that lacks them."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        # Idempotent, so two processes creating the same new file at once both succeed.
        conn.executescript(
            "BEGIN IMMEDIATE;" + _SCHEMA + _CHUNK_SCHEMA + _RECORDINGS_SCHEMA
            + f"INSERT OR IGNORE INTO nbagent_meta VALUES ('format_version', '{FORMAT_VERSION}');"
            "INSERT OR IGNORE INTO nbagent_meta VALUES ('created_by', 'nbagent');"
            "COMMIT;"
        )
        return
    if "nbagent_meta" not in tables:
        raise StoreCorruptError(
            f"{path} is a SQLite database but not an nbagent store (tables: "
            f"{', '.join(sorted(tables))}). It was not changed; pass another path.",
            path=str(path),
        )
    row = conn.execute("SELECT value FROM nbagent_meta WHERE key = 'format_version'").fetchone()
    try:
        version = int(row[0])
    except (TypeError, ValueError):
        raise StoreCorruptError(
            f"{path}: the nbagent store has no valid format_version ({row!r}); it was not changed",
            path=str(path),
        ) from None
    if version > FORMAT_VERSION:
        raise StoreVersionError(
            f"{path} was written by a newer nbagent (store format {version}; this nbagent "
            f"reads formats up to {FORMAT_VERSION}). Upgrade nbagent to use it; it was not changed.",
            path=str(path),
        )
    missing = _TABLES - tables
    if missing:
        raise StoreCorruptError(
            f"{path}: the nbagent store is missing tables {sorted(missing)}; it was not changed",
            path=str(path),
        )
    if not _CHUNK_OBJECTS <= _schema_names(conn):
        _add_chunks(conn)
    if version < FORMAT_VERSION:
        _migrate(conn)
    elif "recordings" not in tables:
        _add_replay_now(conn)


def _schema_names(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
    return {r[0] for r in rows}


_BACKFILL_RUNS = f"""
INSERT INTO checkpoints ({", ".join(CHECKPOINT_COLUMNS)})
SELECT t.id, t.version, t.step, t.updated, t.messages,
       coalesce((SELECT c.last_message FROM checkpoints c WHERE c.thread = t.id ORDER BY c.version DESC LIMIT 1), ''),
       t.input_tokens, t.output_tokens, t.cost_total, t.status, json_extract(t.meta, '$.run_id'),
       json_extract(t.meta, '$.stop_reason'), substr(json_extract(t.meta, '$.error'), 1, {ERROR_KEPT})
FROM threads t WHERE json_valid(t.meta) AND json_extract(t.meta, '$.run_id') IS NOT NULL
ON CONFLICT (thread, version) DO UPDATE SET
    run_id = excluded.run_id, stop_reason = excluded.stop_reason, error = excluded.error
"""
"""Each thread's latest run, as its meta record tells, on a checkpoint at the thread's version."""


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring an older file to `FORMAT_VERSION` in one transaction: format 1 to 2
    (`_add_run_columns`), format 2 to 3 (`_add_purpose`), format 3 to 4 (`_add_context`),
    format 4 to 5 (`_add_tree`), then format 5 to 6 (`_add_batch`).

    The format number goes up with each because an older nbagent must not write to the file:
    one that reads format 1 only writes checkpoints without naming their columns, which fails on
    a table with more; one that reads format 2 (3, 5) would copy usage rows (a fork) without their
    ``purpose`` (``context``, ``batch``) and pack usage chunks without it. It refuses the file instead
    (`StoreVersionError`: "written by a newer nbagent").
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT value FROM nbagent_meta WHERE key = 'format_version'").fetchone()
        version = int(row[0])  # again: another process may have migrated it meanwhile
        if version < 2:
            _add_run_columns(conn)
        if version < 3:
            _add_purpose(conn)
        if version < 4:
            _add_context(conn)
        if version < 5:  # (a format 4 file may predate the replay columns: they come here too)
            _add_replay(conn)
            _add_tree(conn)
        if version < 6:
            _add_batch(conn)
        if version < FORMAT_VERSION:
            conn.execute("UPDATE nbagent_meta SET value = ? WHERE key = 'format_version'", (str(FORMAT_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _add_run_columns(conn: sqlite3.Connection) -> None:
    """Format 1 to 2, in `_migrate`'s transaction: the checkpoints get ``run_id``,
    ``stop_reason`` and ``error``. Those of the rows already there are not known (NULL), except
    each thread's latest run, which its meta record tells: it gets a checkpoint at the thread's
    version (a format 1 file has none for an append that wrote only the meta record, such as a
    run's end), so it keeps its outcome when later runs follow."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(checkpoints)")}
    for name, kind in _RUN_COLUMNS.items():
        if name not in columns:
            conn.execute(f"ALTER TABLE checkpoints ADD COLUMN {name} {kind}")
    conn.execute(_BACKFILL_RUNS)


def _add_purpose(conn: sqlite3.Connection) -> None:
    """Format 2 to 3, in `_migrate`'s transaction: the usage table gets ``purpose``, ``'run'`` in
    the rows already there (its default: no row is rewritten, the triggers do not fire). The
    usage chunks stay: a chunk without the column reads as ``'run'`` (`_columnar.ADDED_COLUMNS`)."""
    if "purpose" not in {r[1] for r in conn.execute("PRAGMA table_info(usage)")}:
        conn.execute(f"ALTER TABLE usage ADD COLUMN purpose {_USAGE_TYPES['purpose']}")


def _add_context(conn: sqlite3.Connection) -> None:
    """Format 3 to 4, in `_migrate`'s transaction: the usage table gets ``context`` (NULL in the
    rows already there: not measured). Chunks without it read as NULL (`_columnar.ADDED_COLUMNS`)."""
    if "context" not in {r[1] for r in conn.execute("PRAGMA table_info(usage)")}:
        conn.execute(f"ALTER TABLE usage ADD COLUMN context {_USAGE_TYPES['context']}")


def _add_tree(conn: sqlite3.Connection) -> None:
    """Format 4 to 5, in `_migrate`'s transaction: the usage table gets ``agent`` (NULL),
    ``depth`` (0) and ``parent_call_id`` (NULL): every row already there was made by an agent run
    directly (sub-agents came with format 5). Chunks without them read so (`_columnar.ADDED_COLUMNS`)."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(usage)")}
    for name in ("agent", "depth", "parent_call_id"):
        if name not in columns:
            conn.execute(f"ALTER TABLE usage ADD COLUMN {name} {_USAGE_TYPES[name]}")


def _add_batch(conn: sqlite3.Connection) -> None:
    """Format 5 to 6, in `_migrate`'s transaction: the usage table gets ``batch``
    (`ModelCallUsage.batch`: answered through a provider's batch API; 0 in the rows already
    there, none of which was). Chunks without it read so (`_columnar.ADDED_COLUMNS`)."""
    if "batch" not in {r[1] for r in conn.execute("PRAGMA table_info(usage)")}:
        conn.execute(f"ALTER TABLE usage ADD COLUMN batch {_USAGE_TYPES['batch']}")


_RECORDINGS_SCHEMA = """
CREATE TABLE IF NOT EXISTS recordings (
    id INTEGER PRIMARY KEY,
    thread TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS recordings_thread ON recordings (thread, id);
"""
"""Recorded model calls (`nbagent.models.record`), one JSON entry per call (format 4)."""


def _add_replay(conn: sqlite3.Connection) -> None:
    """Part of format 4, in a migration's transaction: the usage table gets ``replayed`` (0 in
    the rows already there) and ``recorded_cost`` (NULL), and the file the ``recordings`` table.
    Chunks without the two columns are read from the usage rows instead."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(usage)")}
    for name in ("replayed", "recorded_cost"):
        if name not in columns:
            conn.execute(f"ALTER TABLE usage ADD COLUMN {name} {_USAGE_TYPES[name]}")
    for statement in _RECORDINGS_SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def _add_replay_now(conn: sqlite3.Connection) -> None:
    """`_add_replay` in a transaction of its own, for a format 4 file written before it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        _add_replay(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _add_chunks(conn: sqlite3.Connection) -> None:
    """Give a file written before usage chunks existed the chunk table and its triggers."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        names = _schema_names(conn)  # again: another process may have done it meanwhile
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
