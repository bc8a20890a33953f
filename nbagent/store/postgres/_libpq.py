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
when the connection is lost), so the store's retries and messages are the same. Like psycopg
with ``prepare_threshold=None``, this prepares nothing on the server (PgBouncer's transaction
mode), and the connections are opened with ``client_encoding=UTF8``, the encoding of the text
sent and read here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["params", "value"]

_TUPLES_OK = 2
"""libpq's PGRES_TUPLES_OK (``psycopg.pq.ExecStatus.TUPLES_OK``)."""
_COMMAND_OK = 1
"""PGRES_COMMAND_OK: a statement that returns no rows."""


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


async def value(conn: Any, sql: bytes, args: list[bytes | None]) -> bytes | None:
    """Run `sql` (``$1``-style placeholders) with the text parameters `args` on the psycopg
    connection `conn` (in autocommit mode, idle, used by nobody else) and return the first
    column of its first row as text (None for no row or NULL).

    Cancelled while it waits, the connection is left in the middle of the statement (not idle):
    its owner closes it instead of using it again.

    Raises:
        psycopg.Error: the server's error (its `psycopg.errors` class, with ``sqlstate``), or
            ``OperationalError`` when the connection was lost.
    """
    pgconn = conn.pgconn
    loop = asyncio.get_running_loop()
    pgconn.send_query_params(sql, args)
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
