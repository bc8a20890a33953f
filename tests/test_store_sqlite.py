"""SQLiteStore: the protocol, the file format, bad files, speed, concurrency, fork, usage."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, tool
from nbagent.exceptions import (
    ConflictError,
    StoreCorruptError,
    StoreReadOnlyError,
    StoreVersionError,
    UserError,
)
from nbagent.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from nbagent.models import FunctionModel
from nbagent.store import FORMAT_VERSION, LedgerEntry, MemoryStore, SQLiteStore, default_store
from nbagent.store.sqlite import USAGE_COLUMNS
from nbagent.usage import ModelCallUsage
from tests.test_store_contract import add, add_then_answer

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "store_v1.db"  # format 1: written before usage chunks and checkpoints' runs
FIXTURE_2 = FIXTURES / "store_v2.db"  # format 2: written before usage rows had a purpose


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def row(thread: str, step: int, cost: float | None = 0.001) -> ModelCallUsage:
    return ModelCallUsage(
        "run_1",
        thread,
        step,
        1.0 + step,
        "function",
        "f",
        input_tokens=10 * step,
        output_tokens=step,
        cost_total=cost,
    )




@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store" / "threads.db"


@pytest.fixture
async def store(db: Path):  # type: ignore[no-untyped-def]
    s = SQLiteStore(db)
    yield s
    await s.close()


# ---------------------------------------------------------------------- the protocol
async def test_nothing_is_created_before_first_use_and_errors_name_the_file(store: SQLiteStore, db: Path) -> None:
    """(The protocol itself is asserted for every store in tests/test_store_contract.py.)"""
    assert not db.exists(), "nothing is created before the first use"
    v = await store.append("t", version=0, step=0, messages=[UserMessage("héllo")])
    assert v == 1 and db.exists()
    with pytest.raises(ConflictError, match="already exists") as info:
        await store.append("t", version=0, step=0, messages=[UserMessage("new?")])
    assert info.value.path == str(store.path)


async def test_usage_columns_cover_every_usage_field(store: SQLiteStore) -> None:
    assert list(USAGE_COLUMNS) == [f.name for f in dataclasses.fields(ModelCallUsage)], (
        "a new ModelCallUsage field needs a column (and a format migration)"
    )
    v = await store.append("a", version=0, step=1, usage=[row("a", 1), row("a", 2, None)])
    await store.append("b", version=0, step=1, usage=[row("b", 3)])
    await store.append("a", version=v, step=2, usage=[row("a", 4)])
    cols = await store.usage_columns()
    assert cols["thread"] == ["a", "a", "b", "a"] and cols["step"] == [1, 2, 3, 4]
    assert cols["cost_total"] == [0.001, None, 0.001, 0.001] and cols["usage_reported"] == [True] * 4
    assert (await store.usage_columns("a"))["input_tokens"] == [10, 20, 40]
    # The protocol's generic version (MemoryStore) gives the same columns.
    mem = MemoryStore()
    await mem.append("a", version=0, step=1, usage=[row("a", 1)])
    assert (await mem.usage_columns())["input_tokens"] == [10]


@pytest.mark.parametrize("fmt", sorted({1, 2, 3, 4, 5, FORMAT_VERSION}))
async def test_reads_format_fixtures(tmp_path: Path, fmt: int) -> None:
    """A file written in each format (tests/fixtures/make_store_fixture.py) stays readable and is
    made the current format on opening: a format 1 file gets its latest run's outcome on a
    checkpoint, an older file's usage rows the purpose ``"run"`` and no context (not measured)."""
    path = tmp_path / "old.db"
    shutil.copy(FIXTURES / f"store_v{fmt}.db", path)
    store = SQLiteStore(path)
    loaded = await store.load("support-42")
    ends = await store.last_checkpoints("support-42")
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM nbagent_meta WHERE key = 'format_version'").fetchone() == (
            str(FORMAT_VERSION),)
        names = [r[1] for r in conn.execute("PRAGMA table_info(checkpoints)")]
        usage_names = [r[1] for r in conn.execute("PRAGMA table_info(usage)")]
    assert names[-4:] == ["status", "run_id", "stop_reason", "error"]
    assert usage_names == ["id", *USAGE_COLUMNS]
    assert [(run, c.version, c.messages, c.status, c.stop_reason, c.error, c.last_message)
            for run, c in ends.items()] == [
        ("run_fixture1", 7, 5, "completed", None, None, "assistant: The refund was denied.")]
    assert loaded is not None
    assert [m.to_dict() for m in loaded.messages] == [
        {"kind": "user", "content": "Refund order 42, please"},
        {
            "kind": "assistant",
            "text": "Looking it up.",
            "tool_calls": [
                {"id": "call_a", "name": "lookup_order", "args_json": '{"order": 42}'},
                {"id": "call_b", "name": "refund", "args_json": '{"order": 42}'},
            ],
            "reasoning": "need the order",
            "finish_reason": "tool_calls",
            "model": "gpt-4.1-mini",
        },
        {
            "kind": "tool-result",
            "call_id": "call_a",
            "name": "lookup_order",
            "content": '{"status": "shipped"}',
            "is_error": False,
            "status": "done",
            "duration_s": 0.25,
        },
        {
            "kind": "tool-result",
            "call_id": "call_b",
            "name": "refund",
            "content": "denied by the user: too large",
            "is_error": True,
            "status": "denied",
        },
        {
            "kind": "assistant",
            "text": "The refund was denied.",
            "finish_reason": "stop",
            "model": "gpt-4.1-mini",
        },
    ]
    assert loaded.message_steps == [0, 1, 1, 1, 2]
    assert loaded.version == 7
    assert {k: (e.tool, e.args_hash, e.status, e.time) for k, e in loaded.ledger.items()} == {
        "call_a": ("lookup_order", "hash_a", "finished", 1_700_000_002.0),
        "call_b": ("refund", "hash_b", "denied", 1_700_000_003.0),
    }
    assert [
        (
            u.step,
            u.input_tokens,
            u.cache_read_tokens,
            u.output_tokens,
            u.reasoning_tokens,
            u.cost_total,
            u.tool_calls,
            u.finish_reason,
            u.model,
            u.time,
            u.purpose,
        )
        for u in loaded.usage
    ] == [
        (1, 100, 10, 20, 2, 0.0003, 2, "tool_calls", "gpt-4.1-mini", 1_700_000_001.0, "run"),
        (2, 150, 10, 8, 2, None, 0, "stop", "gpt-4.1-mini", 1_700_000_002.0, "run"),
    ]
    sized = {"system": 10, "tools": 30, "history": 0, "tool_results": 0, "latest": 60, "window": 1047576}
    assert [u.context_parts for u in loaded.usage] == [sized if fmt >= 4 else None, None]
    assert [(u.agent, u.depth, u.parent_call_id) for u in loaded.usage] == (
        [("support", 0, None), ("researcher", 1, "call_b")] if fmt >= 5 else [(None, 0, None)] * 2)
    assert [u.batch for u in loaded.usage] == ([True, False] if fmt >= 6 else [False, False])
    assert loaded.meta.status == "completed" and loaded.meta.state == {"count": 3}
    assert loaded.meta.always_allowed == ["lookup_order"]
    # And an agent continues it.
    agent = Agent(FunctionModel(lambda m, i: "ok"), store=SQLiteStore(path))
    result = await agent.run("thanks", thread="support-42")
    assert result.status == "completed" and len(result.messages) == 7
    assert (await agent.thread_usage("support-42")).requests == 3
    await agent.store.close()


async def test_frames_of_a_file_written_by_nbagent_0_1(tmp_path: Path) -> None:
    """A format 1 file gets the checkpoints' run columns on opening and its frames work: each
    thread's latest run has the status its meta record tells, and keeps it when more runs follow;
    how earlier runs ended was never stored (missing, as docs/usage.md says)."""
    from nbagent.dataframe import runs_frame

    path = tmp_path / "old.db"
    shutil.copy(FIXTURES / "store_meta_v0_1.db", path)  # written by nbagent 0.1
    store = SQLiteStore(path)

    async def ends() -> dict[tuple[str, str], Any]:
        frame = await asyncio.to_thread(runs_frame, store)
        return {(t, r): (None if s != s else s) for t, r, s in zip(frame["thread"], frame["run_id"], frame["status"],
                                                                    strict=True)}

    before = {("t-paused", "run_ce79aac7fdc44d40"): "paused", ("t-done", "run_3210b1e180514d73"): None,
              ("t-done", "run_5071a2fdd8654777"): "completed", ("t-fork", "run_3210b1e180514d73"): None}
    assert await ends() == before

    @tool(requires_approval=True)
    def pay(amount: float) -> str:
        """Pay."""
        return f"paid {amount}"

    @tool(requires_approval=True)
    def ship(to: str) -> str:
        """Ship."""
        return f"shipped to {to}"

    agent = Agent(FunctionModel(lambda m, i: "ok"), tools=[pay, ship], store=store)
    resumed = await agent.resume(thread="t-paused", approve=["c2"], deny={"c3": "not today"})
    again = await agent.run("and now?", thread="t-done")
    assert await ends() == {**before, ("t-paused", resumed.run_id): "completed",
                            ("t-done", again.run_id): "completed"}
    await store.close()


# ---------------------------------------------------------------------- bad files
async def test_not_a_database_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 20)
    before = digest(path)
    store = SQLiteStore(path)
    with pytest.raises(StoreCorruptError, match=r"notes\.db is not an nbagent store") as info:
        await store.load("t")
    assert info.value.path == str(path)
    with pytest.raises(StoreCorruptError):
        await store.append("t", version=0, step=0, messages=[UserMessage("x")])
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


async def test_truncated_file_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(path)
    v = 0
    for i in range(300):
        v = await store.append("t", version=v, step=i, messages=[UserMessage("x" * 500)])
    await store.close()
    for size in (path.stat().st_size // 2, 60):
        with open(path, "r+b") as f:
            f.truncate(size)
        before = digest(path)
        with pytest.raises(StoreCorruptError, match=r"t\.db .*(truncated|not a SQLite)"):
            await SQLiteStore(path).load("t")
        assert digest(path) == before


async def test_corrupted_pages_give_store_corrupt_error(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = SQLiteStore(path)
    v = 0
    for i in range(200):
        v = await store.append("t", version=v, step=i, messages=[UserMessage("y" * 400)])
    await store.close()
    data = bytearray(path.read_bytes())
    for offset in range(4096 * 3, len(data) - 4096, 4096):  # scribble over every page but the first few
        data[offset : offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    before = digest(path)
    with pytest.raises(StoreCorruptError, match=r"c\.db is corrupted"):
        await SQLiteStore(path).load("t")
    assert digest(path) == before


async def test_other_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    before = digest(path)
    with pytest.raises(StoreCorruptError, match=r"a SQLite database but not an nbagent store .*customers"):
        await SQLiteStore(path).threads()
    assert digest(path) == before


async def test_newer_format_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    store = SQLiteStore(path)
    await store.append("t", version=0, step=0, messages=[UserMessage("from the future")])
    await store.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE nbagent_meta SET value = ? WHERE key = 'format_version'", (str(FORMAT_VERSION + 1),))
    conn.commit()
    conn.close()
    before = digest(path)
    with pytest.raises(
        StoreVersionError,
        match=rf"future\.db was written by a newer nbagent \(store format "
        rf"{FORMAT_VERSION + 1}",
    ) as info:
        await SQLiteStore(path).load("t")
    assert info.value.path == str(path)
    assert digest(path) == before


async def test_read_only_location(tmp_path: Path) -> None:
    # /sys refuses new folders even to root.
    store = SQLiteStore("/sys/nbagent-test/threads.db")
    with pytest.raises(StoreReadOnlyError, match="cannot create the folder /sys/nbagent-test") as info:
        await store.load("t")
    assert info.value.path == "/sys/nbagent-test/threads.db"


def test_read_only_folder_as_another_user() -> None:
    """A store file in a folder the user cannot write: a clear error, the file unchanged."""
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="nbagent-ro-"))  # /tmp/x, reachable by other users
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "threads.db"
    asyncio.run(_fill(path))
    before = digest(path)
    folder.chmod(0o555)
    path.chmod(0o444)
    code = (
        "import asyncio, sys\n"
        "from nbagent.store import SQLiteStore\n"
        "from nbagent.exceptions import StoreReadOnlyError\n"
        f"s = SQLiteStore({str(path)!r})\n"
        "try:\n    asyncio.run(s.load('t'))\n"
        "except StoreReadOnlyError as e:\n    print('ERR', e.path, e)\n"
    )
    tmp_path.chmod(0o755)
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot drop write permission")
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code]
    else:
        cmd = [sys.executable, "-c", code]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)
    if "Permission denied" in out.stderr and "nbagent" not in out.stdout:
        pytest.skip(f"the unprivileged user cannot run this venv: {out.stderr[-200:]}")
    assert out.stdout.startswith(f"ERR {path} "), out.stdout + out.stderr
    assert "cannot be written" in out.stdout
    assert digest(path) == before
    shutil.rmtree(tmp_path)


async def _fill(path: Path) -> None:
    s = SQLiteStore(path)
    await s.append("t", version=0, step=0, messages=[UserMessage("x")])
    await s.close()


# ---------------------------------------------------------------------- default store
def test_default_store_follows_nbagent_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBAGENT_STORE", "memory")
    assert isinstance(default_store(), MemoryStore)
    monkeypatch.setenv("NBAGENT_STORE", str(tmp_path / "x.db"))
    s = default_store()
    assert isinstance(s, SQLiteStore) and s.path == tmp_path / "x.db" and default_store() is s
    monkeypatch.delenv("NBAGENT_STORE")
    monkeypatch.chdir(tmp_path)
    s = default_store()
    assert isinstance(s, SQLiteStore) and s.path == tmp_path / ".nbagent" / "threads.db"
    agent = Agent(FunctionModel(lambda m, i: "hi"))
    assert agent.run_sync("hello", thread="t").output == "hi"
    assert (tmp_path / ".nbagent" / "threads.db").exists()
    asyncio.run(s.close())


# ---------------------------------------------------------------------- speed
@pytest.mark.perf
async def test_ten_thousand_messages_load_well_under_a_second(store: SQLiteStore) -> None:
    v = 0
    for i in range(5000):
        call = ToolCall(f"c{i}", "add", '{"a": 1, "b": 2}')
        v = await store.append(
            "big",
            version=v,
            step=i + 1,
            messages=[AssistantMessage("thinking " * 10, [call])],
            usage=[row("big", i + 1)],
            ledger=[LedgerEntry(call.id, "add", "h", "started")],
        )
        v = await store.append(
            "big",
            version=v,
            step=i + 1,
            messages=[ToolResultMessage(call.id, "add", "result " * 30)],
            ledger=[LedgerEntry(call.id, "add", "h", "finished")],
        )
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        loaded = await store.load("big")
        best = min(best, time.perf_counter() - start)
    assert loaded is not None and len(loaded.messages) == 10_000 and len(loaded.usage) == 5000
    print(f"load of 10,000 messages: {best * 1000:.0f} ms")
    assert best < 0.7


@pytest.mark.perf
async def test_append_cost_does_not_grow_with_the_thread(store: SQLiteStore) -> None:
    async def steps(thread: str, n: int, v: int) -> tuple[float, int]:
        start = time.perf_counter()
        for i in range(n):
            v = await store.append(
                thread, version=v, step=i, messages=[AssistantMessage("a " * 20)], usage=[row(thread, i)]
            )
        return (time.perf_counter() - start) / n, v

    _, v_small = await steps("small", 10, 0)
    _, v_big = await steps("big", 3000, 0)
    smalls, bigs = [], []
    for _ in range(5):  # interleaved, best of five: other processes' noise only adds time
        t, v_small = await steps("small", 50, v_small)
        smalls.append(t)
        t, v_big = await steps("big", 50, v_big)
        bigs.append(t)
    small, big = min(smalls), min(bigs)
    print(f"append: {small * 1e6:.0f} µs (10 messages) vs {big * 1e6:.0f} µs (3,000 messages)")
    # Re-reading or re-writing 3,000 messages would cost milliseconds per append.
    assert big < small * 2 + 100e-6


# ---------------------------------------------------------------------- agent: fork, usage
async def test_fork_edit_forms_and_prompt_edit(store: SQLiteStore) -> None:
    agent = Agent(FunctionModel(add_then_answer), tools=[add], store=store)
    await agent.run("first", thread="s")
    await agent.run("second", thread="s")  # the prompt after step 2's final answer has step 2
    f = await agent.fork("s", at_step=2, new_thread="edited-prompt", edit="other question")
    assert f == "edited-prompt"
    loaded = await store.load(f)
    assert loaded is not None and loaded.messages[-1] == UserMessage("other question")
    assert (await agent.resume(thread=f)).status == "completed"
    whole = await agent.fork("s")
    assert len((await store.load(whole)).messages) == 8  # type: ignore[union-attr]
    f0 = await agent.fork("s", at_step=0, edit=UserMessage("start over"))
    assert (await store.load(f0)).messages == [UserMessage("start over")]  # type: ignore[union-attr]
    await agent.fork("s", at_step=4, edit={"text": "a better answer"}, new_thread="x")
    assert (await store.load("x")).messages[-1].text == "a better answer"  # type: ignore[union-attr]
    with pytest.raises(ConflictError, match="'x' already exists"):
        await agent.fork("s", at_step=2, new_thread="x")
    with pytest.raises(UserError, match="fields \\['contents'\\]"):
        await agent.fork("s", at_step=1, edit={"contents": "typo"})
    with pytest.raises(UserError, match="same call_id"):
        await agent.fork("s", at_step=1, edit=UserMessage("not a result"))
    with pytest.raises(UserError, match="not in the store"):
        await agent.fork("nope")
    with pytest.raises(UserError, match="at_step"):
        await agent.fork("s", at_step=-1)


async def test_fork_sync_and_thread_usage_sync(db: Path) -> None:
    agent = Agent(FunctionModel(add_then_answer), tools=[add], store=SQLiteStore(db))
    await agent.run("x", thread="s")

    def in_thread() -> tuple[str, int]:
        new = agent.fork_sync("s", at_step=1)
        return new, agent.thread_usage_sync(new).requests

    new, requests = await asyncio.to_thread(in_thread)
    assert requests == 1 and new in {i.thread for i in await agent.threads()}
    await agent.store.close()


# ---------------------------------------------------------------------- columnar usage chunks
def many_rows(n: int, threads: int = 3) -> list[ModelCallUsage]:
    return [
        ModelCallUsage(
            f"run_{i // 7}",
            f"t{i % threads}",
            i,
            1_700_000_000.0 + i / 4,
            "openai",
            "gpt-4o-mini" if i % 3 else "gpt-4.1-mini",
            input_tokens=1000 + i,
            cache_read_tokens=i % 4 * 256,
            output_tokens=20 + i % 97,
            latency_s=0.25,
            finish_reason=None if i % 5 == 0 else "stop",
            tool_calls=i % 2,
            cost_input=None if i % 11 == 0 else 1.5e-4,
            cost_total=None if i % 11 == 0 else 2.5e-4,
            currency="USD" if i % 13 else "EUR",
            usage_reported=i % 17 != 0,
            purpose="compaction" if i % 19 == 5 else "eval" if i % 23 == 7 else "run",
        )
        for i in range(n)
    ]


async def write_rows(store: SQLiteStore, rows: list[ModelCallUsage], per_append: int = 1) -> None:
    versions = {i.thread: (await store.load(i.thread)).version for i in await store.threads()}  # type: ignore[union-attr]
    for start in range(0, len(rows), per_append):
        for thread in dict.fromkeys(r.thread for r in rows[start : start + per_append]):
            batch = [r for r in rows[start : start + per_append] if r.thread == thread]
            versions[thread] = await store.append(
                thread, version=versions.get(thread, 0), step=batch[-1].step, usage=batch  # type: ignore[arg-type]
            )


def chunk_count(path: Path) -> tuple[int, int]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*), coalesce(sum(rows), 0) FROM usage_chunks").fetchone()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 8 rows, and threads read from the chunks (not the index) from 4 rows up."""
    import nbagent.store.sqlite._chunks as sqlite_store

    monkeypatch.setattr(sqlite_store, "CHUNK_ROWS", 8)
    monkeypatch.setattr(sqlite_store, "_SMALL_THREAD", 4)


async def assert_columns_match(store: SQLiteStore) -> None:
    """usage_columns (all threads, each thread, a column subset) == the rows of the usage table."""
    with sqlite3.connect(store.path) as conn:
        stored = conn.execute(f"SELECT {', '.join(USAGE_COLUMNS)} FROM usage ORDER BY id")
        rows = [_usage_row(r) for r in stored]
    cols = await store.usage_columns()
    assert cols.length == len(rows)
    assert cols.to_rows() == rows
    for thread in sorted({r.thread for r in rows if r.thread}):
        assert (await store.usage_columns(thread)).to_rows() == [r for r in rows if r.thread == thread]
    assert (await store.usage_columns("nobody")).length == 0
    subset = await store.usage_columns(columns=["model", "cost_total"])
    assert subset.names == ("model", "cost_total") and dict(subset) == {
        "model": [r.model for r in rows],
        "cost_total": [r.cost_total for r in rows],
    }


def _usage_row(values):  # type: ignore[no-untyped-def]
    row = ModelCallUsage(*values)
    row.usage_reported = bool(row.usage_reported)
    return row


async def test_usage_chunks_are_written_by_appends_and_read_back_exactly(
    store: SQLiteStore, small_chunks: None
) -> None:
    rows = many_rows(101)
    await write_rows(store, rows)  # one row per append, like model steps
    chunks, packed = chunk_count(store.path)
    assert (chunks, packed) == (12, 96), "every 8 rows appended became a chunk; 5 rows wait"
    await assert_columns_match(store)
    # Missing costs stay None (NaN in the frame); text, bools and floats round-trip exactly.
    cols = await store.usage_columns("t0")
    assert cols["cost_total"][:2] == [None, 2.5e-4] and cols["finish_reason"][:2] == [None, "stop"]
    await write_rows(store, many_rows(40, threads=2)[::-1], per_append=40)  # a bulk append
    await assert_columns_match(store)


async def test_usage_chunks_follow_deletes_forks_and_edits_by_hand(
    store: SQLiteStore, small_chunks: None
) -> None:
    await write_rows(store, many_rows(100))
    await store.usage_columns()  # everything packed but the last few rows
    await store.delete_thread("t1")  # its rows sit inside most chunks: those chunks are dropped ...
    await assert_columns_match(store)  # ... and the ranges are read, then packed, again
    assert chunk_count(store.path)[1] == 64
    await store.copy("t0", "t0-fork", messages=0)
    await assert_columns_match(store)
    # SQL on the usage table (re-pricing, deleting, inserting) never leaves a stale chunk,
    # whoever runs it: the triggers in the file drop the chunk that covers the row.
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE usage SET cost_total = 9.0, model = 'repriced' WHERE id % 10 = 3")
        conn.execute("DELETE FROM usage WHERE id % 10 = 7")
        conn.execute(f"INSERT INTO usage (id, {', '.join(USAGE_COLUMNS)}) SELECT id + 1, "
                     f"{', '.join(USAGE_COLUMNS)} FROM usage WHERE id % 10 = 6")
    await assert_columns_match(store)
    cols = await store.usage_columns()
    assert cols["model"].count("repriced") == cols["cost_total"].count(9.0) > 0


async def test_a_format_1_file_without_chunks_is_packed_on_first_read(
    tmp_path: Path, small_chunks: None
) -> None:
    path = tmp_path / "old.db"
    shutil.copy(FIXTURE, path)
    with sqlite3.connect(path) as conn:  # the fixture predates usage chunks
        assert "usage_chunks" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    store = SQLiteStore(path)
    assert [(r.step, r.input_tokens, r.cost_total) for r in (await store.usage_columns()).to_rows()] == [
        (1, 100, 0.0003), (2, 150, None)
    ]
    assert (await store.usage_columns("support-42")).length == 2
    await store.close()
    # A bigger one, written by an nbagent without chunks (no table, no triggers).
    path = tmp_path / "big-old.db"
    store = SQLiteStore(path)
    await write_rows(store, many_rows(50), per_append=50)
    await store.close()
    with sqlite3.connect(path) as conn:
        for name in ("usage_chunks_on_insert", "usage_chunks_on_update", "usage_chunks_on_delete"):
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE usage_chunks")
        conn.execute("DELETE FROM usage WHERE id = 20")  # what an old nbagent's delete could do
    store = SQLiteStore(path)
    await assert_columns_match(store)
    assert chunk_count(path) == (6, 48)  # packed by the first read of every thread (1 row waits)
    await store.close()


async def test_a_format_2_file_gains_purpose_and_keeps_its_chunks(tmp_path: Path, small_chunks: None) -> None:
    """A format 2 file (before usage rows had a purpose) is made format 3 on opening: its usage
    rows read ``"run"``, its chunks (packed without the column) are read as they are, not
    packed again, and new rows keep their purpose; an nbagent that reads format 2 then refuses
    it (it would copy and pack rows without their purpose)."""
    path = tmp_path / "old.db"
    shutil.copy(FIXTURE_2, path)
    store = SQLiteStore(path)
    assert [u.purpose for u in (await store.load("support-42")).usage] == ["run", "run"]  # type: ignore[union-attr]
    await store.close()
    # A bigger one, as a format 2 nbagent wrote it: no purpose column, chunks without it.
    from nbagent.store._columnar import decode_chunk, encode_chunk

    path = tmp_path / "big-old.db"
    store = SQLiteStore(path)
    rows = many_rows(50)
    for r in rows:
        r.purpose = "run"
    await write_rows(store, rows, per_append=50)
    await store.close()
    old_names = [n for n in USAGE_COLUMNS if n != "purpose"]
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE usage DROP COLUMN purpose")
        for last, data in conn.execute("SELECT last_id, data FROM usage_chunks").fetchall():
            block = decode_chunk(data, old_names)
            assert block is not None
            conn.execute("UPDATE usage_chunks SET data = ? WHERE last_id = ?", (encode_chunk(block), last))
        conn.execute("UPDATE nbagent_meta SET value = '2' WHERE key = 'format_version'")
    before = chunk_count(path)
    assert before == (6, 48)
    store = SQLiteStore(path)
    cols = await store.usage_columns()
    assert sorted(cols.to_rows(), key=lambda r: r.step) == rows and set(cols["purpose"]) == {"run"}
    await assert_columns_match(store)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM nbagent_meta WHERE key = 'format_version'").fetchone() == (
            str(FORMAT_VERSION),)
        assert conn.execute("SELECT DISTINCT purpose FROM usage").fetchall() == [("run",)]
        blobs = [d for (d,) in conn.execute("SELECT data FROM usage_chunks")]
    assert chunk_count(path) == before and all(b"purpose" not in d for d in blobs), "the old chunks are kept"
    more = many_rows(70)[50:]
    await write_rows(store, more, per_append=10)
    await assert_columns_match(store)
    cols = await store.usage_columns()
    assert sorted(zip(cols["step"], cols["purpose"], strict=True))[50:] == [(r.step, r.purpose) for r in more]
    assert {"compaction", "eval"} <= {r.purpose for r in more}
    await store.close()


async def test_a_dropped_trigger_invalidates_every_chunk(tmp_path: Path, small_chunks: None) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    await write_rows(store, many_rows(40), per_append=40)
    await store.close()
    with sqlite3.connect(store.path) as conn:
        conn.execute("DROP TRIGGER usage_chunks_on_update")
        conn.execute("UPDATE usage SET input_tokens = -1")  # no trigger: the chunks are now stale
    store = SQLiteStore(store.path)
    await assert_columns_match(store)
    assert set((await store.usage_columns())["input_tokens"]) == {-1}
    await store.close()


async def test_a_chunk_of_an_unknown_format_is_read_from_the_rows(
    store: SQLiteStore, small_chunks: None
) -> None:
    await write_rows(store, many_rows(30), per_append=30)
    with sqlite3.connect(store.path) as conn:  # as a newer nbagent might write them
        conn.execute("UPDATE usage_chunks SET data = X'FF00' WHERE last_id % 2 = 0")
    await assert_columns_match(store)


async def test_thread_usage_reads_columns_not_the_thread(db: Path) -> None:
    agent = Agent(FunctionModel(add_then_answer), tools=[add], store=SQLiteStore(db))
    await agent.run("one", thread="u")
    agent.store.load = None  # type: ignore[assignment,method-assign]
    usage = await agent.thread_usage("u")
    assert usage.requests == 2 and [c.step for c in usage.calls] == [1, 2]
    assert (await agent.thread_usage("missing")).requests == 0
    await agent.store.close()


def test_columnar_blob_round_trip() -> None:
    from nbagent.store._columnar import (
        USAGE_FIELDS,
        UsageColumns,
        decode_chunk,
        encode_chunk,
        encode_rows,
    )

    rows = many_rows(9)
    rows[3].model, rows[4].thread = "модель ✓", None
    tuples = [tuple(getattr(r, n) for n in USAGE_FIELDS) for r in rows]
    blob = encode_chunk(encode_rows(tuples))
    assert blob[0] == 1 and (5 + int.from_bytes(blob[1:5], "little")) % 8 == 0
    block = decode_chunk(blob, USAGE_FIELDS)
    assert block is not None and UsageColumns([block]).to_rows() == rows
    assert decode_chunk(blob, ["model"]) is not None
    assert decode_chunk(b"\x02" + blob[1:], USAGE_FIELDS) is None  # a format this version cannot read
    empty = decode_chunk(encode_chunk(encode_rows([])), USAGE_FIELDS)
    assert empty is not None and empty.length == 0
    with pytest.raises(UserError, match="unknown usage columns"):
        asyncio.run(MemoryStore().usage_columns(columns=["tokens"]))


@pytest.mark.perf
async def test_usage_frame_of_50k_stored_rows_is_fast(store: SQLiteStore) -> None:
    from nbagent.dataframe import usage_frame

    rows = many_rows(50_000, threads=50)
    await write_rows(store, rows, per_append=10_000)
    usage_frame(store)  # warm: pandas' first calls import and compile
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        df = usage_frame(store)
        best = min(best, time.perf_counter() - start)
    print(f"usage frame of 50,000 stored rows: {best * 1000:.0f} ms")
    assert len(df) == 50_000 and df["input_tokens"].sum() == sum(r.input_tokens for r in rows)
    assert best < 0.5  # about 0.05 s (the row-by-row reader before chunks: about 17 s for 1M rows)
