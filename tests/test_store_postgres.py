"""PostgresStore on a real server: credentials never shown, schema versions and migrations,
PgBouncer in transaction mode, lost connections, pickling, and the store picked by URL.

The protocol itself is asserted in tests/test_store_contract.py; crashes and two kernels at once
in tests/test_store_faults.py; the direct way of sending a run's calls (``direct=True``) in
tests/test_store_postgres_direct.py. All of these use the private cluster of tests/conftest_postgres.py.
"""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import psycopg
import pytest

from nbagent import Agent, tool
from nbagent.exceptions import (
    StoreConnectionError,
    StoreError,
    StoreVersionError,
)
from nbagent.messages import UserMessage
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import PostgresStore, open_store
from nbagent.store.postgres import SCHEMA_VERSION
from tests.pgcluster import PgCluster

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[1]


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def paused_then_done() -> FunctionModel:
    return FunctionModel(lambda messages, info: tool_call("refund", order=7) if messages[-1].kind == "user"
                         else "Refunded.")


def bad_password_url(server: PgCluster) -> str:
    return f"postgresql://nbagent:Wrong-Secret-4242@127.0.0.1:{server.port}/nbagent"


def everything_shown(exc: BaseException) -> str:
    """The text of an error as a user could ever see it: message, repr, the whole chained
    traceback, and the traceback with every frame's local variables (nbagent's frames: the
    test's own frame, which holds the URL, is left out)."""
    assert exc.__traceback__ is not None
    exc.__traceback__ = exc.__traceback__.tb_next
    return "\n".join([
        str(exc), repr(exc), "".join(traceback.format_exception(exc)),
        "".join(traceback.TracebackException.from_exception(exc, capture_locals=True).format()),
    ])


# ---------------------------------------------------------------------- credentials
async def test_the_password_never_shows_in_repr_errors_frames_or_the_view(
    postgres_server: PgCluster, pg_schema: str
) -> None:
    good = PostgresStore(postgres_server.url(), schema=pg_schema)
    assert postgres_server.password not in repr(good) and postgres_server.password not in str(good.__dict__)
    assert repr(good) == f"PostgresStore('postgresql://nbagent@127.0.0.1:{postgres_server.port}/nbagent', " \
                         f"schema={pg_schema!r})"
    agent = Agent(paused_then_done(), tools=[refund], store=good)
    assert postgres_server.password not in repr(agent)

    bad = PostgresStore(bad_password_url(postgres_server), schema=pg_schema, wait_s=2)
    with pytest.raises(StoreConnectionError) as info:
        await bad.load("t")
    shown = everything_shown(info.value)
    assert "password authentication failed" in str(info.value)
    assert f"127.0.0.1:{postgres_server.port}" in str(info.value)
    assert "Wrong-Secret-4242" not in shown and postgres_server.password not in shown
    assert info.value.__cause__ is None and info.value.__context__ is None

    # A server that is not there: a clean, quick error naming it.
    closed = PostgresStore("postgresql://nbagent:Wrong-Secret-4242@127.0.0.1:9/nbagent", wait_s=2)
    with pytest.raises(StoreConnectionError, match=r"127\.0\.0\.1:9/nbagent cannot be reached") as info:
        await closed.threads()
    assert "Wrong-Secret-4242" not in everything_shown(info.value)

    # The view: a thread that cannot be loaded says so, without the password.
    view = Agent(paused_then_done(), tools=[refund], store=bad).chat(thread="t")
    for _ in range(200):
        if "could not load" in view.status_line.value:
            break
        await asyncio.sleep(0.02)
    assert "could not load thread" in view.status_line.value and "StoreConnectionError" in view.status_line.value
    assert "password authentication failed" in view.status_line.value
    assert "Wrong-Secret-4242" not in view.status_line.value
    await good.close()


def test_a_store_pickles_as_its_url_and_reopens_in_another_process(postgres_url: str, pg_schema: str) -> None:
    """What a cluster worker (Ray, Dask) gets: the URL and options, never a live connection."""
    store = PostgresStore(postgres_url, schema=pg_schema, pool_size=2)
    asyncio.run(store.append("t", version=0, step=0, messages=[UserMessage("from the parent")]))
    asyncio.run(store.close())
    data = pickle.dumps(store)
    code = (
        "import asyncio, pickle, sys\n"
        "store = pickle.loads(sys.stdin.buffer.read())\n"
        "loaded = asyncio.run(store.load('t'))\n"
        "print(repr(store), loaded.messages[0].content)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip().endswith("from the parent")
    assert "pw-" not in out.stdout.decode()


# ---------------------------------------------------------------------- schema
async def test_migrate_false_refuses_a_database_without_tables_until_migrated(
    postgres_url: str, pg_schema: str
) -> None:
    store = PostgresStore(postgres_url, schema=pg_schema, migrate=False)
    with pytest.raises(StoreError, match=r"has no nbagent tables .*python -m nbagent.store migrate <URL> --schema"):
        await store.load("t")
    cli = [sys.executable, "-m", "nbagent.store", "migrate", postgres_url, "--schema", pg_schema]
    first = subprocess.run(cli, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().endswith(
        f"schema {pg_schema!r}: version {SCHEMA_VERSION} (migrated from version 0)")
    assert "pw-" not in first.stdout
    again = subprocess.run(cli, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert again.stdout.strip().endswith(f"version {SCHEMA_VERSION} (already up to date)")
    await store.append("t", version=0, step=0, messages=[UserMessage("now it works")])
    assert (await store.load("t")).messages == [UserMessage("now it works")]  # type: ignore[union-attr]
    await store.close()
    # A schema made by a newer nbagent is refused, and left as it is.
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{pg_schema}".schema_version (version, applied_by) VALUES (%s, %s)',
                     (SCHEMA_VERSION + 1, "future"))
    newer = PostgresStore(postgres_url, schema=pg_schema)
    with pytest.raises(StoreVersionError, match=rf"made by a newer nbagent .*schema version {SCHEMA_VERSION + 1}"):
        await newer.load("t")
    await newer.close()


async def test_a_schema_1_database_is_migrated_and_keeps_its_latest_runs_end(postgres_url: str, pg_schema: str) -> None:
    """Schema 1 (before checkpoints kept their run): migrated on first use, each thread's latest
    run gets its meta record's outcome on a checkpoint, so it keeps it when more runs follow;
    earlier runs' ends were never stored (missing)."""
    import json

    from nbagent.dataframe import runs_frame
    from nbagent.store.postgres import _schema

    s = f'"{pg_schema}"'
    meta = {"status": "failed", "run_id": "run_b", "thread_step": 2, "error": "ValueError: " + "e" * 600}
    usage = ("run_id, thread, step, time, provider, model, input_tokens, cache_read_tokens, cache_write_tokens, "
             "output_tokens, reasoning_tokens, tool_calls, usage_reported")
    with psycopg.connect(postgres_url, autocommit=True) as conn, conn.transaction():
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(f"CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
                     "applied_at timestamptz NOT NULL DEFAULT now(), applied_by text NOT NULL)")
        for statement in _schema.MIGRATIONS[0](s):
            conn.execute(statement)
        conn.execute(f"INSERT INTO {s}.schema_version (version, applied_by) VALUES (1, 'schema 1')")
        # run_a completed with its answer; run_b failed (a billed, unusable answer), its end
        # written as the meta record alone: schema 1 kept no checkpoint for that append
        conn.execute(f"INSERT INTO {s}.threads (id, version, step, meta, created, updated, title, status, messages, "
                     "input_tokens, output_tokens) VALUES ('t', 5, 2, %s, 1, 2, 'a', 'failed', 3, 20, 2)",
                     (json.dumps(meta),))
        for seq, (step, data) in enumerate([(0, {"kind": "user", "content": "a"}),
                                            (1, {"kind": "assistant", "text": "A"}),
                                            (1, {"kind": "user", "content": "b"})]):
            conn.execute(f"INSERT INTO {s}.messages VALUES ('t', %s, %s, %s, %s)",
                         (seq, step, seq + 1, json.dumps(data)))
        for version, messages, last, status in [(1, 1, "user: a", "running"), (2, 2, "assistant: A", "completed"),
                                                (3, 3, "user: b", "running")]:
            conn.execute(f"INSERT INTO {s}.checkpoints VALUES ('t', %s, 1, 1, %s, %s, 10, 1, NULL, %s)",
                         (version, messages, last, status))
        for run, step in [("run_a", 1), ("run_b", 2)]:
            conn.execute(f"INSERT INTO {s}.usage ({usage}) VALUES (%s, 't', %s, %s, 'function', 'f', 10, 0, 0, 1, 0, "
                         "0, true)", (run, step, float(step)))
    store = PostgresStore(postgres_url, schema=pg_schema)

    def ends() -> list[tuple[str, Any, Any]]:
        frame = runs_frame(store, thread="t")
        return [(r, None if st != st else st, None if e != e else e)
                for r, st, e in zip(frame["run_id"], frame["status"], frame["error"], strict=True)]

    assert await asyncio.to_thread(ends) == [("run_a", None, None), ("run_b", "failed", meta["error"])]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone() == (SCHEMA_VERSION,)
    more = await Agent(FunctionModel(lambda m, i: "ok"), store=store).run("c", thread="t")
    assert await asyncio.to_thread(ends) == [("run_a", None, None), ("run_b", "failed", meta["error"][:500]),
                                             (more.run_id, "completed", None)]
    await store.close()


def old_schema(conn: Any, s: str, version: int) -> None:
    """Make the schema `s` as an nbagent of schema `version` made it (its migrations, in one go)."""
    from nbagent.store.postgres import _schema

    conn.execute(f"CREATE SCHEMA {s}")
    conn.execute(f"CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
                 "applied_at timestamptz NOT NULL DEFAULT now(), applied_by text NOT NULL)")
    for number in range(version):
        for statement in _schema.MIGRATIONS[number](s):
            conn.execute(statement)
        conn.execute(f"INSERT INTO {s}.schema_version (version, applied_by) VALUES (%s, 'old')", (number + 1,))


async def test_a_schema_3_database_is_migrated_and_its_usage_rows_read_as_run(
    postgres_url: str, pg_schema: str
) -> None:
    """Schema 3 (before usage rows had a purpose): migrated on first use, the rows already there
    read ``"run"`` (the column's default), new rows keep theirs, in loads, columns and frames."""
    import json

    from nbagent.dataframe import usage_frame
    from nbagent.store.postgres import _schema
    from nbagent.usage import ModelCallUsage

    s = f'"{pg_schema}"'
    usage = ("run_id, thread, step, time, provider, model, input_tokens, cache_read_tokens, cache_write_tokens, "
             "output_tokens, reasoning_tokens, tool_calls, usage_reported")
    with psycopg.connect(postgres_url, autocommit=True) as conn, conn.transaction():
        old_schema(conn, s, 3)
        conn.execute(f"INSERT INTO {s}.threads (id, version, step, meta, created, updated, title, messages, "
                     "input_tokens, output_tokens) VALUES ('t', 1, 1, '{}', 1, 1, 'a', 1, 10, 1)")
        conn.execute(f"INSERT INTO {s}.messages VALUES ('t', 0, 0, 1, %s)",
                     (json.dumps({"kind": "user", "content": "a"}),))
        conn.execute(f"INSERT INTO {s}.usage ({usage}) VALUES ('run_a', 't', 1, 1.0, 'function', 'f', 10, 0, 0, 1, "
                     "0, 0, true)")
    store = PostgresStore(postgres_url, schema=pg_schema)
    loaded = await store.load("t")
    assert loaded is not None and [u.purpose for u in loaded.usage] == ["run"]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone() == (SCHEMA_VERSION,)
        columns = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'usage' "
            "ORDER BY ordinal_position", (pg_schema,))]
    assert columns == ["id", *_schema.USAGE_TYPES]
    judge = ModelCallUsage("run_b", "t", 2, 2.0, "function", "f", input_tokens=5, purpose="eval")
    await store.append("t", version=loaded.version, step=2, usage=[judge])
    assert (await store.usage_columns("t"))["purpose"] == ["run", "eval"]
    frame = await asyncio.to_thread(usage_frame, store)
    assert frame["purpose"].tolist() == ["run", "eval"]
    await store.close()


async def test_a_schema_6_database_gains_the_batch_column(postgres_url: str, pg_schema: str) -> None:
    """Schema 6 (sub-agents' columns, before ``batch``) is migrated to 7 on first use: the rows
    already there read False (the column's default) and keep their tree columns; new rows keep
    their flag (``agent.map(..., batch_api=True)``, docs/batch_api.md)."""
    from nbagent.dataframe import usage_frame
    from nbagent.usage import ModelCallUsage

    assert SCHEMA_VERSION == 7
    s = f'"{pg_schema}"'
    with psycopg.connect(postgres_url, autocommit=True) as conn, conn.transaction():
        old_schema(conn, s, 6)
        conn.execute(f"INSERT INTO {s}.threads (id, version, step, meta, created, updated, title, messages, "
                     "input_tokens, output_tokens) VALUES ('t', 1, 1, '{}', 1, 1, 'a', 0, 10, 1)")
        conn.execute(f"INSERT INTO {s}.usage (run_id, thread, step, time, provider, model, input_tokens, "
                     "cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens, tool_calls, "
                     "usage_reported, agent, depth, parent_call_id) VALUES ('run_a', 't', 1, 1.0, 'openai', "
                     "'gpt-4o-mini', 10, 0, 0, 1, 0, 0, true, 'researcher', 1, 'call_b')")
    store = PostgresStore(postgres_url, schema=pg_schema)
    loaded = await store.load("t")
    assert loaded is not None
    assert [(u.batch, u.agent, u.depth, u.parent_call_id) for u in loaded.usage] == [(False, "researcher", 1, "call_b")]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone() == (7,)
    batched = ModelCallUsage("run_b", "t", 2, 2.0, "openai", "gpt-4o-mini", input_tokens=5, batch=True)
    await store.append("t", version=loaded.version, step=2, usage=[batched])
    assert (await store.usage_columns("t"))["batch"] == [False, True]
    frame = await asyncio.to_thread(usage_frame, store)
    assert frame["batch"].tolist() == [False, True] and frame["depth"].tolist() == [1, 0]
    await store.close()


async def test_many_processes_opening_a_new_schema_at_once_all_succeed(postgres_url: str, pg_schema: str) -> None:
    code = (
        "import asyncio, sys\n"
        "from nbagent.store import PostgresStore\n"
        "from nbagent.messages import UserMessage\n"
        "s = PostgresStore(sys.argv[1], schema=sys.argv[2])\n"
        "asyncio.run(s.append(sys.argv[3], version=0, step=0, messages=[UserMessage('hi')]))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, postgres_url, pg_schema, f"t{k}"], cwd=ROOT)
             for k in range(5)]
    assert [await asyncio.to_thread(p.wait, 60) for p in procs] == [0] * 5
    store = PostgresStore(postgres_url, schema=pg_schema)
    assert sorted(i.thread for i in await store.threads()) == [f"t{k}" for k in range(5)]
    await store.close()


# ---------------------------------------------------------------------- PgBouncer, lost connections
async def test_a_paused_run_is_resumed_through_pgbouncer_in_transaction_mode(
    pgbouncer_url: str, pg_schema: str
) -> None:
    """No server-side prepared statements by default, so every call works whichever server
    connection PgBouncer hands out (psycopg would prepare after 5 uses otherwise)."""
    agents = [Agent(paused_then_done(), tools=[refund], store=PostgresStore(pgbouncer_url, schema=pg_schema))
              for _ in range(2)]
    for k in range(8):  # more calls than psycopg's default prepare threshold, from two pools
        paused = await agents[k % 2].run("refund 7", thread=f"b{k}")
        assert paused.status == "paused"
        done = await agents[(k + 1) % 2].resume(thread=f"b{k}", approve=paused.pending)
        assert done.status == "completed" and done.output == "Refunded."
    assert len(await agents[0].threads()) == 8
    for agent in agents:
        await agent.store.close()


def _terminate_backends(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'nbagent' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


async def test_connections_cut_between_steps_are_replaced_and_the_run_goes_on(
    postgres_url: str, pg_schema: str
) -> None:
    @tool
    def cut(order: int) -> str:
        """A tool during which every connection of the store is cut (a server restart, a network cut)."""
        assert _terminate_backends(postgres_url) >= 1
        return f"looked up {order}"

    store = PostgresStore(postgres_url, schema=pg_schema)
    agent = Agent(ScriptedModel([tool_call("cut", order=1), tool_call("cut", order=2), "done"]), tools=[cut],
                  store=store)
    result = await agent.run("go", thread="c")
    assert result.status == "completed" and result.output == "done"
    loaded = await store.load("c")
    assert loaded is not None and [m.kind for m in loaded.messages] == [
        "user", "assistant", "tool-result", "assistant", "tool-result", "assistant"]
    await store.close()


@pytest.mark.parametrize("call", ["append", "create_or_load"])
async def test_a_commit_whose_answer_was_lost_is_not_written_twice(
    postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """The connection drops after the server committed a write but before the answer arrived:
    the retry finds the write's mark and returns its version instead of writing it again (or
    failing with a ConflictError against itself)."""
    store = PostgresStore(postgres_url, schema=pg_schema)
    v = await store.append("t", version=0, step=0, messages=[UserMessage("one")])
    run = store._db.run
    lost: list[int] = []

    async def losing_the_answer(work: Any) -> Any:
        async def once(conn: Any, attempt: int) -> Any:
            result = await work(conn, attempt)
            if not lost:
                lost.append(attempt)
                await conn.close()
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return result

        return await run(once)

    monkeypatch.setattr(store._db, "run", losing_the_answer)
    if call == "append":
        assert await store.append("t", version=v, step=0, messages=[UserMessage("two")]) == 2
        thread, expected = "t", ["one", "two"]
    else:
        assert await store.create_or_load("new", messages=[UserMessage("two")]) == 1
        thread, expected = "new", ["two"]
    monkeypatch.undo()
    assert lost == [0]
    loaded = await store.load(thread)
    assert loaded is not None and loaded.version == len(expected)
    assert [m.content for m in loaded.messages] == expected  # type: ignore[union-attr]
    await store.close()


# ---------------------------------------------------------------------- choosing the store
def test_nbagent_store_takes_a_postgres_url(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.store import default_store

    monkeypatch.setenv("NBAGENT_STORE", postgres_url)
    store = default_store()
    assert isinstance(store, PostgresStore) and store is open_store(postgres_url)
    agent = Agent(paused_then_done(), tools=[refund])
    assert agent.store is store
    assert agent.run_sync("refund 7", thread="env-url").status == "paused"
    assert store.schema == "nbagent"
    asyncio.run(store.close())


def test_the_command_line_copies_threads_from_sqlite_into_postgres_and_back(
    tmp_path: Path, postgres_url: str
) -> None:
    from nbagent.store import SQLiteStore

    source, back = tmp_path / "mine.db", tmp_path / "back.db"
    agent = Agent(paused_then_done(), tools=[refund], store=SQLiteStore(source))
    assert agent.run_sync("refund 7", thread="cli-copy").status == "paused"
    asyncio.run(agent.store.close())

    def cli(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "nbagent.store", "copy", *args], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert cli(str(source), postgres_url, "--thread", "cli-copy") == "copied 1 thread: cli-copy"
    assert cli(postgres_url, str(back), "--thread", "cli-copy") == "copied 1 thread: cli-copy"
    refused = subprocess.run([sys.executable, "-m", "nbagent.store", "copy", str(source), str(back)],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert refused.returncode == 1 and "already exists" in refused.stderr
    # The paused run, copied there and back, is resumed from the last copy.
    again = Agent(paused_then_done(), tools=[refund], store=SQLiteStore(back))
    done = again.resume_sync(thread="cli-copy", approve=again.pending_sync("cli-copy"))
    assert done.status == "completed" and done.output == "Refunded."
    asyncio.run(again.store.close())


def test_a_store_dropped_without_close_is_collected_quietly_on_any_thread(postgres_url: str, pg_schema: str) -> None:
    """A notebook drops an agent (and its PostgresStore) without closing it, and Python's cycle
    collector frees it on some other thread (it did on a worker thread in a Ray test). Its
    connections are closed all the same, with nothing printed ("Exception ignored ...") and no
    "connection was deleted while still open" warning."""
    import gc
    import threading

    loop = asyncio.new_event_loop()  # a long-lived loop, as a kernel's: it does not shut down here
    try:
        store = PostgresStore(postgres_url, schema=pg_schema)
        loop.run_until_complete(store.threads())
        (conn,) = store._db._loops[loop].idle
        cycle: list[Any] = [store]
        cycle.append(cycle)  # only the cycle collector frees it now
        del store, cycle
        ignored: list[Any] = []
        before, sys.unraisablehook = sys.unraisablehook, ignored.append
        try:
            collector = threading.Thread(target=gc.collect)
            collector.start()
            collector.join(10)
            assert conn.closed, "the dropped store's connection was left open"
            del conn
            gc.collect()
        finally:
            sys.unraisablehook = before
        assert [f"{u.exc_type.__name__}: {u.exc_value}" for u in ignored] == []
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def test_each_event_loop_has_its_own_connections_closed_when_it_shuts_down(postgres_url: str, pg_schema: str) -> None:
    """A script's ``asyncio.run`` (or a cluster worker's) leaves no connection open behind it, nor
    its loop alive, and the store keeps working on the next loop."""
    import gc
    import weakref

    store = PostgresStore(postgres_url, schema=pg_schema)
    loops: list[Any] = []

    async def use(write: bool) -> Any:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        if write:
            await store.append("loops", version=0, step=0, messages=[UserMessage("hi")])
        await store.load("loops")
        return list((await store._db.connections()).idle)

    first = asyncio.run(use(True))
    second = asyncio.run(use(False))
    assert first and second and not set(map(id, first)) & set(map(id, second))
    assert all(c.closed for c in first + second)
    gc.collect()
    assert [ref() for ref in loops] == [None, None], "a finished loop is kept alive"
    loaded = asyncio.run(store.load("loops"))
    assert loaded is not None and [m.content for m in loaded.messages] == ["hi"]  # type: ignore[union-attr]
    asyncio.run(store.close())


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "plain"])
async def test_connections_terminated_while_runs_go_on_are_ridden_over(
    postgres_url: str, pg_schema: str, direct: bool
) -> None:
    """`pg_terminate_backend` on the store's connections, again and again, while five runs go on:
    every run completes with every step stored (docs/threads.md, "Lost connections"), on both
    ways of sending a run's calls."""
    import threading
    import time

    @tool
    async def step(n: int) -> str:
        """One step."""
        await asyncio.sleep(0.1)  # long enough for the cutter's rounds (0.1 s apart) to meet open connections
        return f"step {n}"

    def script(messages, info):  # type: ignore[no-untyped-def]
        done = sum(1 for m in messages if m.kind == "tool-result")
        return tool_call("step", n=done) if done < 4 else "done"

    store = PostgresStore(postgres_url, schema=pg_schema, direct=direct)  # its first use among the cuts
    stop, cuts = threading.Event(), [0]

    def cutter() -> None:
        while not stop.is_set():
            cuts[0] += _terminate_backends(postgres_url)
            time.sleep(0.1)

    worker = threading.Thread(target=cutter)
    worker.start()
    try:
        agent = Agent(FunctionModel(script), tools=[step], store=store)
        results = await asyncio.gather(*(agent.run("go", thread=f"cut-{i}") for i in range(5)),
                                       return_exceptions=True)
    finally:
        stop.set()
        worker.join()
    for r in results:
        if isinstance(r, BaseException):
            traceback.print_exception(r)
    assert cuts[0] >= 3
    assert [getattr(r, "status", r) for r in results] == ["completed"] * 5
    for i in range(5):
        loaded = await store.load(f"cut-{i}")
        assert loaded is not None and len(loaded.messages) == 10 and loaded.meta.status == "completed"
    await store.close()


async def test_a_connection_lost_during_the_first_use_schema_check_is_tried_again(
    postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbagent.store.postgres import _database

    real, drops = _database.Database.prepare_schema, []

    def dropping(self: Any, conn: Any) -> None:
        if not drops:  # the first check's connection is terminated under it
            drops.append(conn.info.backend_pid)
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        real(self, conn)

    monkeypatch.setattr(_database.Database, "prepare_schema", dropping)
    store = PostgresStore(postgres_url, schema=pg_schema, wait_s=20)
    result = await Agent(FunctionModel(lambda m, i: "hello"), store=store).run("hi", thread="s")
    assert drops and result.status == "completed"
    await store.close()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "plain"])
async def test_a_socket_cut_at_any_statement_of_a_run_loses_and_repeats_nothing(
    postgres_url: str, pg_schema: str, direct: bool
) -> None:
    """A proxy resets the store's connection at the n-th message it sends, for every n of a
    two-tool run after the store's first use: each run completes, each tool ran once, and the
    stored thread holds each step once, on both ways of sending a run's calls."""
    from tests.cut_proxy import CutProxy

    ran: list[str] = []

    @tool
    def lookup(order: int) -> str:
        """Look an order up."""
        ran.append(f"{thread}:{order}")
        return f"order {order}"

    with CutProxy(int(postgres_url.rsplit(":", 1)[1].split("/")[0])) as proxy:
        store = PostgresStore(proxy.url(postgres_url), schema=pg_schema, wait_s=10, direct=direct)
        await store.threads()  # the schema check: every message after this one may be cut
        first = proxy.sent
        n, thread = 0, ""
        while True:
            n += 1
            proxy.cut_at, cuts = first + n, proxy.cuts
            thread = f"cut-{n}"
            model = ScriptedModel([tool_call("lookup", order=1), tool_call("lookup", order=2), "done"])
            result = await Agent(model, tools=[lookup], store=store).run("go", thread=thread)
            assert result.status == "completed", (n, result.error)
            if proxy.cuts == cuts:  # the run sent fewer messages than n: every statement was cut once
                break
            first = proxy.sent
        await store.close()
    assert n > 5
    assert ran == [f"cut-{i}:{o}" for i in range(1, n + 1) for o in (1, 2)]
    check = PostgresStore(postgres_url, schema=pg_schema)
    for i in range(1, n + 1):
        loaded = await check.load(f"cut-{i}")
        assert loaded is not None and [m.kind for m in loaded.messages] == [
            "user", "assistant", "tool-result", "assistant", "tool-result", "assistant"], i
        assert loaded.meta.status == "completed" and len(loaded.usage) == 3
    await check.close()


@pytest.mark.parametrize(("direct", "prepare"), [(False, None), (True, None), (True, 0)],
                         ids=["plain", "direct", "direct-prepare_threshold=0"])
async def test_pgbouncer_transaction_mode_with_and_without_prepared_statements(
    pgbouncer_url: str, pg_schema: str, direct: bool, prepare: int | None
) -> None:
    """Through PgBouncer in transaction mode (server sessions shared by clients), on both ways of
    sending a run's calls, the direct one with or without prepared statements: twelve kernels'
    worth of store objects, each running threads and reading listings, usage and checkpoints, all
    complete. (It failed with psycopg's ``prepared statement "_pg3_0" already exists``.)"""

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    stores = [PostgresStore(pgbouncer_url, schema=pg_schema, direct=direct, prepare_threshold=prepare)
              for _ in range(12)]

    async def kernel(i: int) -> None:
        store = stores[i]
        model = ScriptedModel([tool_call("add", a=i, b=1), "done"] * 3)
        agent = Agent(model, tools=[add], store=store)
        for k in range(3):
            result = await agent.run(f"go {k}", thread=f"pgb-{i}")
            assert result.status == "completed", result.error
            await store.threads()
            await store.checkpoints(f"pgb-{i}")
            await store.usage_columns(f"pgb-{i}")

    import warnings

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        await asyncio.gather(*(kernel(i) for i in range(12)))
    # PgBouncer before 1.21 loses prepared statements between messages: the store says so (where
    # it saw it happen) and goes on unprepared. Nothing else is said.
    assert {str(w.message)[:60] for w in said} <= {
        "PostgresStore(prepare_threshold=...): the server lost the st"}
    assert not said or (direct and prepare is not None)
    loaded = await stores[0].load("pgb-11")
    assert loaded is not None and len(loaded.messages) == 12
    for store in stores:
        await store.close()
