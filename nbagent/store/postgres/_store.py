"""The `PostgresStore` class: the store protocol on a PostgreSQL database.

Owns the protocol's calls (load, append, a run's start, listings, delete, prune, fork copy,
usage columns) and the store's picklable identity (its URL and options). Imports `_conninfo`,
`_database` (connections, retries, leases, errors), `_records` (the JSON of records), `_schema`,
`_sql` (the statements), `_copy`, the store protocol, messages, usage and exceptions; psycopg only
through `_database`, on first use.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ...exceptions import ConflictError, StoreCorruptError, UserError
from ...messages import Message
from ...usage import ModelCallUsage
from .._columnar import UsageColumns, column_names, encode_rows
from ..base import Checkpoint, LedgerEntry, Store, ThreadInfo, ThreadState
from ..meta import ThreadMeta, meta_record
from ._conninfo import Secret, split_password
from ._copy import Undecodable, copy_rows
from ._database import Database
from ._libpq import Sender, direct_default
from ._records import append_params, decode_thread
from ._schema import USAGE_TYPES, quote_schema
from ._sql import APPEND_ARGS, BEGIN_ARGS, Statements
from ._text import is_encoded, restore_text


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
        pool_size: connections each event loop of this process may have open at once.
        direct: send the calls every run makes (a load, an append, a run's start) to libpq
            directly instead of through psycopg's execute: about a third less CPU a call, the
            same results (docs/threads.md, "Connections"). None (the default) means
            ``NBAGENT_PG_DIRECT=1`` in the environment, else off. Only on the psycopg releases
            it is tested with; on another the store uses psycopg's execute and says so once
            (`RuntimeWarning`).
        prepare_threshold: None (the default) never prepares statements on the server. A
            number *n* (with ``direct=True``) prepares the store's hot calls (load, append, a
            run's start) on a connection after *n* runs there; ``0`` prepares at once and makes
            a tool round trip 6-8% faster. Works directly and through PgBouncer 1.21+ with
            ``max_prepared_statements``; behind an older pooler in transaction mode a connection
            falls back to unprepared calls with a `RuntimeWarning` (docs/threads.md).
        wait_s: how long a call waits for a connection, and keeps trying again after the
            connection was lost, before it fails with `StoreConnectionError`.
        lease_s: how long a run's lease lasts without being renewed (renewed every third of it).

    Raises:
        UserError: psycopg is not installed (``pip install "nbagent[postgres]"``), or a bad
            option (a `prepare_threshold` without the direct way, which alone prepares).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = "nbagent",
        migrate: bool = True,
        pool_size: int = 4,
        direct: bool | None = None,
        prepare_threshold: int | None = None,
        wait_s: float = 15.0,
        lease_s: float = 30.0,
    ) -> None:
        if importlib.util.find_spec("psycopg") is None:
            raise UserError('PostgresStore needs psycopg 3: pip install "nbagent[postgres]"')
        if not isinstance(url, str) or not url.strip():
            raise UserError(f"PostgresStore needs a PostgreSQL URL, got {type(url).__name__}")
        if pool_size < 1 or wait_s <= 0 or lease_s <= 0:
            raise UserError("pool_size must be at least 1, and wait_s and lease_s positive")
        if prepare_threshold is not None and (type(prepare_threshold) is not int or prepare_threshold < 0):
            raise UserError(f"prepare_threshold must be None or a number >= 0, got {prepare_threshold!r}")
        direct = direct_default() if direct is None else bool(direct)
        if prepare_threshold is not None and not direct:
            raise UserError(
                "prepare_threshold prepares the store's calls on the server, which only the direct way does: "
                f"PostgresStore(url, direct=True, prepare_threshold={prepare_threshold})")
        conninfo, password = split_password(url)
        self.url = conninfo
        """The URL without its password (what the repr and errors show)."""
        self.schema = schema
        self._options = {"schema": schema, "migrate": migrate, "pool_size": pool_size, "direct": direct,
                         "prepare_threshold": prepare_threshold, "wait_s": wait_s, "lease_s": lease_s}
        self._sql = Statements(quote_schema(schema))
        self._db = Database(
            conninfo, Secret(password) if password is not None else None, schema,
            display=conninfo + ("" if schema == "nbagent" else f" (schema {schema})"),
            migrate=migrate, pool_size=pool_size, wait_s=wait_s, lease_s=lease_s,
        )
        self._send = Sender(direct, prepare_threshold)
        """How the load, the append and a run's start reach the server (`_libpq`)."""
        self._db.leases.renew_sql = self._sql.renew
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
        sql, send = self._sql.load_call, self._send

        async def read(conn: Any, _: int) -> bytes | None:
            return await send.value(conn, sql, (thread,))

        found = await self._db.run(read)
        return None if found is None else decode_thread(thread, found, self._damage)

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
        rows = await self._db.fetchall(sql)
        return [ThreadInfo(*r) for r in rows]

    async def checkpoints(self, thread: str) -> list[Checkpoint]:
        """The checkpoints of a thread (one per append that wrote messages or a meta record),
        oldest first."""
        sql = self._sql.checkpoints
        rows = await self._db.fetchall(sql, (thread,))
        return [_checkpoint(r) for r in rows]

    async def last_checkpoints(self, thread: str) -> dict[str, Checkpoint]:
        """The last checkpoint of each run of a thread, by run id (one statement); see
        `Store.last_checkpoints`."""
        sql = self._sql.last_checkpoints
        rows = await self._db.fetchall(sql, (thread,))
        return {r[10]: _checkpoint(r) for r in rows}

    async def usage_columns(
        self, thread: str | None = None, columns: Sequence[str] | None = None
    ) -> UsageColumns:
        """Stored usage rows as columns, in write order; see `Store.usage_columns`."""
        names = column_names(columns)
        sql = self._sql.usage_columns(names, thread is not None)
        params = (thread,) if thread is not None else ()
        rows = await self._db.fetchall(sql, params)
        return UsageColumns([encode_rows(_restore_rows(rows, names), names)] if rows else [], names)

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
        fields, record, lease_run = append_params(thread, step, messages, usage, ledger, meta, self.lease_s)
        fields["version"] = version
        sql, args = self._sql.append_call, [fields[name] for name, _ in APPEND_ARGS]
        head_sql, send = self._sql.head, self._send
        write_id = fields["write_id"]

        async def write(conn: Any, attempt: int) -> int | tuple[int, Any] | None:
            if attempt and (landed := await _landed(conn, head_sql, thread, write_id)) is not None:
                return landed
            written = await send.value(conn, sql, args)
            if written is not None:
                return int(written)
            found = await (await conn.execute(head_sql, (thread,))).fetchone()
            return (-1, None if found is None else found[0])

        got = await self._db.run(write)
        if isinstance(got, tuple):
            raise self._conflict(thread, version, got[1])
        assert isinstance(got, int)
        self._lease(thread, record, lease_run)
        return got

    async def create_or_load(
        self,
        thread: str,
        *,
        step: int = 0,
        messages: Sequence[Message] = (),
        meta: ThreadMeta | Mapping[str, Any] | None = None,
    ) -> int | ThreadState:
        """Start a new thread, or read the stored one, in one statement; see
        `Store.create_or_load`. A lost connection is handled as in `append`."""
        fields, record, lease_run = append_params(thread, step, messages, (), (), meta, self.lease_s)
        sql = self._sql.begin_call
        args = [fields[name] for name, _ in BEGIN_ARGS]
        head_sql, send = self._sql.head, self._send
        write_id = fields["write_id"]

        async def begin(conn: Any, attempt: int) -> int | bytes | None:
            if attempt and (landed := await _landed(conn, head_sql, thread, write_id)) is not None:
                return landed
            return await send.value(conn, sql, args)

        got = await self._db.run(begin)
        if got is None:  # started and deleted by other writers meanwhile: the slow way
            return await super().create_or_load(thread, step=step, messages=messages, meta=meta)
        if isinstance(got, int) or not got.startswith(b"["):
            self._lease(thread, record, lease_run)
            return int(got)
        return decode_thread(thread, got, self._damage)

    def _lease(self, thread: str, record: dict[str, Any] | None, lease_run: str | None) -> None:
        """After a write with a meta record: renew the thread's lease while its run goes on here."""
        if record is not None:
            if lease_run is not None:
                self._db.leases.hold(thread, lease_run)
            else:
                self._db.leases.release(thread)

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

    async def delete_thread(self, thread: str) -> bool:
        """Remove a thread with its messages, usage, ledger, checkpoints and recorded model calls;
        True if it existed."""
        sql = self._sql.delete
        rows = await self._db.fetchall(sql, (thread,))
        self._damaged.pop(thread, None)
        self._db.leases.release(thread)
        return bool(rows)

    async def _prune(self, cutoff: float) -> list[str]:
        sql = self._sql.prune
        rows = await self._db.fetchall(sql, (cutoff,))
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

        async def work(conn: Any, attempt: int) -> int:
            if attempt and (landed := await _landed(conn, head_sql, target, write_id)) is not None:
                return landed
            async with conn.transaction():
                return await copy_rows(conn, schema, self.url, source, target, messages, last, record, now,
                                       write_id)

        try:
            return await self._db.run(work)
        except Undecodable as bad:
            raise self._damage(source, bad.what, bad.cause) from None

    async def add_recording(self, thread: str, entry: Mapping[str, Any]) -> None:
        """Keep one recorded model call in the ``recordings`` table; see `Store.add_recording`."""
        import json

        sql = f"INSERT INTO {quote_schema(self.schema)}.recordings (thread, data) VALUES (%s, %s)"
        data = json.dumps(dict(entry), ensure_ascii=False, default=str)

        async def work(conn: Any, _: int) -> None:
            await conn.execute(sql, (thread, data))

        await self._db.run(work)

    async def recordings(self, threads: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The recorded model calls of `threads` (None: all); see `Store.recordings`."""
        import json

        table = f"{quote_schema(self.schema)}.recordings"
        if threads is None:
            rows = await self._db.fetchall(f"SELECT data FROM {table} ORDER BY id")
        else:
            rows = await self._db.fetchall(
                f"SELECT data FROM {table} WHERE thread = ANY(%s::text[]) "
                "ORDER BY array_position(%s::text[], thread), id",
                (list(threads), list(threads)))
        return [json.loads(r[0]) for r in rows]

    async def close(self) -> None:
        """Close this process's connections (the store opens them again if used again)."""
        self._db.close()


def _checkpoint(row: Sequence[Any]) -> Checkpoint:
    """A checkpoint row, its error decoded (`_text`: the meta record's error, as stored)."""
    checkpoint = Checkpoint(*row)
    checkpoint.error = restore_text(checkpoint.error)
    return checkpoint


def _restore_rows(rows: list[Any], names: Sequence[str]) -> list[Any]:
    """Usage rows with their text columns decoded where a value was encoded (`_text`)."""
    text_at = [i for i, name in enumerate(names) if USAGE_TYPES[name] == "text"]
    if not any(is_encoded(r[i]) for r in rows for i in text_at):
        return rows
    return [tuple(restore_text(v) if i in text_at else v for i, v in enumerate(r)) for r in rows]


async def _landed(conn: Any, head_sql: str, thread: str, write_id: str) -> int | None:
    """After a lost connection: the thread's version if the write marked `write_id` had in fact
    committed (its ``last_write`` mark is on the thread), else None (try it again)."""
    found = await (await conn.execute(head_sql, (thread,))).fetchone()
    return int(found[0]) if found is not None and found[1] == write_id else None


def _reopen(url: str, password: str | None, options: dict[str, Any]) -> PostgresStore:
    """Unpickling: a new store for the same database (it opens its own connections)."""
    store = PostgresStore(url, **options)
    if password is not None:
        store._db.password = Secret(password)
    return store
