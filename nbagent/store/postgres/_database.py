"""Access to the server: this process's connections, retries, leases, and errors that hide the password.

Owns opening (a first direct connection that checks or migrates the schema and fails at once
with the server's words), the connections of each event loop (`LoopConnections`), the
per-process state (a forked child, or an unpickled copy, opens its own), retrying a call whose
connection was lost, and turning driver errors into the `StoreError` family with the password
scrubbed. Imports `_conninfo`, `_leases` (the heartbeat, which it owns one of), `_schema` and the
exceptions; psycopg is imported on first use only.

Every store call is one coroutine of a connection (`Database.run`) on psycopg's asyncio
connection, on the caller's own event loop: no worker thread in between, so a call costs one
round trip to the server and no thread wake-ups (a thread hop cost 0.1-0.3 ms a call, more than
the statement). The calls every run makes (a load, an append, a run's start) go through
`_libpq` (psycopg's execute, or with ``direct=True`` the connection's libpq handle); the others
use psycopg's execute.

Connections are kept per event loop (a connection belongs to the loop that opened it) in
autocommit mode, so a single statement is a transaction by itself: this is what
PgBouncer's transaction mode needs, together with no server-side prepared statements
(``prepare_threshold`` None unless a user asks for them). A call whose connection breaks (the
server restarted, a network cut, PgBouncer dropped it) is tried again on a fresh connection
until ``wait_s`` has passed; the append's own function tells whether its lost commit had in fact
happened (see `PostgresStore.append`), so a step is written exactly once or not at all.

Why not psycopg_pool's ``AsyncConnectionPool``: it runs background tasks on the loop that opened
it, and a store is used from several loops in one process (a kernel's, nbagent's own background
loop, each ``asyncio.run`` of a script or a cluster worker); ``asyncio.run`` cancels those tasks
before a pool could be closed at the loop's shutdown. `LoopConnections` has no task at all: it
only keeps idle connections, and closing one is a plain libpq call that works from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

from ...exceptions import StoreConnectionError, StoreError, StoreReadOnlyError
from ._conninfo import Secret
from ._leases import Leases
from ._schema import check, migrate

_T = TypeVar("_T")
Work = Callable[[Any, int], Awaitable[_T]]
"""A store call: ``await work(connection, attempt)`` on an asyncio connection; `attempt` counts
the tries before this one."""
SyncWork = Callable[[Any, int], _T]
"""The same on a blocking connection (migrations, the lease heartbeat)."""

_RETRY_STATES = ("40001", "40P01", "57P01", "57P02", "57P03")
"""Serialization failure, deadlock, and the server shutting down or starting: try again."""

_IDLE = 0
"""libpq's PQTRANS_IDLE (``psycopg.pq.TransactionStatus.IDLE``): no statement or transaction open."""

_orphans: list[Any] = []
"""Connections a forked child inherited: never used or closed there (closing would end the
parent's session on the shared socket), and kept so that freeing them warns of nothing."""


class NoConnection(Exception):
    """Every connection this loop may open stayed busy for `wait_s` (turned into
    `StoreConnectionError`)."""


class LoopConnections:
    """The idle connections of one event loop, and a limit of `size` in use at once.

    No background task and no lock: only that loop takes and gives back. `close` may run on any
    thread (a store's close, a finalizer): it closes the idle ones, and a connection in use is
    closed when it comes back."""

    def __init__(self, size: int) -> None:
        self.idle: list[Any] = []
        self.free = asyncio.Semaphore(size)
        self.closed = False
        self.closer: AsyncGenerator[None, None] | None = None

    async def take(self, db: Database, deadline: float) -> Any:
        """A connection for the running call (a new one when none is idle)."""
        if self.free.locked():
            try:
                await asyncio.wait_for(self.free.acquire(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise NoConnection() from None
        else:
            await self.free.acquire()  # returns at once
        try:
            while self.idle:
                conn = self.idle.pop()
                if not conn.closed:
                    return conn
            return await db.connect_async()
        except BaseException:
            self.free.release()
            raise

    def give(self, conn: Any) -> None:
        """Back after a call: kept if it is healthy and idle (not mid-statement or mid-transaction)."""
        self.free.release()
        if conn.closed:
            return
        if self.closed or conn.broken or conn.pgconn.transaction_status != _IDLE:
            conn.pgconn.finish()  # mid-statement (a cancelled call) or mid-transaction: not reusable
        else:
            self.idle.append(conn)

    def close(self) -> None:
        self.closed = True
        idle, self.idle = self.idle, []
        for conn in idle:
            conn.pgconn.finish()


async def _close_at_shutdown(connections: LoopConnections) -> AsyncGenerator[None, None]:
    """Advanced once, registered with the running loop: its ``shutdown_asyncgens()`` (which
    ``asyncio.run`` and nbagent's own loop call) closes the loop's connections.

    `connections` keeps this generator alive (the loop holds it only weakly), and the generator
    keeps the loop alive (its finalizer is the loop's): the link is dropped once it has run, so
    the loop can be freed. A loop closed without ``shutdown_asyncgens()`` has its connections
    closed by the next loop's first call, by `Database.close`, or when the store is freed."""
    try:
        yield
    finally:
        connections.close()
        connections.closer = None


class Database:
    """One database (and schema) as seen from this process: its connections, opened on first use."""

    def __init__(
        self,
        conninfo: str,
        password: Secret | None,
        schema: str,
        *,
        display: str,
        migrate: bool,
        pool_size: int,
        wait_s: float,
        lease_s: float,
    ) -> None:
        self.conninfo = conninfo
        self.password = password
        self.schema = schema
        self.display = display
        self.migrate = migrate
        self.pool_size = pool_size
        self.wait_s = wait_s
        self.lease_s = lease_s
        self.lock = threading.Lock()
        self._ready_lock = threading.Lock()
        self._ready_pid = 0
        """The process that checked (or migrated) the schema; 0 before."""
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopConnections] = (
            weakref.WeakKeyDictionary())
        self._loops_pid = 0
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._executor_pid = 0
        self._release: weakref.finalize[Any, Any] | None = None
        self.leases = Leases(self.call, lease_s)
        """The leases of the runs going on in this process, renewed by a heartbeat thread."""

    # ------------------------------------------------------------------ opening
    def connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "autocommit": True,
            # psycopg's own prepared statements are named _pg3_0, _pg3_1, ... per connection, and
            # collide where a pooler shares server sessions between clients; the store prepares
            # only its own calls, under names made from their text (`_libpq`).
            "prepare_threshold": None,
            "connect_timeout": max(1, int(min(self.wait_s, 10))),
            "application_name": "nbagent",
            "client_encoding": "UTF8",  # the text `_libpq` sends and reads
        }
        if self.password is not None:
            kwargs["password"] = self.password.reveal()
        return kwargs

    def connect(self) -> Any:
        """A new blocking connection of its own, e.g. for migrations."""
        import psycopg

        return psycopg.connect(self.conninfo, **self.connect_kwargs())

    async def connect_async(self) -> Any:
        """A new asyncio connection (for `LoopConnections`)."""
        import psycopg

        return await psycopg.AsyncConnection.connect(self.conninfo, **self.connect_kwargs())

    def ready(self) -> None:
        """Check (or migrate) the schema once per process, on a connection of its own. A refusal
        (no server, a wrong password, a schema in the way) fails at once with the server's words;
        a connection lost during the check (a restart, a terminated backend) is tried again on a
        new one until `wait_s` has passed, as `run` does. Blocking: `run` calls it in a worker
        thread."""
        with self._ready_lock:
            if self._ready_pid == os.getpid():
                return
            deadline, pause = time.monotonic() + self.wait_s, 0.05
            while True:
                failure, lost = self._check_once()
                if failure is None:
                    self._ready_pid = os.getpid()
                    return
                if not lost or time.monotonic() + pause > deadline:
                    break
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
        raise self.error(failure)  # outside the except block: the driver's frames are not chained

    def _check_once(self) -> tuple[BaseException | None, bool]:
        """One schema check: (None, False) when it passed, else the error and whether it was a
        lost connection (worth trying again)."""
        import psycopg

        conn = None
        try:
            conn = self.connect()
            try:
                self.prepare_schema(conn)
            finally:
                broken = conn.broken
                conn.close()
        except psycopg.Error as exc:
            state = getattr(exc, "sqlstate", None) or ""
            lost = conn is not None and (
                state in _RETRY_STATES or state.startswith("08") or (broken and _is_operational(exc)))
            return exc, lost
        return None, False

    def prepare_schema(self, conn: Any) -> None:
        if self.migrate:
            migrate(conn, self.schema, "nbagent (first use)")
        elif check(conn, self.schema) is None:
            raise StoreError(
                f"{self.display}: the schema {self.schema!r} has no nbagent tables of the version this "
                "nbagent uses, and migrate=False. Run  python -m nbagent.store migrate <URL>"
                f"{'' if self.schema == 'nbagent' else ' --schema ' + self.schema}  (or let a store "
                "with migrate=True create them)",
                path=self.display,
            )

    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        """This process's worker thread for blocking work (the schema check, migrations)."""
        executor = self._executor
        if executor is None or self._executor_pid != os.getpid():
            with self.lock:
                if self._executor is None or self._executor_pid != os.getpid():
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix="nbagent-pg"
                    )
                    self._executor_pid = os.getpid()
                executor = self._executor
        return executor

    async def connections(self) -> LoopConnections:
        """The running loop's connections (made on first use there; closed at the loop's
        shutdown, by `close`, or when the store is freed)."""
        loop = asyncio.get_running_loop()
        found = self._loops.get(loop)
        if found is not None and self._loops_pid == os.getpid():
            return found
        if self._ready_pid != os.getpid():
            await loop.run_in_executor(self.executor(), self.ready)
        made = LoopConnections(self.pool_size)
        with self.lock:
            if self._loops_pid != os.getpid():
                if self._loops_pid:  # a forked child: the parent's connections are not ours
                    for old in self._loops.values():
                        _orphans.extend(old.idle)
                        old.idle = []
                    if self._release is not None:
                        self._release.detach()
                        self._release = None
                    self.leases.forget()
                self._loops = weakref.WeakKeyDictionary()
                self._loops_pid = os.getpid()
            for old_loop in [lp for lp in self._loops if lp.is_closed()]:
                self._loops.pop(old_loop).close()
            found = self._loops.setdefault(loop, made)
            if self._release is None:
                self._release = weakref.finalize(self, _release, self._loops, os.getpid())
        if found is made:
            made.closer = _close_at_shutdown(made)
            await made.closer.__anext__()  # registered with this loop's shutdown_asyncgens()
        return found

    # ------------------------------------------------------------------ calls
    async def run(self, work: Work[_T]) -> _T:
        """``await work(connection, attempt)`` on one of this loop's connections, tried again on
        a fresh one when the connection is lost, until `wait_s` has passed. Errors become
        `StoreError`s."""
        import psycopg

        connections = await self.connections()
        deadline = time.monotonic() + self.wait_s
        attempt, pause = 0, 0.05
        while True:
            failure: BaseException | None = None
            conn = None
            try:
                conn = await connections.take(self, deadline)
                try:
                    return await work(conn, attempt)
                finally:
                    connections.give(conn)
            except NoConnection:
                raise StoreConnectionError(
                    f"the PostgreSQL store {self.display} gave no connection within {self.wait_s:g} s: "
                    f"all {self.pool_size} connections (pool_size) of this event loop stayed in use",
                    path=self.display) from None
            except psycopg.Error as exc:
                # A connection that cannot be opened now is lost too: the server was reached before.
                lost = _lost(exc, conn) or (conn is None and _is_operational(exc))
                if not lost or time.monotonic() + pause > deadline:
                    failure = exc
            if failure is not None:
                error = self.error(failure)
                # Raised outside the except block: the driver's exception (its frames hold the
                # connection's settings) is not chained to what the user sees.
                raise error
            attempt += 1
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def fetchall(self, sql: str, params: Any = ()) -> list[Any]:
        """The rows of one statement."""
        async def work(conn: Any, _: int) -> list[Any]:
            return await (await conn.execute(sql, params)).fetchall()

        return await self.run(work)

    def call(self, work: SyncWork[_T], conn: Any = None) -> tuple[_T, Any]:
        """``work(connection, 0)`` on the blocking connection `conn` (a new one if None or
        lost); returns the result and the connection to use next time. Errors become
        `StoreError`s (the connection is then closed)."""
        import psycopg

        failure: BaseException | None = None
        try:
            if conn is None or conn.closed or conn.broken:
                conn = self.connect()
            return work(conn, 0), conn
        except psycopg.Error as exc:
            failure = exc
        if conn is not None:
            conn.close()
        raise self.error(failure)

    async def run_direct(self, work: SyncWork[_T]) -> _T:
        """``work(connection, 0)`` on a blocking connection of its own (no schema check), in a
        worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self.executor(), self._direct, work)

    def _direct(self, work: SyncWork[_T]) -> _T:
        result, conn = self.call(work)
        conn.close()
        return result

    def error(self, exc: BaseException) -> StoreError:
        """The `StoreError` for a driver error, naming the server (never the password)."""
        words = self.scrub(" ".join(str(exc).split()))
        state = getattr(exc, "sqlstate", None) or ""
        if state == "42501" or state == "25006":
            return StoreReadOnlyError(f"the PostgreSQL store {self.display} cannot be written: {words}",
                                      path=self.display)
        if state.startswith(("08", "28", "57P")) or (not state and _is_operational(exc)):
            return StoreConnectionError(
                f"the PostgreSQL store {self.display} cannot be reached or refused the connection: {words}",
                path=self.display)
        return StoreError(f"the PostgreSQL store {self.display} failed: {words}", path=self.display)

    def scrub(self, text: str) -> str:
        """`text` with the password (if it occurs, and is not too short to tell) replaced."""
        secret = self.password.reveal() if self.password is not None else ""
        if len(secret) >= 4:
            text = text.replace(secret, "***")
        return text

    def close(self) -> None:
        """Close this process's connections (they are opened again if used again)."""
        with self.lock:
            loops = list(self._loops.values()) if self._loops_pid == os.getpid() else []
            self._loops = weakref.WeakKeyDictionary()
            executor, self._executor = self._executor, None
            self.leases.forget()
            if self._release is not None:
                self._release.detach()
                self._release = None
        if executor is not None and self._executor_pid == os.getpid():
            executor.shutdown(wait=False)
        for connections in loops:
            connections.close()


def _release(loops: weakref.WeakKeyDictionary[Any, LoopConnections], pid: int) -> None:
    """Close the connections of a store that was dropped without `close` (when Python frees it;
    on whatever thread: closing a connection is a plain libpq call)."""
    if os.getpid() != pid:  # a forked child: the parent's connections are not ours
        return
    for connections in list(loops.values()):
        connections.close()


def _is_operational(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, psycopg.OperationalError)


def _lost(exc: BaseException, conn: Any) -> bool:
    """Whether `exc` means the connection (or the server) went away, so trying again may work."""
    state = getattr(exc, "sqlstate", None) or ""
    if state in _RETRY_STATES or state.startswith("08"):
        return True
    return conn is not None and bool(conn.broken or conn.closed) and _is_operational(exc)
