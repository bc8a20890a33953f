"""The `PostgresStore` class: the store protocol on a PostgreSQL database.

Owns the protocol's calls (load, append, listings, delete, prune, fork copy, usage columns), the
JSON of stored records and the store's picklable identity (its URL and options). Imports
`_conninfo`, `_database` (pool, retries, leases, errors), `_schema`, `_sql` (the statements), the
store protocol, messages, usage and exceptions; psycopg only through `_database`, on first use.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ...exceptions import ConflictError, StoreCorruptError, UserError
from ...messages import Message, message_from_dict
from ...usage import ModelCallUsage
from .._columnar import UsageColumns, column_names, encode_rows
from ..base import Checkpoint, LedgerEntry, Store, ThreadInfo, ThreadState, summarize
from ..meta import ThreadMeta, meta_record
from ._conninfo import Secret, split_password
from ._copy import _Undecodable, copy_rows
from ._database import Database
from ._schema import USAGE_TYPES, quote_schema
from ._sql import Statements

_FLOATS = [i for i, kind in enumerate(USAGE_TYPES.values()) if kind == "double precision"]
_DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _finite(value: float | None) -> float | None:
    # JSON (and so jsonb) has no NaN: a NaN cost is stored as NULL, as SQLite does.
    return None if value is None or math.isnan(value) else value


def _usage_json(row: ModelCallUsage) -> list[Any]:
    return [
        row.run_id, None, row.step, row.time, row.provider, row.model, row.input_tokens,
        row.cache_read_tokens, row.cache_write_tokens, row.output_tokens, row.reasoning_tokens,
        _finite(row.latency_s), row.finish_reason, row.tool_calls, _finite(row.cost_input),
        _finite(row.cost_output), _finite(row.cost_total), row.currency, bool(row.usage_reported),
    ]


def _usage_row(values: list[Any]) -> ModelCallUsage:
    for i in _FLOATS:  # JSON gives 1 for 1.0
        if values[i] is not None:
            values[i] = float(values[i])
    return ModelCallUsage(*values)


class PostgresStore(Store):
    """Threads in a PostgreSQL database, shared by every kernel and machine that can reach it.

    ```python
    store = PostgresStore("postgresql://alice@db.example.com/agents")   # nothing opens before first use
    agent = Agent(model, tools=[...], store=store)     # or NBAGENT_STORE=postgresql://...
    ```

    The same protocol and guarantees as `SQLiteStore`: every step is one transaction (one
    statement), a tool call is recorded as started before it runs, and writers of one thread are
    checked optimistically (`ConflictError` for the one that loses), wherever they run. A run
    keeps a lease on its thread, renewed while it goes on, so a kernel on another machine refuses
    to resume a thread that is being run right now; the lease lapses `lease_s` after the running
    process dies. The schema is created (and migrated) on first use, with a version table.

    Nothing of the password is ever shown: the repr, errors and the view name the server without
    it. Prefer keeping it out of the URL altogether (``PGPASSWORD``, ``~/.pgpass``, a service
    file: libpq's usual ways). A store pickles as its URL and options (password included when
    the URL has one) and opens its own connections where it is unpickled.

    Args:
        url: ``postgresql://user[:password]@host[:port]/database[?options]`` or libpq's
            ``key=value`` form.
        schema: the PostgreSQL schema holding the tables (created if needed).
        migrate: create or upgrade the tables on first use; with False the store refuses a
            database whose tables are missing or older (``python -m nbagent.store migrate URL``).
        pool_size: connections this process may open (and worker threads that use them).
        prepare_threshold: psycopg's; None (the default) never prepares statements on the
            server, which PgBouncer in transaction mode requires. Give a number to allow them
            when connecting to PostgreSQL directly.
        wait_s: how long a call waits for a connection, and keeps trying again after the
            connection was lost, before it fails with `StoreConnectionError`.
        lease_s: how long a run's lease lasts without being renewed (renewed every third of it).

    Raises:
        UserError: psycopg is not installed (``pip install "nbagent[postgres]"``), or a bad
            option.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = "nbagent",
        migrate: bool = True,
        pool_size: int = 4,
        prepare_threshold: int | None = None,
        wait_s: float = 15.0,
        lease_s: float = 30.0,
    ) -> None:
        if importlib.util.find_spec("psycopg") is None or importlib.util.find_spec("psycopg_pool") is None:
            raise UserError('PostgresStore needs psycopg 3 and psycopg_pool: pip install "nbagent[postgres]"')
        if not isinstance(url, str) or not url.strip():
            raise UserError(f"PostgresStore needs a PostgreSQL URL, got {type(url).__name__}")
        if pool_size < 1 or wait_s <= 0 or lease_s <= 0:
            raise UserError("pool_size must be at least 1, and wait_s and lease_s positive")
        conninfo, password = split_password(url)
        self.url = conninfo
        """The URL without its password (what the repr and errors show)."""
        self.schema = schema
        self._options = {"schema": schema, "migrate": migrate, "pool_size": pool_size,
                         "prepare_threshold": prepare_threshold, "wait_s": wait_s, "lease_s": lease_s}
        self._sql = Statements(quote_schema(schema))
        self._db = Database(
            conninfo, Secret(password) if password is not None else None, schema,
            display=conninfo + ("" if schema == "nbagent" else f" (schema {schema})"),
            migrate=migrate, pool_size=pool_size, prepare_threshold=prepare_threshold, wait_s=wait_s,
            lease_s=lease_s,
        )
        self._db.renew_sql = self._sql.renew
        self.lease_s = lease_s
        self._damaged: dict[str, str] = {}

    def __repr__(self) -> str:
        extra = "" if self.schema == "nbagent" else f", schema={self.schema!r}"
        return f"PostgresStore({self.url!r}{extra})"

    def __reduce__(self) -> tuple[Any, ...]:
        password = self._db.password.reveal() if self._db.password is not None else None
        return (_reopen, (self.url, password, self._options))

    # ------------------------------------------------------------------ reading
    async def load(self, thread: str) -> ThreadState | None:
        """The whole thread as one consistent snapshot (one statement), or None."""
        sql = self._sql.load
        row = await self._db.run(lambda conn, _: conn.execute(sql, (thread,)).fetchone())
        if row is None:
            return None
        version, meta_text, leased, messages_text, usage_text, ledger_text = row
        try:
            meta = ThreadMeta.from_dict(json.loads(meta_text))
        except _DECODE_ERRORS as exc:
            raise self._damage(thread, "its meta record", exc) from exc
        pairs = json.loads(messages_text)
        messages, steps = [], []
        for i, (step, data) in enumerate(pairs):
            try:
                messages.append(message_from_dict(data))
            except _DECODE_ERRORS as exc:
                raise self._damage(thread, f"message {i}", exc) from exc
            steps.append(step)
        ledger = {r[0]: LedgerEntry(r[0], r[1], r[2], r[3], float(r[4])) for r in json.loads(ledger_text)}
        usage = [_usage_row(r) for r in json.loads(usage_text)]
        return ThreadState(thread, int(version), messages, steps, meta, ledger, usage, leased=bool(leased))

    def _damage(self, thread: str, what: str, exc: BaseException) -> StoreCorruptError:
        message = (
            f"{self.url}: thread {thread!r} is damaged: {what} cannot be read ({type(exc).__name__}: "
            f"{exc}). It was not changed, and nbagent will not add to this thread; the other threads "
            f"are unaffected. Fix the row, or delete the thread (store.delete_thread({thread!r}))."
        )
        self._damaged[thread] = message
        return StoreCorruptError(message, path=self.url)

    async def threads(self) -> list[ThreadInfo]:
        """All stored threads, most recently updated first."""
        sql = self._sql.threads
        rows = await self._db.run(lambda conn, _: conn.execute(sql).fetchall())
        return [ThreadInfo(*r) for r in rows]

    async def checkpoints(self, thread: str) -> list[Checkpoint]:
        """The checkpoints of a thread (one per append that wrote messages or a meta record),
        oldest first."""
        sql = self._sql.checkpoints
        rows = await self._db.run(lambda conn, _: conn.execute(sql, (thread,)).fetchall())
        return [Checkpoint(*r) for r in rows]

    async def last_checkpoints(self, thread: str) -> dict[str, Checkpoint]:
        """The last checkpoint of each run of a thread, by run id (one statement); see
        `Store.last_checkpoints`."""
        sql = self._sql.last_checkpoints
        rows = await self._db.run(lambda conn, _: conn.execute(sql, (thread,)).fetchall())
        return {r[10]: Checkpoint(*r) for r in rows}

    async def usage_columns(
        self, thread: str | None = None, columns: Sequence[str] | None = None
    ) -> UsageColumns:
        """Stored usage rows as columns, in write order; see `Store.usage_columns`."""
        names = column_names(columns)
        sql = self._sql.usage_columns(names, thread is not None)
        params = (thread,) if thread is not None else ()
        rows = await self._db.run(lambda conn, _: conn.execute(sql, params).fetchall())
        return UsageColumns([encode_rows(rows, names)] if rows else [], names)

    # ------------------------------------------------------------------ writing
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
        """Append one checkpoint in one statement; see `Store.append`.

        If the connection is lost while the statement runs, whether it committed is not known:
        the retry first reads the thread's row, and a ``last_write`` mark equal to this append's
        means it did (its version is returned, nothing is written twice); otherwise the append is
        tried again, and the version check still guards it.
        """
        if self._damaged and thread in self._damaged:
            raise StoreCorruptError(self._damaged[thread], path=self.url)
        record = meta_record(meta)
        tokens_in = sum(r.input_tokens for r in usage)
        tokens_out = sum(r.output_tokens for r in usage)
        costs = [r.cost_total for r in usage if r.cost_total is not None and not math.isnan(r.cost_total)]
        title = next((m.content for m in messages if m.kind == "user"), "")  # type: ignore[union-attr]
        status = None if record is None else record.get("status")
        lease_run = None
        if record is not None and status == "running" and record.get("owner") and record.get("run_id"):
            lease_run = str(record["run_id"])
        entries = {e.call_id: e for e in ledger}  # one row per call in one statement
        write_id = os.urandom(8).hex()
        params = {
            "thread": thread, "version": version, "step": step, "now": time.time(),
            "n": len(messages), "tin": tokens_in, "tout": tokens_out, "cost": sum(costs) if costs else None,
            "meta": None if record is None else _dumps(record), "status": status,
            "title": " ".join(title.split())[:80] if title else "",
            "lease_run": lease_run, "lease_s": float(self.lease_s), "write_id": write_id,
            "msgs": _dumps([m.to_dict() for m in messages]),
            "summary": summarize(messages[-1]) if messages else "",
            "usage": _dumps([_usage_json(r) for r in usage]) if usage else None,
            "ledger": _dumps([[e.call_id, e.tool, e.args_hash, e.status, e.time] for e in entries.values()])
            if entries else None,
        }
        sql = self._sql.append_call()
        head_sql = self._sql.head

        def write(conn: Any, attempt: int) -> int | tuple[int, Any] | None:
            if attempt:
                found = conn.execute(head_sql, (thread,)).fetchone()
                if found is not None and found[1] == write_id:
                    return int(found[0])  # the lost commit had happened
            row = conn.execute(sql, params).fetchone()
            if row[0] is not None:
                return int(row[0])
            found = conn.execute(head_sql, (thread,)).fetchone()
            return (-1, None if found is None else found[0])

        got = await self._db.run(write)
        if isinstance(got, tuple):
            raise self._conflict(thread, version, got[1])
        assert isinstance(got, int)
        if record is not None:
            if lease_run is not None:
                self._db.hold(thread, lease_run)
            else:
                self._db.release(thread)
        return got

    def _conflict(self, thread: str, version: int, stored: int | None) -> ConflictError:
        if version == 0:
            return ConflictError(
                f"thread {thread!r} already exists in {self.url} (version {stored}); this writer "
                "expected a new thread (version 0). Load it again, or use another thread id.",
                path=self.url,
            )
        if stored is None:
            return ConflictError(
                f"thread {thread!r} no longer exists in {self.url} (this writer expected version "
                f"{version}); it was deleted by another writer",
                path=self.url,
            )
        return ConflictError(
            f"thread {thread!r} was changed by another writer: the store has version {stored}, this "
            f"writer expected version {version}. Nothing was written; load the thread again to "
            "continue from what the other writer saved.",
            path=self.url,
        )

    async def delete(self, thread: str) -> bool:
        """Remove a thread with its messages, usage, ledger and checkpoints; True if it existed."""
        sql = self._sql.delete
        rows = await self._db.run(lambda conn, _: conn.execute(sql, (thread,)).fetchall())
        self._damaged.pop(thread, None)
        self._db.release(thread)
        return bool(rows)

    async def _prune(self, cutoff: float) -> list[str]:
        sql = self._sql.prune
        rows = await self._db.run(lambda conn, _: conn.execute(sql, (cutoff,)).fetchall())
        for (thread,) in rows:
            self._damaged.pop(thread, None)
        return [r[0] for r in rows]

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
            raise StoreCorruptError(self._damaged[source], path=self.url)
        now, schema = time.time(), self._sql.schema
        write_id = os.urandom(8).hex()
        head_sql = self._sql.head
        record = meta_record(meta) or {}

        def work(conn: Any, attempt: int) -> int:
            if attempt:
                found = conn.execute(head_sql, (target,)).fetchone()
                if found is not None and found[1] == write_id:
                    return int(found[0])
            with conn.transaction():
                return copy_rows(conn, schema, self.url, source, target, messages, last, record, now, write_id)

        try:
            return await self._db.run(work)
        except _Undecodable as bad:
            raise self._damage(source, bad.what, bad.cause) from None

    async def close(self) -> None:
        """Close this process's connections (the store opens them again if used again)."""
        self._db.close()


def _reopen(url: str, password: str | None, options: dict[str, Any]) -> PostgresStore:
    """Unpickling: a new store for the same database (it opens its own connections)."""
    store = PostgresStore(url, **options)
    if password is not None:
        store._db.password = Secret(password)
    return store
