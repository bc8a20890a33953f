"""Access to the file: one connection per process, the lock, transactions and SQLite's errors.

Owns opening (the file checks, connecting, the schema checks, switching to WAL), the
per-process state (a connection is never used across a fork: the child opens its own), the lock
that serialises one store object's calls across OS threads, waiting for other connections'
locks without stopping the event loop, and the mapping of SQLite errors onto the `StoreError`
family, each naming the file. Imports `_schema` and the exceptions only; it knows nothing of
threads, messages or usage.

Waiting: a transaction is tried on the caller's thread (the event loop) with a short SQLite busy
wait (`_TRY_TIMEOUT_MS`), so the uncontended path costs no thread hop. When the file stays
locked (another process is writing, or creating the file), nothing was done: the loop gets
control back (``await asyncio.sleep``, growing to 50 ms) and the whole transaction is tried
again, until `BUSY_TIMEOUT_S` has passed; only then is the wait reported, with its length.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ...exceptions import StoreCorruptError, StoreError, StoreReadOnlyError
from ._schema import check_file, check_schema

BUSY_TIMEOUT_S = 15.0
"""How long a call waits for other connections' locks before it fails."""

_TRY_TIMEOUT_MS = 5
"""SQLite's own busy wait within one attempt (it blocks the caller's thread, the event loop)."""

_T = TypeVar("_T")


class _Busy(Exception):
    """An attempt found the file locked by another connection; it did nothing (rolled back)."""


def _is_busy(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class Database:
    """One store file as seen from this process: its connection, opened on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()
        """Serialises this object's calls across OS threads. Made again in a forked child (the
        parent's may have been held, at the fork, by a thread the child does not have)."""
        self._conn: sqlite3.Connection | None = None
        self.corrupt: str | None = None
        """SQLite's words when it found the file corrupted (None: it has not): from then on this
        object refuses to write to the file, so nothing is written over the damage."""
        self._pid = 0
        self._inherited: list[sqlite3.Connection] = []
        self.tail_floor: int | None = None
        """A usage id at or below the start of the unpacked tail when last looked (None: look).
        An append whose new row id is less than CHUNK_ROWS above it has nothing to pack, so the
        look-ups are skipped. If it is stale (another writer packed, or dropped the last chunk)
        packing only happens later; reads are right either way (unpacked rows are read from the
        usage table). Forgotten with the connection."""

        _databases.add(self)

    def _after_fork(self) -> None:
        """In a forked child: new per-process state. `_before_fork` held the lock across the
        fork, so the parent's connection was idle (no statement, no transaction): closing it
        in the child gives the child's SQLite its own locks (the parent's process keeps its
        own: POSIX locks are per process), and the next call opens a fresh connection."""
        self.lock = threading.RLock()
        conn, self._conn = self._conn, None
        self.tail_floor = None
        if conn is not None:
            conn.close()

    def connection(self) -> sqlite3.Connection:
        """This process's connection (opened now if needed); call with `lock` held."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self._conn is not None:  # opened before a fork that skipped `_after_fork`
            self._inherited.append(self._conn)
        self._conn = None
        self.tail_floor = None
        self._conn = self._open()
        self._pid = os.getpid()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        """A new connection to the checked file; SQLite errors are raised as they are (a busy
        file included: `_attempt` tries again later)."""
        check_file(self.path)
        conn = sqlite3.connect(
            self.path, timeout=_TRY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {_TRY_TIMEOUT_MS}")
            check_schema(conn, self.path)
            # Only now, once the file is known to be ours, may anything be written to it.
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch to WAL mode (got {mode!r})",
                                 path=str(self.path))
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    def error(self, exc: sqlite3.Error) -> StoreError:
        """The `StoreError` for a SQLite error, naming the file."""
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        path = str(self.path)
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            self.corrupt = self.corrupt or str(exc)
            return StoreCorruptError(
                f"{path} is corrupted or not an nbagent store ({exc}). It was not changed; restore it "
                "from a backup or move it away.", path=path)
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
            return StoreReadOnlyError(f"the nbagent store {path} cannot be written ({exc})", path=path)
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return StoreError(f"the nbagent store {path} is locked by another writer ({exc})", path=path)
        return StoreError(f"the nbagent store {path} failed: {exc}", path=path)

    async def run(self, work: Callable[[sqlite3.Connection], _T], *, write: bool) -> _T:
        """``work(connection)`` in one transaction (``BEGIN IMMEDIATE`` when `write`), under the
        lock; waits for other connections' locks without blocking the event loop (see the module
        docstring). SQLite errors become `StoreError`s naming the file."""
        try:
            return self._attempt(work, write)
        except _Busy:
            pass
        clock, pause = time.monotonic(), 0.001
        while True:
            await asyncio.sleep(pause)
            try:
                return self._attempt(work, write)
            except _Busy as busy:
                waited = time.monotonic() - clock
                if waited >= BUSY_TIMEOUT_S:
                    raise StoreError(
                        f"the nbagent store {self.path} stayed locked by another writer for more than "
                        f"{BUSY_TIMEOUT_S:g} s (waited {waited:.1f} s; {busy.__cause__})",
                        path=str(self.path),
                    ) from busy.__cause__
            pause = min(pause * 2, 0.05)

    def _attempt(self, work: Callable[[sqlite3.Connection], _T], write: bool) -> _T:
        """One try of `run`; raises `_Busy` (having done nothing) when the file is locked."""
        with self.lock:
            if write and self.corrupt is not None:
                raise StoreCorruptError(
                    f"{self.path} is corrupted (SQLite said: {self.corrupt}); nbagent no longer writes "
                    "to it. Restore it from a backup or move it away.", path=str(self.path))
            try:
                conn = self.connection()
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    result = work(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                return result
            except sqlite3.Error as exc:
                if _is_busy(exc):
                    raise _Busy from exc
                raise self.error(exc) from exc

    def close(self) -> None:
        """Close this process's connection (it is opened again if used again)."""
        with self.lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()


_databases: weakref.WeakSet[Database] = weakref.WeakSet()
"""Every `Database` of this process, for the fork hooks below."""
_held: list[Database] = []


def _before_fork() -> None:
    """Take every store's lock, so no thread is inside SQLite with a store's connection (or in
    a transaction) while the process is copied."""
    for database in list(_databases):
        database.lock.acquire()
        _held.append(database)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop().lock.release()


def _after_fork_in_child() -> None:
    _held.clear()
    for database in list(_databases):
        database._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
    )
