"""Access to the server: the pool of this process, retries, leases, and errors that hide the password.

Owns opening (a first direct connection that checks or migrates the schema and fails at once
with the server's words, then a `psycopg_pool.ConnectionPool`), the per-process state (a forked
child, or an unpickled copy, opens its own pool), the worker threads that run the blocking
driver calls off the event loop, retrying a call whose connection was lost, the lease heartbeat,
and turning driver errors into the `StoreError` family with the password scrubbed. Imports
`_conninfo`, `_schema`, the exceptions and the store's ``live_runs``; psycopg and psycopg_pool
are imported on first use only.

Every call is one function of a connection run in a worker thread (`Database.run`), in
autocommit mode, so a single statement is a transaction by itself: this is what PgBouncer's
transaction mode needs, together with no server-side prepared statements (``prepare_threshold``
None unless a user asks for them). A call whose connection breaks (the server restarted, a
network cut, PgBouncer dropped it) is tried again on a fresh connection until ``wait_s`` has
passed; the append's own function tells whether its lost commit had in fact happened (see
`PostgresStore.append`), so a step is written exactly once or not at all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from ...exceptions import StoreConnectionError, StoreError, StoreReadOnlyError
from ..meta import live_runs
from ._conninfo import Secret
from ._schema import check, migrate

_T = TypeVar("_T")
Work = Callable[[Any, int], _T]
"""A store call: ``work(connection, attempt)``; `attempt` counts the tries before this one."""

_RETRY_STATES = ("40001", "40P01", "57P01", "57P02", "57P03")
"""Serialization failure, deadlock, and the server shutting down or starting: try again."""


class Database:
    """One database (and schema) as seen from this process: its pool, opened on first use."""

    def __init__(
        self,
        conninfo: str,
        password: Secret | None,
        schema: str,
        *,
        display: str,
        migrate: bool,
        pool_size: int,
        prepare_threshold: int | None,
        wait_s: float,
        lease_s: float,
    ) -> None:
        self.conninfo = conninfo
        self.password = password
        self.schema = schema
        self.display = display
        self.migrate = migrate
        self.pool_size = pool_size
        self.prepare_threshold = prepare_threshold
        self.wait_s = wait_s
        self.lease_s = lease_s
        self.lock = threading.Lock()
        self._pid = 0
        self._pool: Any = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._executor_pid = 0
        self.leases: dict[str, str] = {}
        """Threads whose lease this process renews, with the run holding it."""
        self._beater: threading.Thread | None = None
        self._release: weakref.finalize[Any, Any] | None = None
        self.renew_sql = ""
        """The heartbeat's statement (set by the store: it owns the SQL)."""

    # ------------------------------------------------------------------ opening
    def connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": self.prepare_threshold,
            "connect_timeout": max(1, int(min(self.wait_s, 10))),
            "application_name": "nbagent",
        }
        if self.password is not None:
            kwargs["password"] = self.password.reveal()
        return kwargs

    def connect(self) -> Any:
        """A new connection of its own (not from the pool), e.g. for migrations."""
        import psycopg

        return psycopg.connect(self.conninfo, **self.connect_kwargs())

    def pool(self) -> Any:
        """This process's pool, opened (and the schema checked or migrated) on first use."""
        if self._pool is not None and self._pid == os.getpid():
            return self._pool
        with self.lock:
            if self._pool is not None and self._pid == os.getpid():
                return self._pool
            if self._pid not in (0, os.getpid()):  # a forked child: the parent's pool is not ours
                self._pool, self._beater = None, None
                self.leases.clear()
            from psycopg_pool import ConnectionPool

            conn = self.connect()  # fails at once with the server's words (not after a pool timeout)
            try:
                self.prepare_schema(conn)
            finally:
                conn.close()
            pool = ConnectionPool(
                self.conninfo, kwargs=self.connect_kwargs(), min_size=1, max_size=self.pool_size,
                open=False, timeout=self.wait_s, name="nbagent", max_idle=300.0,
            )
            pool.open(wait=False)
            self._pool, self._pid = pool, os.getpid()
            self._release = weakref.finalize(self, _release, pool, self._pid)
            return pool

    def prepare_schema(self, conn: Any) -> None:
        if self.migrate:
            migrate(conn, self.schema, "nbagent (first use)")
        elif check(conn, self.schema, "") is None:
            raise StoreError(
                f"{self.display}: the schema {self.schema!r} has no nbagent tables of the version this "
                "nbagent uses, and migrate=False. Run  python -m nbagent.store migrate <URL>"
                f"{'' if self.schema == 'nbagent' else ' --schema ' + self.schema}  (or let a store "
                "with migrate=True create them)",
                path=self.display,
            )

    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        """This process's worker threads (the driver blocks; the event loop must not)."""
        executor = self._executor
        if executor is None or self._executor_pid != os.getpid():
            with self.lock:
                if self._executor is None or self._executor_pid != os.getpid():
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self.pool_size, thread_name_prefix="nbagent-pg"
                    )
                    self._executor_pid = os.getpid()
                executor = self._executor
        return executor

    # ------------------------------------------------------------------ calls
    async def run(self, work: Work[_T]) -> _T:
        """``work(connection, attempt)`` in a worker thread (the event loop keeps running)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor(), self.call, work)

    def call(self, work: Work[_T]) -> _T:
        """``work(connection, attempt)`` on a pooled connection, tried again on a fresh one when
        the connection is lost, until `wait_s` has passed. Errors become `StoreError`s."""
        import psycopg

        deadline = time.monotonic() + self.wait_s
        attempt, pause = 0, 0.05
        while True:
            failure: BaseException | None = None
            conn = None
            try:
                pool = self.pool()
                with pool.connection() as conn:
                    return work(conn, attempt)
            except psycopg.Error as exc:
                lost = _lost(exc, conn)
                if not lost or time.monotonic() + pause > deadline:
                    failure = exc
            if failure is not None:
                error = self.error(failure)
                # Raised outside the except block: the driver's exception (its frames hold the
                # connection's settings) is not chained to what the user sees.
                raise error
            attempt += 1
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def run_direct(self, work: Work[_T]) -> _T:
        """``work(connection, 0)`` on a connection of its own (no pool, no schema check)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor(), self._direct, work)

    def _direct(self, work: Work[_T]) -> _T:
        import psycopg

        failure: BaseException | None = None
        try:
            with self.connect() as conn:
                return work(conn, 0)
        except psycopg.Error as exc:
            failure = exc
        raise self.error(failure)

    def error(self, exc: BaseException) -> StoreError:
        """The `StoreError` for a driver error, naming the server (never the password)."""
        from psycopg_pool import PoolTimeout

        words = self.scrub(" ".join(str(exc).split()))
        state = getattr(exc, "sqlstate", None) or ""
        if isinstance(exc, PoolTimeout):
            words = self._why_no_connection() or words
            return StoreConnectionError(
                f"the PostgreSQL store {self.display} gave no connection within {self.wait_s:g} s: {words}",
                path=self.display)
        if state == "42501" or state == "25006":
            return StoreReadOnlyError(f"the PostgreSQL store {self.display} cannot be written: {words}",
                                      path=self.display)
        if state.startswith(("08", "28", "57P")) or (not state and _is_operational(exc)):
            return StoreConnectionError(
                f"the PostgreSQL store {self.display} cannot be reached or refused the connection: {words}",
                path=self.display)
        return StoreError(f"the PostgreSQL store {self.display} failed: {words}", path=self.display)

    def _why_no_connection(self) -> str | None:
        import psycopg

        try:
            self.connect().close()
        except psycopg.Error as exc:
            return self.scrub(" ".join(str(exc).split()))
        return None

    def scrub(self, text: str) -> str:
        """`text` with the password (if it occurs, and is not too short to tell) replaced."""
        secret = self.password.reveal() if self.password is not None else ""
        if len(secret) >= 4:
            text = text.replace(secret, "***")
        return text

    # ------------------------------------------------------------------ leases
    def hold(self, thread: str, run_id: str) -> None:
        """Renew the lease of `thread` while `run_id` goes on in this process."""
        with self.lock:
            self.leases[thread] = run_id
            if self._beater is None or not self._beater.is_alive():
                self._beater = threading.Thread(target=self._beat, name="nbagent-pg-lease", daemon=True)
                self._beater.start()

    def release(self, thread: str) -> None:
        with self.lock:
            self.leases.pop(thread, None)

    def _beat(self) -> None:
        pid = os.getpid()
        while True:
            time.sleep(self.lease_s / 3)
            with self.lock:
                if os.getpid() != pid:
                    return
                for thread, run in list(self.leases.items()):
                    if run not in live_runs:  # the run ended without saying so (an error, a kill)
                        del self.leases[thread]
                pairs = list(self.leases.items())
                if not pairs:
                    self._beater = None
                    return
            params = (self.lease_s, [p[0] for p in pairs], [p[1] for p in pairs])

            def renew(conn: Any, _: int, params: tuple[Any, ...] = params) -> None:
                conn.execute(self.renew_sql, params)

            try:
                self.call(renew)
            except StoreError:
                pass  # the next beat tries again; a lapsed lease only lets others take over

    def close(self) -> None:
        """Close this process's pool (it is opened again if used again)."""
        with self.lock:
            pool, self._pool = self._pool, None
            executor, self._executor = self._executor, None
            self.leases.clear()
            if self._release is not None:
                self._release.detach()
                self._release = None
        if executor is not None and self._executor_pid == os.getpid():
            executor.shutdown(wait=False)
        if pool is not None and self._pid == os.getpid():
            pool.close()


def _release(pool: Any, pid: int) -> None:
    """Close the pool of a store that was dropped without `close` (when Python frees it). Not on
    one of the pool's own threads, where the cycle collector may run: closing joins them."""
    if os.getpid() != pid:  # a forked child: the parent's pool is not ours
        return
    if threading.current_thread().name.startswith(f"{pool.name}-"):
        threading.Thread(target=pool.close, name="nbagent-pg-release", daemon=True).start()
    else:
        pool.close()


def _is_operational(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, psycopg.OperationalError)


def _lost(exc: BaseException, conn: Any) -> bool:
    """Whether `exc` means the connection (or the server) went away, so trying again may work."""
    from psycopg_pool import PoolTimeout

    if isinstance(exc, PoolTimeout):
        return False  # the pool already waited `wait_s`
    state = getattr(exc, "sqlstate", None) or ""
    if state in _RETRY_STATES or state.startswith("08"):
        return True
    return conn is not None and bool(conn.broken or conn.closed) and _is_operational(exc)
