"""Faults with the durable stores: kill -9 at random points, restart in a new process, two
writers, two kernels on two machines resuming one paused thread at once, a run on another
machine that must not be resumed while it goes on. Each against `SQLiteStore` and against
`PostgresStore` on the private cluster of tests/conftest_postgres.py.

The child process is this file run as a script (``python tests/test_store_faults.py MODE ...``):
it runs an agent on a store (a SQLite file, or a PostgreSQL URL with the schema in
``NBAGENT_TEST_SCHEMA``) and prints, flushed, every append it knows to be committed
(``persisted <version> <messages> <last message JSON>``) and where it is (``stream``,
``tool-start``, ``paused``). The parent kills it with SIGKILL at a chosen point and checks what
a user would: the thread loads, nothing reported as persisted is lost, it continues to a valid
conversation, and no tool with a stored result runs again (each tool appends its call id to a
marker file every time it executes).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # the child: make `nbagent` importable without the test package
    sys.path.insert(0, str(ROOT))

from nbagent import Agent, RunContext, tool  # noqa: E402
from nbagent.exceptions import ConflictError, UnknownCallError  # noqa: E402
from nbagent.messages import Message, UserMessage  # noqa: E402
from nbagent.models import FunctionModel, tool_call  # noqa: E402
from nbagent.store import PostgresStore, SQLiteStore, Store  # noqa: E402

DELAY = float(os.environ.get("NBAGENT_TEST_DELAY", "1"))


def _mark(ctx: RunContext[Any], name: str) -> None:
    # One marker file per thread, in the folder the parent chose (it runs tools too, on resume).
    with open(Path(os.environ["NBAGENT_TEST_MARKERS"]) / f"{ctx.thread}.marker", "a") as f:
        f.write(f"{ctx.call_id} {name}\n")
    print(f"tool-start {name} {ctx.call_id}", flush=True)


@tool
async def slow(ctx: RunContext[Any], n: int) -> str:
    """A tool that must not run twice (e.g. sends an e-mail)."""
    _mark(ctx, "slow")
    # well past the parent's kill window (up to 0.1 s after tool-start), even on a loaded machine
    await asyncio.sleep(0.4 * DELAY)
    return f"slow {n} done"


@tool(idempotent=True)
async def idem(ctx: RunContext[Any], n: int) -> str:
    """A tool that is safe to run again."""
    _mark(ctx, "idem")
    await asyncio.sleep(0.08 * DELAY)
    return f"idem {n} done"


@tool(requires_approval=True)
async def risky(ctx: RunContext[Any], n: int) -> str:
    """A tool a person approves. With NBAGENT_TEST_HOLD set, it waits (up to a minute) for that
    file: the parent holds a run inside it while another process tries the same thread."""
    _mark(ctx, "risky")
    hold = os.environ.get("NBAGENT_TEST_HOLD")
    deadline = time.monotonic() + 60
    while hold and not Path(hold).exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05 * DELAY)
    return f"risky {n} done"


async def script(messages: list[Message], info: Any) -> Any:
    """The same plan whatever happened before: it depends only on how many answers exist."""
    answers = sum(m.kind == "assistant" for m in messages)
    for i in range(4):
        print(f"stream {answers} {i}", flush=True)
        yield f"part{i} "
        await asyncio.sleep(0.015 * DELAY)
    if answers == 0:
        yield tool_call("slow", n=1)
    elif answers == 1:
        yield [tool_call("slow", n=2), tool_call("idem", n=3)]
    elif answers == 2:
        yield tool_call("risky", n=4)
    else:
        yield "all done"


class Reporting:
    """Prints each append once it is committed."""

    count = 0

    async def append(self, thread: str, **kwargs: Any) -> int:
        version: int = await super().append(thread, **kwargs)  # type: ignore[misc]
        messages = kwargs.get("messages", ())
        self.count += len(messages)
        last = json.dumps(messages[-1].to_dict()) if messages else "-"
        print(f"persisted {version} {self.count} {last}", flush=True)
        return version

    async def create_or_load(self, thread: str, **kwargs: Any) -> Any:
        before = self.count
        got = await super().create_or_load(thread, **kwargs)  # type: ignore[misc]
        if isinstance(got, int) and self.count == before:  # written in one call, not through append
            messages = kwargs.get("messages", ())
            self.count += len(messages)
            last = json.dumps(messages[-1].to_dict()) if messages else "-"
            print(f"persisted {got} {self.count} {last}", flush=True)
        return got


class ReportingSQLite(Reporting, SQLiteStore):
    pass


class ReportingPostgres(Reporting, PostgresStore):
    pass


def open_spec(spec: str, reporting: bool = False) -> Any:
    """The store a child or the parent opens: a SQLite file, or a PostgreSQL URL (schema and lease
    length from NBAGENT_TEST_SCHEMA / NBAGENT_TEST_LEASE)."""
    if spec.startswith("postgresql://"):
        cls: Any = ReportingPostgres if reporting else PostgresStore
        lease = float(os.environ.get("NBAGENT_TEST_LEASE", "30"))
        return cls(spec, schema=os.environ["NBAGENT_TEST_SCHEMA"], lease_s=lease)
    return (ReportingSQLite if reporting else SQLiteStore)(spec)


def make_agent(store: Store) -> Agent:
    return Agent(FunctionModel(stream_function=script), tools=[slow, idem, risky], store=store)


# ---------------------------------------------------------------------- the child
async def child(mode: str, db: str, thread: str, *rest: str) -> None:
    host = os.environ.get("NBAGENT_TEST_HOST")
    if host:  # another machine, as far as this process can tell
        import socket

        socket.gethostname = lambda: host  # type: ignore[assignment]
    if mode == "run":
        store = open_spec(db, reporting=True)
        agent = make_agent(store)
        result = None
        async for event in agent.stream("start", thread=thread):
            result = getattr(event, "result", None) or result
        assert result is not None
        if result.status == "paused":
            print("paused " + " ".join(p.id for p in result.pending), flush=True)
            if rest and rest[0] == "wait":
                await asyncio.sleep(20)
        print(f"ended {result.status}", flush=True)
    elif mode == "resume":
        agent = make_agent(open_spec(db))
        result = await agent.resume(thread=thread, approve=list(rest))
        usage = await agent.thread_usage(thread)
        print(
            f"ended {result.status} {result.output!r} requests={usage.requests} "
            f"input_tokens={usage.input_tokens}",
            flush=True,
        )
    elif mode == "race-resume":
        agent = make_agent(open_spec(db))
        go = Path(rest[0])
        print("ready", flush=True)
        while not go.exists():
            await asyncio.sleep(0.002)
        try:
            result = await agent.resume(thread=thread, approve=list(rest[1:]))
            print(f"ended {result.status}", flush=True)
        except ConflictError as exc:
            print(f"conflict {exc}", flush=True)
        except UnknownCallError as exc:  # the call is no longer waiting: the other process took it
            print(f"refused {exc}", flush=True)
    elif mode == "conflict-store":
        store = open_spec(db)
        loaded = await store.load(thread)
        assert loaded is not None
        print("loaded", flush=True)
        go = Path(rest[0])
        while not go.exists():
            await asyncio.sleep(0.005)
        try:
            await store.append(thread, version=loaded.version, step=0, messages=[UserMessage(rest[1])])
            print("written", flush=True)
        except ConflictError as exc:
            print(f"conflict {exc}", flush=True)
    elif mode == "conflict-agent":
        agent = make_agent(open_spec(db, reporting=True))
        go = Path(rest[0])
        print("ready", flush=True)
        while not go.exists():
            await asyncio.sleep(0.005)
        try:
            result = await agent.run(rest[1], thread=thread)
            print(f"ended {result.status}", flush=True)
        except ConflictError as exc:
            print(f"conflict {exc}", flush=True)


if __name__ == "__main__":
    asyncio.run(child(*sys.argv[1:]))
    sys.exit(0)


# ---------------------------------------------------------------------- the parent
import pytest  # noqa: E402

from nbagent.messages import unanswered_calls  # noqa: E402


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def where(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``where(name)``: the store spec of one trial: a file in tmp_path, or the cluster's URL (each
    test gets a schema of its own, passed to the children in NBAGENT_TEST_SCHEMA)."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("NBAGENT_TEST_SCHEMA", request.getfixturevalue("pg_schema"))
        return lambda name: url
    return lambda name: str(tmp_path / f"{name}.db")


def child_env(folder: Path, delay: float = 1.0) -> dict[str, str]:
    env = dict(os.environ)
    env["NBAGENT_TEST_MARKERS"] = str(folder)
    env["NBAGENT_TEST_DELAY"] = str(delay)
    env["PYTHONPATH"] = str(ROOT)
    return env


async def spawn(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(ROOT),
    )


def markers(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines() if line.strip())


async def finish(agent: Agent, thread: str) -> Any:
    """Continue a thread after a crash the way a user would, approving what waits."""
    loaded = await agent.store.load(thread)
    if loaded is None:
        result = await agent.run("start", thread=thread)
    elif loaded.messages[-1].kind == "assistant" and not unanswered_calls(loaded.messages):
        return None  # it had finished
    else:
        pending = [p.id for p in loaded.meta.pending]
        result = await agent.resume(thread=thread, approve=pending)
    for _ in range(5):
        if result.status != "paused":
            break
        result = await agent.resume(result, approve=result.pending)
    return result


def check_conversation(messages: list[Message], steps: list[int]) -> None:
    """Every tool call answered exactly once, right after its answer, at the answer's step."""
    assert steps == sorted(steps), f"steps go backwards: {steps}"
    open_calls: dict[str, int] = {}
    seen: set[str] = set()
    for i, m in enumerate(messages):
        if m.kind == "assistant":
            assert not open_calls, f"an answer at {i} while calls {sorted(open_calls)} have no result"
            open_calls = {c.id: steps[i] for c in m.tool_calls}  # type: ignore[union-attr]
        elif m.kind == "tool-result":
            call_id = m.call_id  # type: ignore[union-attr]
            assert call_id in open_calls and call_id not in seen, f"unexpected or repeated result {call_id}"
            assert steps[i] == open_calls.pop(call_id), "a result stored at another step than its call"
            seen.add(call_id)
        else:
            assert not open_calls, f"a {m.kind} message at {i} while calls have no result"
    assert not open_calls


async def one_trial(
    tmp: Path, db: str, scenario: str, rng: random.Random, index: int, after_append: int | None = None
) -> dict[str, Any]:
    thread = f"support-{index}"
    marker = tmp / f"{thread}.marker"
    proc = await spawn("run", db, thread, "wait", env=child_env(tmp))
    try:
        return await _trial(proc, db, marker, thread, scenario, rng, after_append)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _trial(
    proc: asyncio.subprocess.Process,
    db: str,
    marker: Path,
    thread: str,
    scenario: str,
    rng: random.Random,
    after_append: int | None,
) -> dict[str, Any]:
    assert proc.stdout is not None
    reported: list[tuple[int, int, str]] = []
    streams = tools = 0
    # Before the pause: 3 model calls x 4 deltas, 3 tool executions, 10 appends.
    target_stream = rng.randrange(0, 12)
    target_tool = rng.randrange(0, 3)
    target_persist = after_append or rng.randrange(1, 11)
    deadline = time.monotonic() + (rng.uniform(0.5, 1.6) if scenario == "anytime" else 60)
    killed_at = "end"
    while True:
        timeout = max(0.0, deadline - time.monotonic())
        try:
            line = (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode()
        except asyncio.TimeoutError:
            killed_at = "time"
            break
        if not line:
            break
        word = line.split(" ", 1)[0]
        if word == "persisted":
            _, version, count, last = line.rstrip("\n").split(" ", 3)
            reported.append((int(version), int(count), last))
            if scenario == "between" and len(reported) == target_persist:
                killed_at = f"after append {target_persist}"
                break
        elif word == "stream":
            if scenario == "stream" and streams == target_stream:
                await asyncio.sleep(rng.uniform(0, 0.012))
                killed_at = f"stream delta {target_stream}"
                break
            streams += 1
        elif word == "tool-start":
            if scenario == "tool" and tools == target_tool:
                await asyncio.sleep(rng.uniform(0, 0.1))
                killed_at = f"tool {target_tool}"
                break
            tools += 1
        elif word == "paused":
            await asyncio.sleep(rng.uniform(0, 0.05))
            killed_at = "paused"
            break
    if proc.returncode is None:
        proc.send_signal(signal.SIGKILL)
    await proc.wait()

    # The thread loads, and everything the child saw committed is there.
    store = open_spec(db)
    agent = make_agent(store)
    loaded = await store.load(thread)
    if reported:
        assert loaded is not None
        assert loaded.version >= reported[-1][0]
        for _version, count, last in reported:
            assert len(loaded.messages) >= count
            if last != "-":
                assert loaded.messages[count - 1].to_dict() == json.loads(last), "a committed message changed"
        cut = complete_prefix(loaded.messages)
        check_conversation(loaded.messages[:cut], loaded.message_steps[:cut])
    before = markers(marker)
    stored_results = {m.call_id for m in loaded.messages if m.kind == "tool-result"} if loaded else set()  # type: ignore[union-attr]
    started = {k for k, e in loaded.ledger.items() if e.status == "started"} if loaded else set()

    # It continues to a valid conversation.
    result = await finish(agent, thread)
    final = await store.load(thread)
    assert final is not None
    check_conversation(final.messages, final.message_steps)
    assert final.messages[-1].kind == "assistant" and final.messages[-1].text.endswith("all done")  # type: ignore[union-attr]
    assert result is None or result.status == "completed"

    # No tool with a stored result ran again; unfinished ones were not silently re-run.
    after = markers(marker)
    names = {c.id: c.name for m in final.messages if m.kind == "assistant" for c in m.tool_calls}  # type: ignore[union-attr]
    results = {m.call_id: m for m in final.messages if m.kind == "tool-result"}  # type: ignore[union-attr]
    for call_id in stored_results:
        assert after[call_id] == before[call_id], f"{names[call_id]} ran again although its result was stored"
    for call_id, count in after.items():
        if names[call_id] != "idem":
            assert count == 1, f"{names[call_id]} ran {count} times"
    for call_id in started - stored_results:
        if names[call_id] == "idem":
            assert results[call_id].status == "done" and after[call_id] == before[call_id] + 1
        else:
            assert results[call_id].status == "interrupted" and results[call_id].is_error
    await store.close()
    return {
        "scenario": scenario,
        "killed_at": killed_at,
        "reported": len(reported),
        "messages_after_kill": len(loaded.messages) if loaded else 0,
        "interrupted": sum(r.status == "interrupted" for r in results.values()),
        "reran": sum(after[c] - before[c] for c in started - stored_results if names[c] == "idem"),
    }


def complete_prefix(messages: list[Message]) -> int:
    """How many messages precede a step the kill left half done (an answer still missing results)."""
    if not unanswered_calls(messages):
        return len(messages)
    return max(i for i, m in enumerate(messages) if m.kind == "assistant")


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_kill_9_at_random_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: Any) -> None:
    monkeypatch.setenv("NBAGENT_TEST_MARKERS", str(tmp_path))
    rng = random.Random(int(os.environ.get("NBAGENT_FAULT_SEED", "20240601")))
    # "between": after each of the 10 appends a run makes before it pauses, one trial each.
    plan = ["stream"] * 8 + ["between"] * 10 + ["tool"] * 8 + ["paused"] * 3 + ["anytime"] * 4
    limit = asyncio.Semaphore(4)

    async def guarded(i: int, scenario: str) -> dict[str, Any]:
        async with limit:
            try:
                return await one_trial(
                    tmp_path,
                    where(f"t{i}"),
                    scenario,
                    random.Random(rng.random()),
                    i,
                    i - plan.index("between") + 1 if scenario == "between" else None,
                )
            except AssertionError as exc:
                raise AssertionError(f"trial {i} ({scenario}): {exc}") from exc

    start = time.perf_counter()
    gathered = await asyncio.gather(*(guarded(i, s) for i, s in enumerate(plan)), return_exceptions=True)
    failures = [g for g in gathered if isinstance(g, BaseException)]
    if failures:
        raise failures[0]
    outcomes: list[dict[str, Any]] = gathered  # type: ignore[assignment]
    elapsed = time.perf_counter() - start
    by = Counter(o["scenario"] for o in outcomes)
    print(
        f"\n{len(outcomes)} kill -9 trials in {elapsed:.1f} s: {dict(by)}; "
        f"interrupted results: {sum(o['interrupted'] for o in outcomes)}, "
        f"idempotent re-runs: {sum(o['reran'] for o in outcomes)}"
    )
    for o in outcomes:
        print("  ", o)
    assert len(outcomes) >= 30
    # The points were really hit: kills mid-run left unfinished threads, and unfinished tools.
    assert sum(o["killed_at"] != "end" for o in outcomes) >= 28
    assert sum(o["interrupted"] for o in outcomes) >= 1


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_resume_after_restart_in_a_new_process(tmp_path: Path, where: Any) -> None:
    db, marker = where("threads"), tmp_path / "support-42.marker"
    env = child_env(tmp_path, delay=0.1)
    first = await spawn("run", db, "support-42", env=env)
    out, err = await first.communicate()
    lines = out.decode().splitlines()
    assert first.returncode == 0, err.decode()
    paused = next(line for line in lines if line.startswith("paused"))
    ids = paused.split()[1:]
    assert len(ids) == 1 and lines[-1] == "ended paused"
    second = await spawn("resume", db, "support-42", *ids, env=env)
    out, err = await second.communicate()
    assert second.returncode == 0, err.decode()
    assert (
        out.decode()
        .splitlines()[-1]
        .startswith("ended completed 'part0 part1 part2 part3 all done' requests=4 input_tokens=")
    )
    assert sorted(markers(marker).values()) == [1, 1, 1, 1]  # slow, slow, idem, risky: each once
    # And the parent (a third process) sees the same thread and its usage.
    agent = make_agent(open_spec(db))
    assert (await agent.thread_usage("support-42")).requests == 4
    [info] = await agent.store.threads()  # (agent.threads() lists the threads this agent ran)
    assert (info.thread, info.status, info.title) == ("support-42", "completed", "start")
    await agent.store.close()


@pytest.mark.timeout(120)
async def test_two_processes_one_thread_exactly_one_conflict(tmp_path: Path, where: Any) -> None:
    db = where("threads")
    store = open_spec(db)
    await store.append("shared", version=0, step=0, messages=[UserMessage("hello")])
    env = child_env(tmp_path)
    go = tmp_path / "go"
    procs = [await spawn("conflict-store", db, "shared", str(go), f"from {k}", env=env) for k in "AB"]
    for p in procs:
        assert (await p.stdout.readline()).decode().strip() == "loaded"  # type: ignore[union-attr]
    go.touch()
    outs = [(await p.communicate())[0].decode().strip() for p in procs]
    assert sorted(o.split(" ", 1)[0] for o in outs) == ["conflict", "written"], outs
    loser = next(o for o in outs if o.startswith("conflict"))
    assert "thread 'shared' was changed by another writer" in loser
    assert "version 2, this writer expected version 1" in loser
    loaded = await store.load("shared")
    assert loaded is not None and loaded.version == 2 and len(loaded.messages) == 2
    await store.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_two_agents_running_one_thread(tmp_path: Path, where: Any) -> None:
    """Two kernels run the same thread at once: one gets ConflictError, nothing committed is lost."""
    db = where("threads")
    store = open_spec(db)
    await store.append("shared", version=0, step=0, messages=[UserMessage("hello")])
    env = child_env(tmp_path, delay=2)
    go = tmp_path / "go"
    procs = [await spawn("conflict-agent", db, "shared", str(go), f"prompt {k}", env=env) for k in "AB"]
    for p in procs:
        assert (await p.stdout.readline()).decode().strip() == "ready"  # type: ignore[union-attr]
    go.touch()
    outs = [(await p.communicate())[0].decode() for p in procs]
    finals = [o.strip().splitlines()[-1] for o in outs]
    assert sum(f.startswith("conflict") for f in finals) == 1, finals
    loaded = await store.load("shared")
    assert loaded is not None
    for out in outs:  # every append a process saw committed is in the thread
        for line in out.splitlines():
            if line.startswith("persisted") and not line.endswith(" -"):
                last = line.split(" ", 3)[3]
                assert json.loads(last) in [m.to_dict() for m in loaded.messages]
    await store.close()


async def _paused_thread(db: str, thread: str, env: dict[str, str]) -> list[str]:
    """Run `thread` until it pauses for the approval of `risky`; the ids waiting."""
    first = await spawn("run", db, thread, env=env)
    out, err = await first.communicate()
    assert first.returncode == 0, err.decode()
    paused = next(line for line in out.decode().splitlines() if line.startswith("paused"))
    return paused.split()[1:]


@pytest.mark.timeout(120)
async def test_two_kernels_on_two_machines_resume_one_paused_thread_at_once(tmp_path: Path, where: Any) -> None:
    """Both approve the same waiting call at the same moment: exactly one runs the tool, the other
    is refused (ConflictError; see below for SQLite), and nothing runs twice."""
    db, thread = where("threads"), "race"
    env = child_env(tmp_path, delay=0.1)
    ids = await _paused_thread(db, thread, env)
    risky_before = markers(tmp_path / f"{thread}.marker")
    go, hold = tmp_path / "go", tmp_path / "hold"
    # The winner is held inside the approved tool until the other process has given up, so the
    # other one always tries while the winner's run goes on (a race, not a resume of a thread
    # that has already completed, however long a loaded machine deschedules it).
    race = {**env, "NBAGENT_TEST_HOLD": str(hold)}
    procs = [await spawn("race-resume", db, thread, str(go), *ids, env={**race, "NBAGENT_TEST_HOST": f"machine-{k}"})
             for k in "AB"]
    for p in procs:
        assert (await p.stdout.readline()).decode().strip() == "ready"  # type: ignore[union-attr]
    go.touch()
    waiting = {asyncio.ensure_future(p.communicate()): p for p in procs}
    first, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED, timeout=60)
    hold.touch()  # the loser has finished (or a minute passed): let the winner's tool end
    done = [await task for task in waiting]
    assert first, "neither process gave up while the other was inside the tool"
    for out, err in done:  # a child that printed nothing failed: say how
        assert out.strip(), err.decode()[-3000:]
    outs = [out.decode().strip().splitlines()[-1] for out, _ in done]
    # The loser is refused either way. With PostgreSQL the lease says the winner's run goes on:
    # ConflictError, whenever it looks. SQLite keeps no lease, and a run recorded by another
    # machine cannot be checked by pid: if the loser reads the thread after the winner took the
    # call, it is told the call is no longer waiting (UnknownCallError); before, ConflictError.
    refusals = ["conflict"] if db.startswith("postgresql://") else ["conflict", "refused"]
    loser = (await next(iter(first)))[0].decode().strip().splitlines()[-1]
    assert loser.split(" ", 1)[0] in refusals, outs
    assert sorted(o.split(" ", 1)[0] for o in outs) == sorted([loser.split(" ", 1)[0], "ended"]), outs
    assert "ended completed" in outs
    after = markers(tmp_path / f"{thread}.marker")
    assert after[ids[0]] == 1 and risky_before[ids[0]] == 0, "the approved tool ran exactly once"
    assert all(count == 1 for count in after.values())
    store = open_spec(db)
    loaded = await store.load(thread)
    assert loaded is not None and loaded.meta.status == "completed"
    check_conversation(loaded.messages, loaded.message_steps)
    await store.close()


@pytest.mark.postgres
@pytest.mark.timeout(120)
async def test_a_run_on_another_machine_is_not_resumed_until_its_lease_lapses(
    tmp_path: Path, postgres_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel on machine B cannot tell by pid whether machine A's run goes on: the lease says
    so. While A runs a tool, B's resume is refused; once A is killed, its lease lapses and B
    takes over (the tool A was running is reported as interrupted, never run twice)."""
    monkeypatch.setenv("NBAGENT_TEST_SCHEMA", pg_schema)
    monkeypatch.setenv("NBAGENT_TEST_LEASE", "1.5")
    env = child_env(tmp_path, delay=60)  # the first tool would sleep 24 s: A is killed long before
    a = await spawn("run", postgres_url, "leased", env={**env, "NBAGENT_TEST_HOST": "machine-a"})
    assert a.stdout is not None
    while not (line := (await a.stdout.readline()).decode()).startswith("tool-start"):
        assert line, (await a.stderr.read()).decode()  # type: ignore[union-attr]
    await asyncio.sleep(2.0)  # past the first lease length: only renewals keep it
    b_env = {**env, "NBAGENT_TEST_HOST": "machine-b", "NBAGENT_TEST_DELAY": "0.1"}
    refused = await spawn("resume", postgres_url, "leased", env=b_env)
    out, err = await refused.communicate()
    assert refused.returncode != 0 and "is being run right now" in err.decode(), (out + err).decode()
    a.send_signal(signal.SIGKILL)
    await a.wait()
    await asyncio.sleep(2.0)  # the lease lapses (1.5 s) with nobody renewing it
    ids: list[str] = []
    for _ in range(3):  # resume: the interrupted tool, then the approvals of what pauses
        b = await spawn("resume", postgres_url, "leased", *ids, env=b_env)
        out, err = await b.communicate()
        assert b.returncode == 0, err.decode()
        store = open_spec(postgres_url)
        loaded = await store.load("leased")
        await store.close()
        assert loaded is not None
        if loaded.meta.status == "completed":
            break
        ids = [p.id for p in loaded.open_pending()]
    assert loaded.meta.status == "completed"
    results = [m for m in loaded.messages if m.kind == "tool-result"]
    assert results[0].status == "interrupted"  # type: ignore[union-attr]
    assert all(count == 1 for count in markers(tmp_path / "leased.marker").values())
