"""SQLiteStore hardening: concurrent opens, forks, lock waits and damaged rows.

Each test here was written to fail on a defect first: a healthy file reported as corrupt while
another process writes, concurrent first opens of a new file, forked children deadlocking on the
store's lock, the event loop frozen while SQLite waits for another process's lock, and damaged
rows surfacing as raw ``JSONDecodeError`` / ``KeyError`` (or being written over).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

import pytest

from nbagent import Agent
from nbagent.exceptions import StoreCorruptError, StoreError
from nbagent.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from nbagent.models import FunctionModel
from nbagent.store import SQLiteStore
from nbagent.usage import ModelCallUsage

ROOT = Path(__file__).resolve().parents[1]


def python(code: str, *args: object, **kwargs: object) -> subprocess.Popen[str]:
    """`code` run by this interpreter in a new process, with the worktree's nbagent."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], cwd=ROOT, text=True, **kwargs  # type: ignore[call-overload]
    )


# ---------------------------------------------------------------------- opening while another process writes
_BIG_WRITER = """
import asyncio, sys, time
from nbagent.store import SQLiteStore
from nbagent.usage import ModelCallUsage
from nbagent.messages import UserMessage
async def main(path, seconds, size):
    s = SQLiteStore(path)
    v = await s.append("w", version=0, step=0, messages=[UserMessage("start")])
    print("ready", flush=True)
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        i += 1
        v = await s.append("w", version=v, step=i, messages=[UserMessage(str(i) * size)])
    await s.close()
asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
"""


@pytest.mark.slow
async def test_opening_while_another_process_writes_never_reports_corruption(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    writer = python(_BIG_WRITER, path, 4, 20_000, stdout=subprocess.PIPE)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    opens, failures = 0, []
    while writer.poll() is None:
        store = SQLiteStore(path)
        try:
            await store.threads()
        except StoreCorruptError as exc:
            failures.append(str(exc))
        finally:
            await store.close()
        opens += 1
    assert writer.wait() == 0
    writer.stdout.close()
    assert failures == [], f"{len(failures)} of {opens} opens failed, first: {failures[0]}"
    store = SQLiteStore(path)
    loaded = await store.load("w")
    assert loaded is not None and len(loaded.messages) > 10
    await store.close()


# ---------------------------------------------------------------------- many processes opening a new file
_FIRST_OPENER = """
import asyncio, json, sys, time
from nbagent.store import SQLiteStore
from nbagent.usage import ModelCallUsage
from nbagent.messages import UserMessage
async def main(folder, me, rounds, start, every):
    for r in range(rounds):
        time.sleep(max(0.0, start + r * every - time.time()))  # every process starts round r at once
        store, clock = SQLiteStore(f"{folder}/new-{r}.db"), time.monotonic()
        try:
            await store.append(f"p{me}", version=0, step=0, messages=[UserMessage(f"{me}/{r}")])
        except Exception as exc:
            print(json.dumps([r, type(exc).__name__, str(exc), round(time.monotonic() - clock, 3)]), flush=True)
        await store.close()
asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])))
"""


@pytest.mark.slow
async def test_many_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    processes, rounds, every = 12, 100, 0.08
    start = time.time() + 3.0  # after every process has imported nbagent
    openers = [
        python(_FIRST_OPENER, tmp_path, me, rounds, start, every, stdout=subprocess.PIPE)
        for me in range(processes)
    ]
    failures = []
    for opener in openers:
        out, _ = opener.communicate(timeout=120)
        assert opener.returncode == 0
        failures += [json.loads(line) for line in out.splitlines()]
    assert failures == [], f"{len(failures)} failed opens, first: {failures[0]}"
    for r in range(rounds):
        store = SQLiteStore(tmp_path / f"new-{r}.db")
        assert len(await store.threads()) == processes
        await store.close()


# ---------------------------------------------------------------------- waiting for another process's lock
_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


async def _max_gap_while(work: asyncio.Future[object] | object) -> tuple[object, float, float]:
    """Await `work` while a ticker task runs; (its result, the longest gap between ticks, seconds)."""
    gaps: list[float] = []
    done = False

    async def ticker() -> None:
        last = time.monotonic()
        while not done:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    clock = time.monotonic()
    try:
        result = await work  # type: ignore[misc]
    finally:
        seconds = time.monotonic() - clock
        done = True
        await task
    return result, max(gaps), seconds


@pytest.mark.slow
async def test_the_event_loop_keeps_running_while_another_process_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    store = SQLiteStore(path)
    v = await store.append("t", version=0, step=0, messages=[UserMessage("one")])
    holder = python(_HOLDER, path, 2.0, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    v, gap, seconds = await _max_gap_while(
        store.append("t", version=v, step=1, messages=[UserMessage("two")])
    )
    assert holder.wait(timeout=10) == 0
    holder.stdout.close()
    assert seconds > 1.0, "the append did not wait for the other process"
    assert gap < 1.0, f"the event loop stood still for {gap:.2f} s"  # a blocked loop: the lock's 2 s
    assert v == 2
    loaded = await store.load("t")
    assert loaded is not None and [m.content for m in loaded.messages] == ["one", "two"]  # type: ignore[union-attr]
    await store.close()


@pytest.mark.slow
async def test_a_lock_held_past_the_limit_fails_with_the_time_really_waited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbagent.store.sqlite._database as database

    monkeypatch.setattr(database, "BUSY_TIMEOUT_S", 0.5)
    path = tmp_path / "locked.db"
    store = SQLiteStore(path)
    v = await store.append("t", version=0, step=0, messages=[UserMessage("one")])
    holder = python(_HOLDER, path, 2.0, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    with pytest.raises(StoreError, match=r"locked\.db stayed locked by another writer for more than 0\.5 s "
                                         r"\(waited (0\.[5-9]|1\.[0-4]) s; database is locked\)") as info:
        await _max_gap_while(store.append("t", version=v, step=1, messages=[UserMessage("two")]))
    assert info.value.path == str(path)
    assert holder.wait(timeout=10) == 0
    holder.stdout.close()
    assert await store.append("t", version=v, step=1, messages=[UserMessage("two")]) == 2  # nothing half-written
    await store.close()


# ---------------------------------------------------------------------- os.fork while the parent writes
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_children_forked_while_the_parent_writes_use_the_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "fork.db")
    asyncio.run(store.append("parent", version=0, step=0, messages=[UserMessage("p")]))
    stop = threading.Event()

    def writer() -> None:  # keeps the store's lock taken most of the time
        async def go() -> None:
            v = 1
            while not stop.is_set():
                v = await store.append("parent", version=v, step=v, messages=[UserMessage("x" * 2000)])

        asyncio.run(go())

    parent_writer = threading.Thread(target=writer)
    parent_writer.start()
    children: dict[int, int] = {}
    try:
        for k in range(8):
            time.sleep(0.02)
            with warnings.catch_warnings():  # Python 3.12+ warns about forking a threaded process
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the child: one append to its own thread, then leave without cleanup
                code = 1
                try:
                    asyncio.run(store.append(f"child{k}", version=0, step=0, messages=[UserMessage(str(k))]))
                    asyncio.run(store.close())
                    code = 0
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(code)
            children[pid] = k
    finally:
        stop.set()
        parent_writer.join()
    codes: dict[int, int] = {}
    deadline = time.monotonic() + 15
    while len(codes) < len(children) and time.monotonic() < deadline:
        for pid, k in children.items():
            if k not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[k] = os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    hung = [k for k in children.values() if k not in codes]
    for pid, k in children.items():
        if k in hung:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert hung == [], f"children {hung} of {len(children)} hung"
    assert codes == {k: 0 for k in range(8)}
    names = {info.thread for info in asyncio.run(store.threads())}
    assert names == {"parent", *(f"child{k}" for k in range(8))}
    loaded = asyncio.run(store.load("parent"))
    assert loaded is not None
    asyncio.run(store.append("parent", version=loaded.version, step=0, messages=[UserMessage("after")]))
    asyncio.run(store.close())
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
    conn.close()


# ---------------------------------------------------------------------- damaged rows and pages
def _rows_of(path: Path, thread: str) -> list[object]:
    with sqlite3.connect(path) as conn:
        rows = [
            conn.execute("SELECT * FROM threads WHERE id = ?", (thread,)).fetchall(),
            conn.execute("SELECT * FROM messages WHERE thread = ? ORDER BY seq", (thread,)).fetchall(),
            conn.execute("SELECT count(*) FROM checkpoints WHERE thread = ?", (thread,)).fetchall(),
        ]
    conn.close()
    return rows


async def _two_threads(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    call = ToolCall.of("lookup", {"order": 7})
    for name in ("good", "bad"):
        v = await store.append(name, version=0, step=1, messages=[UserMessage(f"{name} question")],
                               meta={"status": "running"})
        v = await store.append(name, version=v, step=1, messages=[
            AssistantMessage(None, [call], finish_reason="tool_calls"),
            ToolResultMessage(call.id, "lookup", f"{name} result"),
        ], meta={"status": "completed"})
    await store.close()
    return store


_DAMAGE = {
    "truncated JSON message": "UPDATE messages SET data = substr(data, 1, length(data) / 2) "
                              "WHERE thread = 'bad' AND seq = 1",
    "non-JSON meta": "UPDATE threads SET meta = 'status: completed' WHERE id = 'bad'",
    "meta not an object": "UPDATE threads SET meta = '[1, 2]' WHERE id = 'bad'",
    "unknown message kind": "UPDATE messages SET data = json_set(data, '$.kind', 'alien') "
                            "WHERE thread = 'bad' AND seq = 0",
    "missing field": "UPDATE messages SET data = json_remove(data, '$.content') WHERE thread = 'bad' AND seq = 2",
    "message not an object": "UPDATE messages SET data = '\"hello\"' WHERE thread = 'bad' AND seq = 0",
}


@pytest.mark.parametrize("damage", list(_DAMAGE))
async def test_a_damaged_thread_fails_with_store_corrupt_error_and_is_not_written_to(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "damaged.db"
    await _two_threads(path)
    with sqlite3.connect(path) as conn:
        conn.execute(_DAMAGE[damage])
    conn.close()
    before = _rows_of(path, "bad")
    store = SQLiteStore(path)
    with pytest.raises(StoreCorruptError, match=r"damaged\.db.*thread 'bad' is damaged") as info:
        await store.load("bad")
    assert info.value.path == str(path)
    agent = Agent(FunctionModel(lambda messages, info: "never asked"), store=store)
    with pytest.raises(StoreCorruptError, match=r"damaged\.db.*thread 'bad'"):
        await agent.run("go on", thread="bad")
    version = (await store.checkpoints("bad"))[-1].version
    with pytest.raises(StoreCorruptError, match=r"thread 'bad'"):
        await store.append("bad", version=version, step=2, messages=[UserMessage("more")])
    with pytest.raises(StoreCorruptError, match=r"thread 'bad'"):
        await store.copy("bad", "bad-copy", messages=3)
    assert _rows_of(path, "bad") == before  # nothing was written over the damage
    good = await store.load("good")  # other threads stay usable
    assert good is not None and len(good.messages) == 3
    assert (await agent.run("and again", thread="good")).output == "never asked"
    assert await store.delete_thread("bad")  # the way out (besides a backup): the damaged thread goes
    assert await store.load("bad") is None
    await store.close()


async def test_garbage_over_a_page_gives_store_corrupt_error_and_nothing_is_written_after(
    tmp_path: Path,
) -> None:
    path = tmp_path / "garbage.db"
    store = SQLiteStore(path)
    for name in ("good", "bad"):
        v = 0
        for i in range(40):
            v = await store.append(name, version=v, step=i, messages=[UserMessage(f"{name} {i} " + "z" * 300)])
    await store.close()
    data = bytearray(path.read_bytes())
    page = 4096
    hit = data.index(b"\"content\":\"bad 20 ")  # a leaf page of the messages table, thread "bad"
    start = hit - hit % page
    rng = random.Random(7)
    data[start : start + 200] = bytes(rng.randrange(256) for _ in range(200))  # garbage over its header
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    store = SQLiteStore(path)
    with pytest.raises(StoreCorruptError, match=r"garbage\.db is corrupted") as info:
        await store.load("bad")
    assert info.value.path == str(path)
    with pytest.raises(StoreCorruptError, match=r"garbage\.db"):
        await store.append("good", version=40, step=40, messages=[UserMessage("more")])
    with pytest.raises(StoreCorruptError, match=r"garbage\.db"):
        await store.delete_thread("good")
    await store.close()
    assert path.read_bytes() == before


async def test_a_damaged_usage_chunk_is_read_from_its_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbagent.store.sqlite._chunks as sqlite_store

    monkeypatch.setattr(sqlite_store, "CHUNK_ROWS", 8)
    store = SQLiteStore(tmp_path / "chunks.db")
    v = 0
    for i in range(20):
        v = await store.append("t", version=v, step=i, usage=[
            ModelCallUsage("r", "t", i, 1.0 + i, "p", "m", input_tokens=i, output_tokens=1)
        ])
    with sqlite3.connect(store.path) as conn:  # a chunk format byte this version reads, then garbage
        conn.execute("UPDATE usage_chunks SET data = ?", (b"\x01" + (2).to_bytes(4, "little") + b"{}",))
    conn.close()
    for thread in (None, "t"):
        columns = await store.usage_columns(thread)
        assert list(columns["input_tokens"]) == list(range(20))
    await store.close()


def test_the_postgres_text_encoding_round_trips_every_string_and_leaves_plain_ones_alone() -> None:
    """`_text`: NUL and the mark encoded only where needed, and decoded back exactly."""
    import json

    from nbagent.store.postgres._text import guard_json, might_need_restore, restore

    plain = {"content": "plain text \\u0000 as six characters", "n": 1, "x": [None, True, 1.5]}
    assert guard_json(plain) == json.dumps(plain, ensure_ascii=False, separators=(",", ":"))
    tricky = ["\x00", "\x10", "\x100", "\x10\x10", "a\x00\x10\x00b", "\x10\x00", "0\x10", "x\x10", "\x00\x10\x30"]
    record = {"texts": tricky, **{t: t for t in tricky}}
    text = guard_json(record)
    assert "\\u0000" not in text  # what PostgreSQL refuses
    assert might_need_restore(text) and restore(json.loads(text)) == record
