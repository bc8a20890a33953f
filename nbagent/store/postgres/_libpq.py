"""One statement on libpq directly: the path of the calls every run makes (a load, an append, a
run's start).

Owns `value` (send one statement with text parameters on a connection's libpq handle, wait for
its socket on the running event loop, return the one value it gives) and `params` (the text form
of those parameters). Imports psycopg's ``pq`` and ``errors`` only (psycopg's own binding of
libpq, so the connection is the same object), on first use.

Why not ``AsyncConnection.execute``: a store call is one short statement whose answer is one text
value, and psycopg's general path (a cursor, adapters for each parameter, converting the query,
loaders for the result, a lock) cost about 0.1 ms of CPU a call, as much as the server's work.
Here a call is: send the statement, wait until the socket is readable, read the result. psycopg
still opens every connection (authentication, SSL, options), runs every other statement, and
its errors are the ones raised (`psycopg.errors` from the server's answer, ``OperationalError``
when the connection is lost), so the store's retries and messages are the same. The connections
are opened with ``client_encoding=UTF8``, the encoding of the text sent and read here.

The plain path: ``NBAGENT_PG_DIRECT=0`` in the environment (or `DIRECT` set to False, read at
each call) sends these calls through psycopg's own ``execute`` (an ``AsyncRawCursor``: the same
``$n`` statements, never prepared) instead; everything else stays the same. The
store contract suite runs on both paths. Measured on 2026-12-02 (`bench/bench_postgres.py
--quick`, two runs each, interleaved): a tool round trip takes 2.2-2.4 ms direct and 2.9-3.8 ms
plain, 0.23-0.24x and 0.31-0.32x of LangGraph's (the project's bar is 0.3x); bench/README.md,
"Fast paths".

Prepared statements follow the store's ``prepare_threshold`` (on the direct path; psycopg's
own prepared statements are off on every connection, since their names, ``_pg3_0``, ... per
connection, collide where a pooler shares server sessions): None (the default) prepares
nothing on the server; a number *n* prepares a statement on a connection once it has run there
*n* times (0: at once), which saves the server parsing and planning the call each time (6-8% of
a tool round trip here). A prepared statement is named after its text (``nbagent_<hash>``), so
two clients that share a server session can only ever find the same statement under a name; one
the server no longer has is prepared again. When it is gone again at once, a pooler in
transaction mode without prepared-statement support (PgBouncer before 1.21, or without
``max_prepared_statements``) sits in between: that connection then runs its calls unprepared,
and a `RuntimeWarning` says so once.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import warnings
import weakref
from collections.abc import Iterable
from typing import Any

__all__ = ["DIRECT", "params", "value"]

DIRECT = os.environ.get("NBAGENT_PG_DIRECT", "1").strip() != "0"
"""Whether a load, an append and a run's start go to libpq directly (the default) or through
psycopg's ``execute`` (``NBAGENT_PG_DIRECT=0``): see the module docstring."""

_TUPLES_OK = 2
"""libpq's PGRES_TUPLES_OK (``psycopg.pq.ExecStatus.TUPLES_OK``)."""
_COMMAND_OK = 1
"""PGRES_COMMAND_OK: a statement that returns no rows."""
_SQLSTATE = ord("C")
"""libpq's PG_DIAG_SQLSTATE (``psycopg.pq.DiagnosticField.SQLSTATE``)."""
_NO_SUCH_STATEMENT = b"26000"
"""SQLSTATE invalid_sql_statement_name: the server has no prepared statement of that name."""
_ALREADY_PREPARED = b"42P05"
"""SQLSTATE duplicate_prepared_statement: one of that name is there, the same statement (names
come from the text)."""

_names: dict[bytes, bytes] = {}
"""Statement text -> its prepared statement's name."""
_uses: weakref.WeakKeyDictionary[Any, dict[bytes, int]] = weakref.WeakKeyDictionary()
"""Per connection: how many times each statement ran there, or -1 once it is prepared there."""
_pooled: weakref.WeakSet[Any] = weakref.WeakSet()
"""Connections found behind a pooler that loses prepared statements: nothing is prepared there."""


def params(values: Iterable[Any]) -> list[bytes | None]:
    """The text form (UTF-8) of statement parameters: None, str, bool, int or float.

    Raises:
        psycopg.DataError: a text holds a NUL character, which PostgreSQL text cannot hold (libpq
            would cut the text there), in psycopg's own words; call it inside `Database.run`, which
            turns it into a `StoreError` as for any other statement.
    """
    out: list[bytes | None] = []
    for v in values:
        if v is None:
            out.append(None)
        elif isinstance(v, str):
            if "\x00" in v:
                import psycopg

                raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
            out.append(v.encode())
        elif isinstance(v, bool):
            out.append(b"t" if v else b"f")
        elif isinstance(v, float):
            out.append(repr(v).encode())  # the shortest text that reads back as the same float
        else:
            out.append(str(int(v)).encode())
    return out


async def value(
    conn: Any, sql: bytes, values: Iterable[Any], prepare_threshold: int | None = None
) -> bytes | None:
    """Run `sql` (``$1``-style placeholders) with the parameters `values` (None, str, bool, int,
    float) on the psycopg connection `conn` (in autocommit mode, idle, used by nobody else) and
    return the first column of its first row as UTF-8 text (None for no row or NULL). With a
    `prepare_threshold`, the statement is prepared on `conn` once it has run there that many
    times (see the module). `DIRECT` False: through psycopg's ``execute`` instead.

    Cancelled while it waits, the connection is left in the middle of the statement (not idle):
    its owner closes it instead of using it again.

    Raises:
        psycopg.Error: the server's error (its `psycopg.errors` class, with ``sqlstate``), or
            ``OperationalError`` when the connection was lost.
    """
    if not DIRECT:
        return await _through_psycopg(conn, sql, values)
    args = params(values)
    if prepare_threshold is None:
        conn.pgconn.send_query_params(sql, args)
        return _value(await _results(conn.pgconn))
    uses = _uses.get(conn)
    if uses is None:
        uses = _uses[conn] = {}
    count = uses.get(sql, 0)
    if 0 <= count < prepare_threshold or conn in _pooled:
        uses[sql] = count + 1
        conn.pgconn.send_query_params(sql, args)
        return _value(await _results(conn.pgconn))
    name = _names.get(sql)
    if name is None:
        name = _names[sql] = b"nbagent_" + hashlib.sha256(sql).hexdigest()[:24].encode()
    if count >= 0:
        await _prepare(conn.pgconn, name, sql)
        uses[sql] = -1
    conn.pgconn.send_query_prepared(name, args)
    results = await _results(conn.pgconn)
    if results and results[0].error_field(_SQLSTATE) == _NO_SUCH_STATEMENT:  # nothing ran: again
        await _prepare(conn.pgconn, name, sql)
        conn.pgconn.send_query_prepared(name, args)
        results = await _results(conn.pgconn)
        if results and results[0].error_field(_SQLSTATE) == _NO_SUCH_STATEMENT:  # gone at once: a pooler
            _pooled.add(conn)
            warnings.warn(
                "PostgresStore(prepare_threshold=...): the server lost the store's prepared statements "
                "between two messages, as a pooler in transaction mode does (PgBouncer before 1.21, or "
                "without max_prepared_statements); this connection's calls run unprepared",
                RuntimeWarning, stacklevel=2)
            conn.pgconn.send_query_params(sql, args)
            results = await _results(conn.pgconn)
    return _value(results)


async def _through_psycopg(conn: Any, sql: bytes, values: Iterable[Any]) -> bytes | None:
    """`value` through psycopg's own execute: the plain path (nothing prepared)."""
    import psycopg

    cursor = psycopg.AsyncRawCursor(conn)
    try:
        await cursor.execute(sql, list(values))
        row = await cursor.fetchone() if cursor.description else None
    finally:
        await cursor.close()
    found = None if row is None else row[0]
    return found.encode() if isinstance(found, str) else found


async def _prepare(pgconn: Any, name: bytes, sql: bytes) -> None:
    """Prepare `sql` as `name` on the connection (a statement of that name already there is the
    same statement: names come from the text)."""
    pgconn.send_prepare(name, sql)
    results = await _results(pgconn)
    if results and results[0].status != _COMMAND_OK and results[0].error_field(_SQLSTATE) != _ALREADY_PREPARED:
        _value(results)  # raises the server's error


async def _results(pgconn: Any) -> list[Any]:
    """Send what libpq holds and collect the results of the statement sent."""
    loop = asyncio.get_running_loop()
    while pgconn.flush():  # a long statement the socket would not take at once
        await _ready(loop, pgconn.socket, writing=True)
        pgconn.consume_input()
    results = []
    while True:
        while pgconn.is_busy():
            await _ready(loop, pgconn.socket)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            break
        results.append(result)
    return results


def _value(results: list[Any]) -> bytes | None:
    """The first column of the first row of a statement's results, or its error raised."""
    first = results[0] if results else None
    if first is not None and first.status == _TUPLES_OK:
        return first.get_value(0, 0) if first.ntuples else None  # type: ignore[no-any-return]
    if first is not None and first.status == _COMMAND_OK:
        return None
    from psycopg import errors

    if first is None:
        raise errors.InterfaceError("the server sent no result")
    raise errors.error_from_result(first, encoding="utf-8")


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, writing: bool = False) -> None:
    """Wait until `fd` is readable (or, `writing`, writable or readable: libpq's advice while a
    send is pending, so a server that talks first is read)."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    if writing:
        loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
        if writing:
            loop.remove_writer(fd)
