"""The direct way of sending a run's calls (`PostgresStore(direct=True)`): its targeted suite.

A load, an append and a run's start go through psycopg's execute by default; ``direct=True``
sends them to libpq directly (nbagent/store/postgres/_libpq.py). The store contract's tests of
what those calls carry run on both ways (tests/test_store_contract.py, ``direct_too``), and so
do the lost-connection and PgBouncer tests (tests/test_store_postgres.py). Here: the switch, the
guard on psycopg's release, and what the direct way does by hand (the server's errors, NUL,
cancellation, a statement larger than the socket's buffer, TLS, prepared statements), each
pinned to what psycopg's execute does. All on the private cluster of tests/conftest_postgres.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from nbagent import Agent, tool
from nbagent.exceptions import StoreError, StoreReadOnlyError, UserError
from nbagent.messages import UserMessage
from nbagent.models import FunctionModel, tool_call
from nbagent.store import PostgresStore
from nbagent.store.postgres import _libpq
from tests.pgcluster import PgCluster
from tests.test_store_postgres import paused_then_done, refund

pytestmark = pytest.mark.postgres
WAYS = pytest.mark.parametrize("direct", [True, False], ids=["direct", "plain"])


@pytest.fixture
def ways(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The way each load, append and run's start took ("direct" or "plain"), in order."""
    taken: list[str] = []
    direct, plain = _libpq.value, _libpq.plain_value

    async def by_libpq(conn: Any, sql: bytes, values: Any, prepare_threshold: int | None = None) -> Any:
        taken.append("direct")
        return await direct(conn, sql, values, prepare_threshold)

    async def by_psycopg(conn: Any, sql: bytes, values: Any) -> Any:
        taken.append("plain")
        return await plain(conn, sql, values)

    monkeypatch.setattr(_libpq, "value", by_libpq)
    monkeypatch.setattr(_libpq, "plain_value", by_psycopg)
    yield taken


async def pause_and_resume(store: PostgresStore) -> None:
    """A run that starts a thread, pauses for an approval and is resumed (every kind of call)."""
    agent = Agent(paused_then_done(), tools=[refund], store=store)
    paused = await agent.run("refund 7", thread="p")
    done = await agent.resume(thread="p", approve=paused.pending)
    assert done.status == "completed" and done.output == "Refunded."
    await store.close()


# ---------------------------------------------------------------------- the switch
def test_the_tested_psycopg_is_installed() -> None:
    """The tests run on a release the direct way is tested with (the test extra pins it), so they
    test the direct way and not its fallback; a new release joins `TESTED` once this suite passed
    on it."""
    assert _libpq.direct_usable(), f"psycopg {psycopg.__version__} is not in _libpq.TESTED {_libpq.TESTED}"


async def test_calls_go_through_psycopg_unless_a_store_asks_for_the_direct_way(
    postgres_url: str, pg_schema: str, ways: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await pause_and_resume(PostgresStore(postgres_url, schema=pg_schema))
    assert ways and set(ways) == {"plain"}
    ways.clear()
    await pause_and_resume(PostgresStore(postgres_url, schema=pg_schema + "_d", direct=True))
    assert ways and set(ways) == {"direct"}
    # NBAGENT_PG_DIRECT=1: the default of stores made without direct= (NBAGENT_STORE's, a worker's).
    monkeypatch.setenv("NBAGENT_PG_DIRECT", "1")
    ways.clear()
    await pause_and_resume(PostgresStore(postgres_url, schema=pg_schema + "_e"))
    assert ways and set(ways) == {"direct"}
    ways.clear()
    await pause_and_resume(PostgresStore(postgres_url, schema=pg_schema + "_f", direct=False))
    assert ways and set(ways) == {"plain"}


def test_the_choice_travels_with_a_pickled_store_and_prepare_threshold_needs_it(postgres_url: str) -> None:
    for direct in (True, False):
        store = pickle.loads(pickle.dumps(PostgresStore(postgres_url, direct=direct)))
        assert store._send.direct is direct
    with pytest.raises(UserError, match=r"only the direct way does: PostgresStore\(url, direct=True, prepare_thr"):
        PostgresStore(postgres_url, prepare_threshold=0)
    with pytest.raises(UserError, match="prepare_threshold must be None or a number >= 0"):
        PostgresStore(postgres_url, direct=True, prepare_threshold=-1)


@pytest.mark.parametrize("release", ["3.1.20", "3.4.0", "4.0.0.dev1"])
async def test_a_psycopg_release_it_was_not_tested_with_gets_psycopgs_execute_and_one_warning(
    postgres_url: str, pg_schema: str, ways: list[str], monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    """Not an error: both ways give the same results, and a routine upgrade of psycopg must not
    stop a team's store. The warning says what happened and how to have the direct way back."""
    monkeypatch.setattr(psycopg, "__version__", release)
    monkeypatch.setattr(_libpq, "_usable", None)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        await pause_and_resume(PostgresStore(postgres_url, schema=pg_schema, direct=True, prepare_threshold=0))
        await pause_and_resume(PostgresStore(postgres_url, schema=pg_schema + "_2", direct=True))
    assert [str(w.message).split("; ")[0] for w in said] == [
        f"PostgresStore(direct=True): psycopg {release} is not a release the direct way was tested with (3.2, 3.3)"]
    assert "sends its calls through psycopg's own execute instead" in str(said[0].message)
    assert said[0].category is RuntimeWarning
    assert ways and set(ways) == {"plain"}
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        rows = await (await conn.execute("SELECT count(*) FROM pg_prepared_statements")).fetchone()
    assert rows == (0,)


# ---------------------------------------------------------------------- what the direct way does by hand
@pytest.mark.parametrize("statement", [
    "SELECT 1 / $1::integer",  # division_by_zero
    "SELECT $1::integer FROM nowhere",  # undefined_table
    "SELEKT $1::integer",  # syntax_error
    "SELECT $1::text::integer + 'é'::integer",  # invalid_text_representation, a message in UTF-8
    "DO $$ BEGIN RAISE EXCEPTION 'mine, é' USING ERRCODE = 'ZZ123', DETAIL = 'more'; END $$",  # no class
])
async def test_the_servers_errors_are_the_ones_psycopgs_execute_raises(postgres_url: str, statement: str) -> None:
    """The same class, SQLSTATE and message from either way (psycopg's own execute is the oracle)."""
    raised = []
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        args = [] if statement.startswith("DO") else [0]
        for send in (_libpq.plain_value, _libpq.value):
            with pytest.raises(psycopg.Error) as info:
                await send(conn, statement.encode(), args)
            raised.append((type(info.value), info.value.sqlstate, str(info.value)))
    assert raised[0] == raised[1]
    assert raised[0][1] is not None


@WAYS
async def test_a_nul_character_is_refused_with_a_store_error_and_nothing_is_written(
    postgres_url: str, pg_schema: str, direct: bool
) -> None:
    """libpq reads a text parameter up to its first NUL: "a\\x00b" would silently become "a".
    The direct way refuses it as psycopg's execute does."""
    store = PostgresStore(postgres_url, schema=pg_schema, direct=direct)
    for call in (store.append("a\x00b", version=0, step=0, messages=[UserMessage("x")]),
                 store.create_or_load("a\x00b", messages=[UserMessage("x")]), store.load("a\x00b")):
        with pytest.raises(StoreError, match="cannot contain NUL"):
            await call
    assert await store.threads() == []
    await store.close()


@WAYS
async def test_a_call_cancelled_while_the_server_works_leaves_nothing_for_the_next_call(
    postgres_url: str, pg_schema: str, direct: bool
) -> None:
    """A load cancelled while its statement waits for a lock: its connection is not used again
    (the next call on it would read the cancelled statement's answer, or fail)."""
    store = PostgresStore(postgres_url, schema=pg_schema, pool_size=1, direct=direct)
    for thread in "ab":
        await store.append(thread, version=0, step=0, messages=[UserMessage(thread.upper())])
    locker = await psycopg.AsyncConnection.connect(postgres_url)  # a transaction: holds the lock
    await locker.execute(f'LOCK TABLE "{pg_schema}".threads IN ACCESS EXCLUSIVE MODE')
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(store.load("a"), 0.5)
    await locker.rollback()
    await locker.close()
    loaded = await store.load("b")
    assert loaded is not None and [m.content for m in loaded.messages] == ["B"]  # type: ignore[union-attr]
    assert await store.append("b", version=1, step=1, messages=[UserMessage("C")]) == 2
    await store.close()


@WAYS
async def test_the_servers_error_keeps_its_kind_read_only_database(
    postgres_server: PgCluster, postgres_url: str, pg_schema: str, direct: bool
) -> None:
    writer = PostgresStore(postgres_url, schema=pg_schema)
    await writer.append("t", version=0, step=0, messages=[UserMessage("one")])
    await writer.close()
    url = postgres_url + "?options=-c%20default_transaction_read_only%3Don"
    store = PostgresStore(url, schema=pg_schema, direct=direct)
    loaded = await store.load("t")
    assert loaded is not None and loaded.version == 1
    for call in (store.append("t", version=1, step=1, messages=[UserMessage("two")]),
                 store.create_or_load("new", messages=[UserMessage("x")])):
        with pytest.raises(StoreReadOnlyError, match=r"cannot be written: .*read-only transaction") as info:
            await call
        assert postgres_server.password not in str(info.value)
    await store.close()


async def test_a_statement_larger_than_the_sockets_buffer_is_sent_in_pieces(postgres_url: str) -> None:
    """A send buffer of a few kilobytes: libpq takes the statement in many flushes, the loop
    waiting for the socket between them, and the answer is still the statement's."""
    import socket

    value = _libpq.value
    conn = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    try:
        sock = socket.socket(fileno=conn.pgconn.socket)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        finally:
            sock.detach()  # the socket stays libpq's
        text = "é" * 3_000_000
        assert await value(conn, b"SELECT length($1::text)", [text]) == b"3000000"
        digest = hashlib.md5(text.encode()).hexdigest().encode()
        assert await value(conn, b"SELECT md5($1::text)", [text]) == digest
    finally:
        await conn.close()


async def test_prepare_threshold_prepares_a_statement_after_that_many_runs_and_again_when_the_server_lost_it(
    postgres_url: str,
) -> None:
    value = _libpq.value
    async def prepared(conn: psycopg.AsyncConnection[Any]) -> list[str]:
        rows = await (await conn.execute("SELECT name FROM pg_prepared_statements ORDER BY name")).fetchall()
        return [r[0] for r in rows]

    conn = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    try:
        sql = b"SELECT 10 / $1::integer"
        for _ in range(2):
            assert await value(conn, sql, [5], prepare_threshold=2) == b"2"
        assert await prepared(conn) == []
        assert await value(conn, sql, [2], prepare_threshold=2) == b"5"
        names = await prepared(conn)
        assert len(names) == 1 and names[0].startswith("nbagent_")
        with pytest.raises(psycopg.errors.DivisionByZero):  # the server's error, as unprepared
            await value(conn, sql, [0], prepare_threshold=2)
        await conn.execute("DEALLOCATE ALL")  # what a pooler moving the session would leave
        assert await value(conn, sql, [1], prepare_threshold=2) == b"10"
        assert await prepared(conn) == names
        assert await value(conn, b"SELECT 3", [], prepare_threshold=None) == b"3"
        assert await prepared(conn) == names  # None: never prepared
    finally:
        await conn.close()


async def test_a_store_with_prepare_threshold_0_runs_pauses_and_resumes_on_prepared_calls(
    postgres_url: str, pg_schema: str
) -> None:
    store = PostgresStore(postgres_url, schema=pg_schema, direct=True, prepare_threshold=0, pool_size=1)
    agent = Agent(paused_then_done(), tools=[refund], store=store)
    paused = await agent.run("refund 7", thread="p")
    done = await agent.resume(thread="p", approve=paused.pending)
    assert done.status == "completed" and done.output == "Refunded."

    async def names(conn: Any, _: int) -> list[str]:
        sql = "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'nbagent\\_%'"
        rows = await (await conn.execute(sql)).fetchall()
        return sorted(r[0].split(".")[1].split("(")[0] for r in rows)

    assert await store._db.run(names) == ["append_step", "begin_thread", "load_thread"]
    await store.close()


def test_a_run_over_tls_with_megabytes_of_text_is_stored_whole() -> None:
    """Over SSL a statement is sent in several pieces and an answer read in several (libpq's TLS
    records): a 4 MB prompt and 1 MB tool results go in, and come back, whole."""
    from tests.pgcluster import bin_dir

    binaries = bin_dir()
    assert binaries is not None
    cluster = PgCluster.create(binaries, tls=True)
    try:
        url = cluster.url() + "?sslmode=require"
        with psycopg.connect(url) as conn:
            assert conn.pgconn.ssl_in_use

        @tool
        def page(n: int) -> str:
            """A big page."""
            return "é" * 1_000_000

        model = FunctionModel(lambda messages, info: tool_call("page", n=1) if messages[-1].kind != "tool-result"
                              or sum(m.kind == "tool-result" for m in messages) < 2 else "done")

        async def main() -> list[int]:
            store = PostgresStore(url, direct=True)
            result = await Agent(model, tools=[page], store=store).run("x" * 4_000_000, thread="big")
            assert result.status == "completed", result.error
            await store.close()
            reader = PostgresStore(url)  # a new store: read back from the server
            loaded = await reader.load("big")
            await reader.close()
            assert loaded is not None
            return [len(m.content) for m in loaded.messages if m.kind != "assistant"]  # type: ignore[union-attr]

        assert asyncio.run(main()) == [4_000_000, 1_000_000, 1_000_000]
    finally:
        cluster.stop()
