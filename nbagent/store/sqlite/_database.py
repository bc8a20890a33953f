"""Access to the file: one connection per process, the lock, transactions and SQLite's errors.

Owns opening (the file checks, connecting, the schema checks, switching to WAL), the
per-process state (a connection is never used across a fork: the child opens its own), the lock
that serialises one store object's calls across OS threads, and the mapping of SQLite errors
onto the `StoreError` family, each naming the file. Imports `_schema` and the exceptions only;
it knows nothing of threads, messages or usage.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...exceptions import StoreCorruptError, StoreError, StoreReadOnlyError
from ._schema import check_file, check_schema

_BUSY_TIMEOUT_MS = 15_000


class Database:
    """One store file as seen from this process: its connection, opened on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._inherited: list[sqlite3.Connection] = []
        self.tail_floor: int | None = None
        """A usage id at or below the start of the unpacked tail when last looked (None: look).
        An append whose new row id is less than CHUNK_ROWS above it has nothing to pack, so the
        look-ups are skipped. If it is stale (another writer packed, or dropped the last chunk)
        packing only happens later; reads are right either way (unpacked rows are read from the
        usage table). Forgotten with the connection."""

    def connection(self) -> sqlite3.Connection:
        """This process's connection (opened now if needed); call with `lock` held."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self._conn is not None:
            # Opened before a fork: SQLite connections must not cross a fork. Keep the object
            # alive (closing it here could release the parent's locks) and open a fresh one.
            self._inherited.append(self._conn)
        self._conn = None
        self.tail_floor = None
        self._conn = self._open()
        self._pid = os.getpid()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        check_file(self.path)
        try:
            conn = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            check_schema(conn, self.path)
            # Only now, once the file is known to be ours, may anything be written to it.
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch to WAL mode (got {mode!r})",
                                 path=str(self.path))
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise self.error(exc) from exc
            raise
        return conn

    def error(self, exc: sqlite3.Error) -> StoreError:
        """The `StoreError` for a SQLite error, naming the file."""
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
    def transaction(self, immediate: bool) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; SQLite errors become `StoreError`s naming the file."""
        with self.lock:
            conn = self.connection()
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
                raise self.error(exc) from exc

    def close(self) -> None:
        """Close this process's connection (it is opened again if used again)."""
        with self.lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()
