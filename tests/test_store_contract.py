"""The store contract: one suite run against `MemoryStore`, `SQLiteStore` and `PostgresStore`.

Every behaviour the run loop relies on (appends and loads, optimistic versions, listings,
checkpoints, usage columns, the ledger, paused runs and decisions with who made them, fork,
delete and prune, concurrent writers) is asserted the same way for each store. The PostgreSQL
variant runs against the private cluster of tests/conftest_postgres.py (marker ``postgres``;
``NBAGENT_SKIP_POSTGRES=1`` skips it); durable-only tests skip `MemoryStore`.

`PostgresStore` sends a load, an append and a run's start through psycopg's execute; with
``direct=True`` it sends them to libpq directly. The tests of what those three calls carry
(`direct_too`) also run on the direct way (kind ``postgres-direct``, statements prepared on the
server); tests/test_store_postgres_direct.py has the rest of its targeted suite.
``NBAGENT_PG_DIRECT=1`` runs this whole suite's ``postgres`` kind on the direct way.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, RunContext, tool
from nbagent.exceptions import ConflictError, StoreError, UserError
from nbagent.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import LedgerEntry, MemoryStore, PostgresStore, SQLiteStore, Store
from nbagent.store.meta import ThreadMeta
from nbagent.usage import ModelCallUsage

ROOT = Path(__file__).resolve().parents[1]
KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]
DURABLE = KINDS[1:]
DIRECT = pytest.param("postgres-direct", id="postgres-direct", marks=pytest.mark.postgres)
"""`PostgresStore(direct=True, prepare_threshold=0)`: a load, an append and a run's start sent to
libpq directly, as statements prepared on the server."""
direct_too = pytest.mark.parametrize("stores", [*KINDS, DIRECT], indirect=True)
"""A test of what a load, an append or a run's start carries: also on the direct way."""
direct_too_durable = pytest.mark.parametrize("durable", [*DURABLE, DIRECT], indirect=True)


class Stores:
    """Opens stores of one kind on one storage: `new()` is another store object (another kernel)
    on the same threads; `spec` is what a child process needs to open it."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.kind = kind
        self.opened: list[Store] = []
        self.memory = MemoryStore()
        if kind.startswith("postgres"):
            self.spec = request.getfixturevalue("postgres_url")
            self.schema = request.getfixturevalue("pg_schema")
            if kind == "postgres-direct":
                request.getfixturevalue("monkeypatch").setenv("NBAGENT_PG_DIRECT", "1")  # child processes too
        else:
            self.spec, self.schema = str(tmp_path / "store" / "threads.db"), ""

    def new(self) -> Store:
        store: Store
        if self.kind == "memory":
            return self.memory
        if self.kind == "sqlite":
            store = SQLiteStore(self.spec)
        elif self.kind == "postgres-direct":
            store = PostgresStore(self.spec, schema=self.schema, direct=True, prepare_threshold=0)
        else:
            store = PostgresStore(self.spec, schema=self.schema)
        self.opened.append(store)
        return store

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


@pytest.fixture(params=KINDS)
async def stores(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    made = Stores(request.param, request, tmp_path)
    yield made
    await made.close()


@pytest.fixture(params=DURABLE)
async def durable(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    made = Stores(request.param, request, tmp_path)
    yield made
    await made.close()


@pytest.fixture
def store(stores: Stores) -> Store:
    return stores.new()


def row(thread: str, step: int, cost: float | None = 0.001) -> ModelCallUsage:
    return ModelCallUsage("run_1", thread, step, 1.0 + step, "function", "f", input_tokens=10 * step,
                          output_tokens=step, cost_total=cost)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def add_then_answer(messages, info):  # type: ignore[no-untyped-def]
    if messages[-1].kind == "user":
        return tool_call("add", a=len(messages), b=1)
    return f"the sum is {messages[-1].content}"


# ---------------------------------------------------------------------- the protocol
@direct_too
async def test_append_load_round_trip(store: Store) -> None:
    calls = [ToolCall("c1", "add", '{"a": 1, "b": 2}')]
    v = await store.append("t", version=0, step=0, messages=[UserMessage("héllo ✓")], meta={"status": "running"})
    v = await store.append(
        "t", version=v, step=1, messages=[AssistantMessage(None, calls, reasoning="r")],
        usage=[row("t", 1)], ledger=[LedgerEntry("c1", "add", "h", "started", 5.0)],
    )
    v = await store.append(
        "t", version=v, step=1, messages=[ToolResultMessage("c1", "add", "3")],
        ledger=[LedgerEntry("c1", "add", "h", "finished", 6.0)], meta={"status": "done"},
    )
    assert v == 3
    loaded = await store.load("t")
    assert loaded is not None and loaded.version == 3
    assert loaded.messages == [UserMessage("héllo ✓"), AssistantMessage(None, calls, reasoning="r"),
                               ToolResultMessage("c1", "add", "3")]
    assert loaded.message_steps == [0, 1, 1]
    assert loaded.meta.status == "done"
    assert loaded.ledger == {"c1": LedgerEntry("c1", "add", "h", "finished", 6.0)}
    assert loaded.usage == [row("t", 1)]
    assert await store.load("missing") is None


async def test_changing_what_was_loaded_changes_nothing_stored(store: Store) -> None:
    # A caller that edits the record it loaded (before its next append, which may then conflict
    # and never happen) must not change the thread behind the store's back: every store hands out
    # a copy, as SQLite and PostgreSQL do by decoding the record again.
    written = ThreadMeta(status="paused", always_allowed=["add"], decisions={}, state={"n": 1})
    await store.append("t", version=0, step=0, messages=[UserMessage("hi")], meta=written)
    loaded = await store.load("t")
    assert loaded is not None
    loaded.meta.always_allowed.append("delete")
    loaded.meta.state["n"] = 2
    loaded.meta.status = "failed"
    again = await store.load("t")
    assert again is not None
    assert (again.meta.status, again.meta.always_allowed, again.meta.state) == ("paused", ["add"], {"n": 1})


@direct_too
async def test_create_or_load_starts_a_new_thread_or_reads_the_stored_one(store: Store) -> None:
    """A run's first store call: the prompt and meta record are written only on a new thread;
    a stored thread comes back as it is, with nothing written (its version unchanged)."""
    got = await store.create_or_load("t", messages=[UserMessage("first")], meta={"status": "running", "run_id": "r1"})
    assert got == 1
    again = await store.create_or_load("t", messages=[UserMessage("second")], meta={"status": "running"})
    assert not isinstance(again, int) and again.version == 1
    assert [m.content for m in again.messages] == ["first"]  # type: ignore[union-attr]
    assert again.meta.status == "running" and again.meta.run_id == "r1"
    v = await store.append("t", version=1, step=1, messages=[AssistantMessage("hi")], meta={"status": "completed"})
    loaded = await store.load("t")
    assert loaded is not None and loaded.version == v == 2 and loaded.meta.status == "completed"
    assert [c.messages for c in await store.checkpoints("t")] == [1, 2]


@direct_too_durable
async def test_a_thread_started_by_two_writers_at_once_is_written_once(durable: Stores) -> None:
    """Two kernels send the first prompt of one thread at once: one starts it, the other gets it
    as stored (and its run then continues it, or refuses while the first runs)."""
    stores = [durable.new(), durable.new()]
    got = await asyncio.gather(*(s.create_or_load("both", messages=[UserMessage(f"from {i}")])
                                 for i, s in enumerate(stores)))
    assert sorted(isinstance(g, int) for g in got) == [False, True]
    loaded = await stores[0].load("both")
    assert loaded is not None and loaded.version == 1 and len(loaded.messages) == 1


@direct_too
async def test_conflict_names_thread_and_both_versions(store: Store) -> None:
    v = await store.append("t", version=0, step=0, messages=[UserMessage("a")])
    await store.append("t", version=v, step=0, messages=[UserMessage("b")])
    with pytest.raises(ConflictError, match=r"thread 't'.*version 2.*expected version 1"):
        await store.append("t", version=v, step=0, messages=[UserMessage("lost?")], usage=[row("t", 1)],
                           ledger=[LedgerEntry("x", "add", "h", "started")])
    with pytest.raises(ConflictError, match="already exists"):
        await store.append("t", version=0, step=0, messages=[UserMessage("new?")])
    loaded = await store.load("t")
    assert loaded is not None and [m.content for m in loaded.messages] == ["a", "b"]  # type: ignore[union-attr]
    assert loaded.usage == [] and loaded.ledger == {}, "the losing append wrote nothing at all"


def another_writer_after_each_load(store: Store, times: int) -> None:
    """After each of `store`'s next `times` loads, another writer appends to the loaded thread
    before the loader can (what a run of another kernel does)."""
    load = store.load

    async def load_then_another_writer(thread: str) -> Any:
        nonlocal times
        loaded = await load(thread)
        if loaded is not None and times > 0:
            times -= 1
            await store.append(thread, version=loaded.version, step=loaded.step + 1,
                               messages=[UserMessage(f"meanwhile {times}")])
        return loaded

    store.load = load_then_another_writer


async def test_update_loads_again_after_a_conflict_and_decides_again(store: Store) -> None:
    from nbagent.store.base import Change

    await store.append("t", version=0, step=3, messages=[UserMessage("a")])
    seen: list[tuple[int, int]] = []

    def change(loaded: Any) -> Change:
        seen.append((loaded.version, loaded.step))
        return Change(usage=[row("t", loaded.step)], ledger=[LedgerEntry("c1", "add", "h", "finished")])

    another_writer_after_each_load(store, 2)
    version = await store.update("t", change, wait=0)
    assert seen == [(1, 3), (2, 4), (3, 5)]  # each time as it then was
    loaded = await store.load("t")
    assert loaded is not None and version == loaded.version == 4
    assert [m.content for m in loaded.messages] == ["a", "meanwhile 1", "meanwhile 0"]  # type: ignore[union-attr]
    assert [r.step for r in loaded.usage] == [5] and loaded.ledger["c1"].status == "finished"
    assert await store.update("t", lambda loaded: None) is None  # nothing to write: nothing written
    assert await store.update("nowhere", change) is None
    assert (await store.load("t")).version == 4  # type: ignore[union-attr]
    another_writer_after_each_load(store, 5)
    with pytest.raises(ConflictError):
        await store.update("t", change, attempts=3, wait=0)


async def test_threads_checkpoints_delete_thread(store: Store) -> None:
    v = await store.append("one", version=0, step=0, messages=[UserMessage("First   question\nhere")],
                           meta={"status": "running"})
    v = await store.append("one", version=v, step=1, messages=[AssistantMessage("answer")], usage=[row("one", 1, 0.5)])
    await store.append("one", version=v, step=1, usage=[row("one", 2, None)], meta={"status": "completed"})
    await asyncio.sleep(0.01)
    await store.append("two", version=0, step=0, messages=[UserMessage("Second")])
    infos = await store.threads()
    assert [(i.thread, i.messages, i.status, i.title) for i in infos] == [
        ("two", 1, None, "Second"), ("one", 2, "completed", "First question here")]
    cps = await store.checkpoints("one")
    # One per append that wrote messages or a meta record (the last: the meta record alone).
    assert [(c.version, c.step, c.messages, c.last_message, c.input_tokens, c.output_tokens, c.cost_total,
             c.status) for c in cps] == [(1, 0, 1, "user: First question here", 0, 0, None, "running"),
                                         (2, 1, 2, "assistant: answer", 10, 1, 0.5, "running"),
                                         (3, 1, 2, "assistant: answer", 30, 3, 0.5, "completed")]
    assert await store.delete_thread("one") is True
    assert await store.delete_thread("one") is False
    assert await store.load("one") is None and await store.checkpoints("one") == []
    assert (await store.usage_columns())["thread"] == []
    assert [i.thread for i in await store.threads()] == ["two"]


async def test_usage_columns(store: Store) -> None:
    v = await store.append("a", version=0, step=1, usage=[row("a", 1), row("a", 2, None)])
    await store.append("b", version=0, step=1, usage=[row("b", 3)])
    await store.append("a", version=v, step=2, usage=[row("a", 4)])
    cols = await store.usage_columns("a")
    assert cols["input_tokens"] == [10, 20, 40] and cols["cost_total"] == [0.001, None, 0.001]
    assert cols["usage_reported"] == [True] * 3
    everything = await store.usage_columns(columns=["thread", "step"])
    assert sorted(zip(everything["thread"], everything["step"], strict=True)) == [
        ("a", 1), ("a", 2), ("a", 4), ("b", 3)]
    assert (await store.usage_columns("nobody")).length == 0
    with pytest.raises(UserError, match="unknown usage columns"):
        await store.usage_columns(columns=["tokens"])


async def test_usage_purpose_and_context_round_trip(stores: Stores) -> None:
    """Each row's `purpose` (a compaction summary, a judge call, the run's own calls) and its
    request's size by part (`context`) come back from another store object, in loads, usage
    columns and copies."""
    store = stores.new()
    rows = [row("a", 1), row("a", 1), row("a", 2)]  # step 1's call and its compaction, then a judge
    rows[1].purpose, rows[2].purpose = "compaction", "eval"
    rows[0].context = '{"system":2,"tools":3,"history":0,"tool_results":0,"latest":5,"window":128000}'
    v = await store.append("a", version=0, step=1, messages=[UserMessage("q")], usage=rows[:2])
    await store.append("a", version=v, step=2, messages=[AssistantMessage("done")], usage=rows[2:])
    other = stores.new()
    loaded = await other.load("a")
    assert loaded is not None and [r.to_dict() for r in loaded.usage] == [r.to_dict() for r in rows]
    assert (await other.usage_columns("a"))["purpose"] == ["run", "compaction", "eval"]
    assert (await other.usage_columns("a", columns=["context"]))["context"] == [rows[0].context, None, None]
    assert loaded.usage[0].context_parts == {"system": 2, "tools": 3, "history": 0, "tool_results": 0,
                                             "latest": 5, "window": 128000}
    subset = await other.usage_columns(columns=["purpose", "step"])
    assert dict(subset) == {"step": [1, 1, 2], "purpose": ["run", "compaction", "eval"]}
    await other.copy("a", "b", messages=2)
    copied = await stores.new().load("b")
    assert copied is not None and [r.purpose for r in copied.usage] == ["run", "compaction", "eval"]
    assert [r.context for r in copied.usage] == [rows[0].context, None, None]


async def test_prune_deletes_what_was_not_written_since(store: Store) -> None:
    await store.append("old", version=0, step=0, messages=[UserMessage("old")], usage=[row("old", 1)])
    await asyncio.sleep(0.05)
    cut = time.time()
    await asyncio.sleep(0.05)
    await store.append("new", version=0, step=0, messages=[UserMessage("new")])
    from datetime import datetime, timedelta

    assert await store.prune(older_than=timedelta(days=1)) == []
    assert await store.prune(older_than=datetime.fromtimestamp(cut)) == ["old"]
    assert await store.load("old") is None and (await store.usage_columns("old")).length == 0
    assert [i.thread for i in await store.threads()] == ["new"]
    assert await store.prune(older_than=0) == ["new"]
    with pytest.raises(UserError, match="older_than"):
        await store.prune(older_than="yesterday")  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the agent on the store
@direct_too
async def test_paused_run_decisions_and_who_decided_survive_a_new_store_object(stores: Stores) -> None:
    model = ScriptedModel([[tool_call("add", a=1, b=2), tool_call("refund", order=7), tool_call("refund", order=8)],
                           "done"])
    agent = Agent(model, tools=[add, refund], store=stores.new())
    paused = await agent.run("go", thread="p")
    assert paused.status == "paused" and [p.name for p in paused.pending] == ["refund", "refund"]
    other = Agent(model, tools=[add, refund], store=stores.new())  # another kernel
    waiting = await other.pending("p")
    assert [p.args for p in waiting] == [{"order": 7}, {"order": 8}]
    done = await other.resume(thread="p", approve=[waiting[0]], deny={waiting[1].id: "too big"}, decided_by="ada")
    assert done.status == "completed" and done.output == "done"
    stored = await stores.new().load("p")
    assert stored is not None and stored.meta.status == "completed"
    results = {m.call_id: m for m in stored.messages if m.kind == "tool-result"}  # type: ignore[union-attr]
    assert [(results[p.id].decision, results[p.id].decided_by) for p in waiting] == [
        ("approved", "ada"), ("denied", "ada")]
    assert results[waiting[1].id].content.startswith("denied by the user: too big\n")
    assert {e.status for e in stored.ledger.values()} == {"finished", "denied"}
    assert [u.step for u in stored.usage] == [1, 2]


async def test_thread_usage_and_history_survive_a_new_store_object(durable: Stores) -> None:
    agent = Agent(FunctionModel(add_then_answer), tools=[add], store=durable.new())
    await agent.run("one", thread="u")
    await agent.run("two", thread="u")
    later = Agent(FunctionModel(add_then_answer), tools=[add], store=durable.new())
    usage = await later.thread_usage("u")
    assert usage.requests == 4 and usage.input_tokens > 0 and usage.tool_calls == 2
    assert [c.step for c in usage.calls] == [1, 2, 3, 4]
    assert [c.step for c in await later.checkpoints("u")] == [0, 1, 1, 2, 2, 3, 3, 4]


async def test_fork_edits_a_tool_result_and_continues(store: Store) -> None:
    agent = Agent(FunctionModel(add_then_answer), tools=[add], store=store)
    first = await agent.run("add please", thread="src")
    assert first.output == "the sum is 2"
    await agent.run("again", thread="src")
    fork = await agent.fork("src", at_step=1, edit={"content": "41"})
    copied = await store.load(fork)
    assert copied is not None and [m.kind for m in copied.messages] == ["user", "assistant", "tool-result"]
    assert copied.messages[-1].content == "41" and copied.messages[1] == first.messages[1]  # type: ignore[union-attr]
    assert [u.step for u in copied.usage] == [1]
    assert set(copied.ledger) == {first.messages[1].tool_calls[0].id}  # type: ignore[union-attr]
    assert copied.meta.status == "forked" and copied.meta.forked_from["thread"] == "src"  # type: ignore[index]
    result = await agent.resume(thread=fork)
    assert result.output == "the sum is 41"
    assert (await agent.thread_usage(fork)).requests == 2
    source = await store.load("src")
    assert source is not None and len(source.messages) == 8, "the source thread is unchanged"
    infos = {i.thread: i for i in await agent.threads()}
    assert infos[fork].title == "add please" and infos[fork].status == "completed"
    with pytest.raises(ConflictError, match="already exists"):
        await agent.fork("src", at_step=1, new_thread=fork)
    with pytest.raises((UserError, StoreError), match="not in the store"):
        await agent.fork("nope")


async def test_fork_of_a_paused_step_never_leaves_a_call_without_result(store: Store) -> None:
    def model(messages, info):  # type: ignore[no-untyped-def]
        if messages[-1].kind == "user":
            return [tool_call("add", a=1, b=2), tool_call("refund", order=7)]
        return "done"

    agent = Agent(FunctionModel(model), tools=[add, refund], store=store)
    assert (await agent.run("go", thread="p")).status == "paused"
    f = await agent.fork("p", at_step=1)
    loaded = await store.load(f)
    assert loaded is not None and [m.kind for m in loaded.messages] == ["user"]
    assert loaded.usage == [] and loaded.ledger == {}
    result = await agent.resume(thread=f)
    assert result.status == "paused" and [p.name for p in result.pending] == ["refund"]


async def test_crash_right_after_an_answer_keeps_step_numbers(durable: Stores) -> None:
    """Killed after the model's answer was stored but before its tools started: on resume the
    results and the next model call carry the right step numbers (usage rows are not doubled)."""
    inner = durable.new()

    class CrashBeforeSecondTool(Store):
        started = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        async def load(self, thread):  # type: ignore[no-untyped-def,override]
            return await inner.load(thread)

        async def append(self, thread, **kwargs):  # type: ignore[no-untyped-def,override]
            if any(e.status == "started" for e in kwargs.get("ledger", ())):
                self.started += 1
                if self.started == 2:
                    raise KeyboardInterrupt  # stands for the process dying here
            return await inner.append(thread, **kwargs)

    def model(messages, info):  # type: ignore[no-untyped-def]
        answers = sum(m.kind == "assistant" for m in messages)
        return tool_call("add", a=answers, b=1) if answers < 2 else "done"

    with pytest.raises(KeyboardInterrupt):
        await Agent(FunctionModel(model), tools=[add], store=CrashBeforeSecondTool()).run("go", thread="t")
    agent = Agent(FunctionModel(model), tools=[add], store=durable.new())
    result = await agent.resume(thread="t")
    assert result.output == "done"
    loaded = await agent.store.load("t")
    assert loaded is not None
    assert [(m.kind, s) for m, s in zip(loaded.messages, loaded.message_steps, strict=True)] == [
        ("user", 0), ("assistant", 1), ("tool-result", 1), ("assistant", 2), ("tool-result", 2), ("assistant", 3)]
    assert [u.step for u in loaded.usage] == [1, 2, 3]


# ---------------------------------------------------------------------- concurrency
async def test_many_threads_written_from_os_threads(store: Store) -> None:
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        async def go() -> None:
            v = 0
            for i in range(30):
                v = await store.append(f"t{k}", version=v, step=i, messages=[UserMessage(f"{k}:{i}")],
                                       usage=[row(f"t{k}", i)])

        try:
            asyncio.run(go())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    for k in range(6):
        loaded = await store.load(f"t{k}")
        assert loaded is not None and [m.content for m in loaded.messages] == [  # type: ignore[union-attr]
            f"{k}:{i}" for i in range(30)]
        assert len(loaded.usage) == 30


_WRITER = """
import asyncio, sys
from nbagent.store import open_store, PostgresStore
from nbagent.messages import UserMessage
from nbagent.exceptions import ConflictError
async def main(spec, schema, name):
    s = PostgresStore(spec, schema=schema) if schema else open_store(spec)
    v = 0
    for i in range(25):
        v = await s.append(name, version=v, step=i, messages=[UserMessage(f"{name}:{i}")])
    # and all of them increment one shared thread: conflicts are retried, no update is lost
    done = 0
    while done < 10:
        loaded = await s.load("shared")
        try:
            await s.append("shared", version=loaded.version, step=0, messages=[UserMessage(f"{name}+{done}")])
            done += 1
        except ConflictError:
            pass
    await s.close()
asyncio.run(main(*sys.argv[1:]))
"""


@direct_too_durable
async def test_many_writers_in_processes_never_lose_an_update(durable: Stores) -> None:
    first = durable.new()
    await first.append("shared", version=0, step=0, messages=[UserMessage("start")])
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, durable.spec, durable.schema, f"p{k}"], cwd=ROOT)
             for k in range(4)]
    assert [await asyncio.to_thread(p.wait, 120) for p in procs] == [0] * 4
    for k in range(4):
        loaded = await first.load(f"p{k}")
        assert loaded is not None and len(loaded.messages) == 25
    shared = await first.load("shared")
    assert shared is not None and len(shared.messages) == 41 and shared.version == 41
    assert sorted(m.content for m in shared.messages[1:]) == sorted(  # type: ignore[union-attr]
        f"p{k}+{i}" for k in range(4) for i in range(10))


# ---------------------------------------------------------------------- copy between stores
async def test_copy_between_stores_keeps_what_a_resume_needs(stores: Stores, tmp_path: Path) -> None:
    """A thread copied out of this store into another (SQLite) and back is the same thread: a
    paused run copied over can be approved and completed from the copy."""
    from nbagent.store import copy

    model = ScriptedModel([tool_call("add", a=1, b=2), [tool_call("refund", order=7)], "done"])
    agent = Agent(model, tools=[add, refund], store=stores.new())
    paused = await agent.run("go", thread="p")
    assert paused.status == "paused"
    original = await agent.store.load("p")
    other = SQLiteStore(tmp_path / "other.db")
    assert await copy(agent.store, other, threads=["p"]) == ["p"]
    with pytest.raises(ConflictError, match="already exists"):
        await copy(agent.store, other, threads=["p"])
    await agent.store.delete_thread("p")
    assert await copy(other, agent.store) == ["p"]
    back = await agent.store.load("p")
    assert original is not None and back is not None
    for name in ("messages", "message_steps", "meta", "ledger", "usage"):
        assert getattr(back, name) == getattr(original, name), name
    def rows(cps: list[Any]) -> list[tuple[Any, ...]]:
        return [(c.step, c.messages, c.last_message, c.input_tokens, c.output_tokens, c.status, c.run_id,
                 c.stop_reason, c.error) for c in cps]

    assert rows(await agent.checkpoints("p")) == rows(await other.checkpoints("p"))
    assert rows(await agent.checkpoints("p"))[-1][5:7] == ("paused", paused.run_id)
    done = await agent.resume(thread="p", approve=(await agent.pending("p")))
    assert done.status == "completed" and done.output == "done"
    with pytest.raises(StoreError, match="not in"):
        await copy(other, agent.store, threads=["nope"])
    await other.close()


# ---------------------------------------------------------------------- how every run ended
def outcomes_model(messages, info):  # type: ignore[no-untyped-def]
    """Answers by the latest prompt: "refund" needs an approval, "loop" calls tools until the step
    limit stops it, "break" fails on its second model call (a long error), "fine" adds then answers."""
    last_user = max(i for i, m in enumerate(messages) if m.kind == "user")
    prompt, answers = messages[last_user].content, sum(m.kind == "assistant" for m in messages[last_user:])
    if prompt == "refund":
        return tool_call("refund", order=1) if answers == 0 else "refunded"
    if prompt == "break" and answers == 1:
        raise ValueError("the server broke: " + "x" * 700)
    if prompt == "fine" and answers == 1:
        return "fine"
    return tool_call("add", a=1, b=answers)


async def test_every_run_keeps_how_it_ended_through_copies_and_forks(stores: Stores) -> None:
    """runs_frame from a store: each run's status, stop reason and error (the error's first 500
    characters) from its last checkpoint, the latest run's from the meta record; the same after
    copying the thread to another store and back, and in forks (whole, or cut inside a run)."""
    from nbagent.dataframe import runs_frame
    from nbagent.store import copy

    store = stores.new()
    agent = Agent(FunctionModel(outcomes_model), tools=[add, refund], store=store)
    paused = await agent.run("refund", thread="t")
    resumed = await agent.resume(paused, approve=paused.pending)
    stopped = await Agent(FunctionModel(outcomes_model), tools=[add], store=store, max_steps=1).run("loop", thread="t")
    failed = await agent.run("break", thread="t")
    fine = await agent.run("fine", thread="t")
    runs = [paused, resumed, stopped, failed, fine]
    assert [r.status for r in runs] == ["paused", "completed", "stopped", "failed", "completed"]
    assert failed.error is not None and len(failed.error) > 700
    columns = ["run_id", "status", "stop_reason", "error", "steps"]
    expected = [(r.run_id, r.status, r.stop_reason, r.error, r.steps) for r in runs]
    expected[3] = (failed.run_id, "failed", None, failed.error[:500], 1)  # a checkpoint keeps 500 characters

    async def ends(source: Any, thread: str) -> list[tuple[Any, ...]]:
        frame = (await asyncio.to_thread(runs_frame, source, thread=thread))[columns].astype(object)
        return [tuple(None if v is None or v != v else v for v in row) for row in frame.itertuples(index=False)]

    assert await ends(store, "t") == expected
    assert await ends(stores.new(), "t") == expected  # another kernel
    assert await ends(agent, None) == expected  # type: ignore[arg-type]

    other = MemoryStore()  # copied out and back: nbagent.store.copy replays every checkpoint
    await copy(store, other, threads=["t"])
    assert await ends(other, "t") == expected
    await copy(other, store, threads=["t"], replace=True)
    assert await ends(store, "t") == expected

    whole = await agent.fork("t")  # the last run ends where the fork does
    assert await ends(store, whole) == expected
    inside = await agent.fork("t", at_step=fine.usage.calls[0].step)  # cut after the first of its two steps
    assert await ends(store, inside) == [*expected[:4], (fine.run_id, "completed", None, None, 1)]
    more = await agent.run("fine", thread=inside)
    assert await ends(store, inside) == [*expected[:4], (fine.run_id, "completed", None, None, 1),
                                         (more.run_id, "completed", None, None, 2)]
    early = await agent.fork("t", at_step=stopped.usage.calls[0].step)
    assert await ends(store, early) == expected[:3]


# ----------------------------------------------------------------------------- every text, exactly
EDGE_TEXTS = {
    "nul": "before\x00after",
    "nul-only": "\x00",
    "escape-like": "\x10 0 \x100 \x10\x10 \\u0000 \\u0010",  # the bytes an encoding of NUL might use
    "planes": "".join(chr(c) for c in (0x41, 0xE9, 0x4E2D, 0x1F600, 0x2A6D6, 0x30000, 0xE0001, 0xFFFD, 0x10FFFD)),
    "controls": "".join(chr(c) for c in range(32)) + "\x7f\x85\u2028\u2029",
}


@tool
def echo(text: str, ctx: RunContext[dict[str, Any]]) -> str:
    """Echo the text, and keep it in the state."""
    ctx.state["seen"] = text
    ctx.state[text] = text  # as a key too
    return text


@direct_too
@pytest.mark.parametrize("name", EDGE_TEXTS)
async def test_every_text_is_kept_exactly_in_prompt_arguments_result_answer_and_state(
    stores: Stores, name: str
) -> None:
    """NUL (which PostgreSQL text and jsonb cannot hold), the escapes a store might use for it,
    control characters and each Unicode plane: in the prompt, a tool's arguments (key and value),
    its result, the model's answer and the state, every store gives back exactly what was written,
    to a new store object (another kernel)."""
    text = EDGE_TEXTS[name]

    def script(messages, info):  # type: ignore[no-untyped-def]
        if messages[-1].kind == "user":
            return tool_call("echo", text=text)
        return "answer: " + text

    state: dict[str, Any] = {}
    result = await Agent(FunctionModel(script), tools=[echo], store=stores.new()).run(
        "prompt: " + text, thread="t", state=state)
    assert result.status == "completed" and result.output == "answer: " + text
    stored = await stores.new().load("t")
    assert stored is not None and stored.meta.status == "completed"
    user, call, res, answer = stored.messages
    assert user.content == "prompt: " + text  # type: ignore[union-attr]
    assert call.tool_calls[0].args == {"text": text}  # type: ignore[union-attr]
    assert res.content == text and answer.text == "answer: " + text  # type: ignore[union-attr]
    assert stored.meta.state == {"seen": text, text: text}
    assert [e.status for e in stored.ledger.values()] == ["finished"]
    assert list(stored.ledger) == [call.tool_calls[0].id]  # type: ignore[union-attr]
    assert "answer: " in (await stores.new().checkpoints("t"))[-1].last_message


@direct_too
async def test_a_ten_megabyte_result_and_a_lone_surrogate_are_stored_alike_everywhere(stores: Stores) -> None:
    """A 10 MB result is kept whole; a lone surrogate (which UTF-8 cannot encode) is replaced
    before any store sees it, the same way for every store."""
    big = ("0123456789abcdef" * 65536) * 10 + "\x00end"

    @tool
    def dump(which: str) -> str:
        """Return a big or a broken text."""
        return big if which == "big" else "half \ud83d of an emoji"

    model = ScriptedModel([[tool_call("dump", which="big"), tool_call("dump", which="broken")], "done"])
    result = await Agent(model, tools=[dump], store=stores.new()).run("go", thread="t")
    assert result.status == "completed"
    stored = await stores.new().load("t")
    assert stored is not None
    contents = [m.content for m in stored.messages if m.kind == "tool-result"]  # type: ignore[union-attr]
    assert contents == [big, "half \ufffd of an emoji"]


@direct_too
@pytest.mark.parametrize("how", ["tasks", "os-threads"])
async def test_a_run_refused_with_a_conflict_leaves_no_trace(stores: Stores, how: str) -> None:
    """Twelve runs start at once on one thread (as tasks of twelve kernels, or from twelve OS
    threads on one store object): those refused with `ConflictError` leave nothing in it; the
    thread holds exactly the prompts and answers of the runs that completed."""

    async def slow(messages, info):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.05)
        return "answer to " + messages[-1].content

    if how == "tasks":
        agents = [Agent(FunctionModel(slow), store=stores.new()) for _ in range(12)]
        outcomes = await asyncio.gather(
            *(agents[i].run(f"prompt-{i}", thread="t") for i in range(12)), return_exceptions=True)
    else:
        agent = Agent(FunctionModel(slow), store=stores.new())
        barrier = threading.Barrier(12)

        outcomes: list[Any] = [None] * 12

        def run(i: int) -> None:
            barrier.wait()
            try:
                outcomes[i] = agent.run_sync(f"prompt-{i}", thread="t")
            except BaseException as exc:
                outcomes[i] = exc

        workers = [threading.Thread(target=run, args=(i,)) for i in range(12)]
        for worker in workers:
            worker.start()
        await asyncio.to_thread(lambda: [w.join(60) for w in workers])
    done = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(e, ConflictError) for e in refused), refused
    assert done and all(r.status == "completed" for r in done)
    stored = await stores.new().load("t")
    assert stored is not None
    prompts = [m.content for m in stored.messages if m.kind == "user"]  # type: ignore[union-attr]
    assert sorted(prompts) == sorted(f"prompt-{i}" for i, o in enumerate(outcomes) if not isinstance(o, BaseException))
    assert len(stored.messages) == 2 * len(done)
