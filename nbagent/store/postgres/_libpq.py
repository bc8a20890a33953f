"""The calls every run makes (a load, an append, a run's start): one statement each, sent
through psycopg's own execute (the default) or, with ``PostgresStore(direct=True)``, to libpq
directly.

Owns `Sender` (which of the two ways one store's calls take), `plain_value` and `value` (one
statement with text parameters, its one text value back, each way), `params` (the text form of
those parameters), `direct_default` (``NBAGENT_PG_DIRECT``) and `direct_usable` (the check of
psycopg's version the direct way needs). Imports psycopg (its documented API: ``pq``, psycopg's
own binding of libpq, so the connection is the same object; ``errors.lookup``) on first use.

Why psycopg's execute is the default (measured with `bench/bench_pg_paths.py` on 2026-12-07;
bench/README.md, "Fast paths"): sending the statement straight to libpq saves psycopg's cursor,
adapters, query conversion and result loaders, about a third of the client's CPU a call (0.07-0.25
ms there), 18-25% of a tool round trip's CPU against an instant fake model, and at most 2.5% of a
step whose model takes 0.2 s to answer: nothing a user of a real model sees. For that it
rests on psycopg's low-level ``pq`` objects, needs the loop's ``add_reader`` (psycopg's own
waiting needs it too: it refuses Windows' ``ProactorEventLoop`` either way), and is one more way
to test. So the direct way is opt-in, for whoever wants those percent, and guarded: it runs only
on the psycopg releases it is tested with (`TESTED`); on another, the store falls back to
psycopg's execute and says so once (`RuntimeWarning`), since both ways give the same results and
a routine upgrade of psycopg must not stop a team's store.

The direct way: send the statement, wait until the socket is readable, read the result. psycopg
still opens every connection (authentication, SSL, options) and runs every other statement; its
errors are the ones raised (the `psycopg.errors` class of the server's SQLSTATE, looked up with
the documented ``errors.lookup``; ``OperationalError`` when the connection is lost), so the
store's retries and messages are the same. The connections are opened with
``client_encoding=UTF8``, the encoding of the text sent and read here.

Prepared statements follow the store's ``prepare_threshold``, on the direct way only (psycopg's
own prepared statements are off on every connection, since their names, ``_pg3_0``, ... per
connection, collide where a pooler shares server sessions): None (the default) prepares nothing
on the server; a number *n* prepares a statement on a connection once it has run there *n* times
(0: at once), which saves the server parsing and planning the call each time (6-8% of a tool
round trip here). A prepared statement is named after its text (``nbagent_<hash>``), so two
clients that share a server session can only ever find the same statement under a name; one
the server no longer has is prepared again. When it is gone again at once, a pooler in
transaction mode without prepared-statement support (PgBouncer before 1.21, or without
``max_prepared_statements``) sits in between: that connection then runs its calls unprepared,
and a `RuntimeWarning` says so once.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import warnings
import weakref
from collections.abc import Iterable
from typing import Any

__all__ = ["TESTED", "Sender", "direct_default", "direct_usable", "params", "plain_value", "value"]

TESTED = ((3, 2), (3, 3))
"""The psycopg releases (major, minor) the direct way is tested with: 3.2.13 and 3.3.9, by
tests/test_store_postgres_direct.py. Another release, older or newer, gets psycopg's execute."""

_TUPLES_OK = 2
"""libpq's PGRES_TUPLES_OK (``psycopg.pq.ExecStatus.TUPLES_OK``)."""
_COMMAND_OK = 1
"""PGRES_COMMAND_OK: a statement that returns no rows."""
_SQLSTATE = ord("C")
"""libpq's PG_DIAG_SQLSTATE (``psycopg.pq.DiagnosticField.SQLSTATE``)."""
_SEVERITY = ord("S")
"""PG_DIAG_SEVERITY: ``ERROR``, ``FATAL``, ... (in the server's language), which leads the message."""
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
_usable: bool | None = None
"""Whether this process's psycopg is one of `TESTED` (None until a direct call asks)."""


def direct_default() -> bool:
    """``NBAGENT_PG_DIRECT=1`` in the environment: stores made without ``direct=`` (as
    ``NBAGENT_STORE=postgresql://...`` makes them) send their calls to libpq directly."""
    return os.environ.get("NBAGENT_PG_DIRECT", "").strip() == "1"


def direct_usable() -> bool:
    """Whether the direct way may run in this process: psycopg is one of the `TESTED` releases.
    Otherwise a `RuntimeWarning` says so, once per process, and the stores that asked for it use
    psycopg's execute."""
    global _usable
    if _usable is None:
        import psycopg

        found = tuple(int(part) for part in re.findall(r"\d+", psycopg.__version__)[:2])
        _usable = found in TESTED
        if not _usable:
            tested = ", ".join(f"{major}.{minor}" for major, minor in TESTED)
            warnings.warn(
                f"PostgresStore(direct=True): psycopg {psycopg.__version__} is not a release the direct "
                f"way was tested with ({tested}); the store sends its calls through psycopg's own execute "
                "instead (the same results, about 0.1 ms more CPU a call, and no prepare_threshold). "
                "Pin psycopg to a tested release, or upgrade nbagent, to have it back",
                RuntimeWarning, stacklevel=3)
    return _usable


class Sender:
    """How one store's load, append and run's start reach the server: `direct` (libpq, with
    `prepare_threshold`) while this process's psycopg allows it (`direct_usable`), else
    psycopg's execute."""

    __slots__ = ("direct", "prepare_threshold")

    def __init__(self, direct: bool, prepare_threshold: int | None) -> None:
        self.direct = direct
        self.prepare_threshold = prepare_threshold

    async def value(self, conn: Any, sql: bytes, values: Iterable[Any]) -> bytes | None:
        """The first column of the first row of `sql` run with `values` (see `value`)."""
        if self.direct and direct_usable():
            return await value(conn, sql, values, self.prepare_threshold)
        return await plain_value(conn, sql, values)


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
    float) on the libpq handle of the psycopg connection `conn` (in autocommit mode, idle, used by
    nobody else) and return the first column of its first row as UTF-8 text (None for no row or
    NULL): the direct way. With a `prepare_threshold`, the statement is prepared on `conn` once
    it has run there that many times (see the module).

    Cancelled while it waits, the connection is left in the middle of the statement (not idle):
    its owner closes it instead of using it again.

    Raises:
        psycopg.Error: the server's error (its `psycopg.errors` class, with ``sqlstate``), or
            ``OperationalError`` when the connection was lost.
    """
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


async def plain_value(conn: Any, sql: bytes, values: Iterable[Any]) -> bytes | None:
    """`value` through psycopg's own execute (an ``AsyncRawCursor``: the same ``$n`` statement,
    never prepared): the default way.

    Raises:
        psycopg.Error: as `value`; also ``DataError`` for a text that holds a NUL character.
    """
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
        return first.get_value(0, 0) if first.ntuples else None
    if first is not None and first.status == _COMMAND_OK:
        return None
    raise _error(first)


def _error(result: Any) -> Exception:
    """The server's error in `result` (None: no result at all) as psycopg raises it: the
    `psycopg.errors` class of its SQLSTATE (``errors.lookup``, documented), its message without
    the leading severity. A SQLSTATE psycopg has no class for gives ``DatabaseError`` with that
    ``sqlstate``, which is all the store reads of it."""
    from psycopg import errors

    if result is None:
        return errors.InterfaceError("the server sent no result")
    state = (result.error_field(_SQLSTATE) or b"").decode("ascii", "replace")
    message = result.error_message.decode("utf-8", "replace").strip()
    severity = (result.error_field(_SEVERITY) or b"").decode("utf-8", "replace")
    if severity and message.startswith(severity + ":"):
        message = message[len(severity) + 1:].strip()
    try:
        kind = errors.lookup(state)
    except KeyError:
        kind = errors.DatabaseError
    error = kind(message or "no error details available")
    if not error.sqlstate and state:
        error.sqlstate = state
    return error


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
