"""`agent.map(..., executor=...)` on a real Ray local cluster and a real Dask LocalCluster.

Each test runs both engines against the scripted OpenAI-compatible server on 127.0.0.1
(`tests/wire/scripted_server.py`), which counts what reached it: requests per row, rows running
at once. The agent's tool appends one line per execution to a file, from whichever worker process
runs it. Marked ``cluster`` (skip with NBAGENT_SKIP_CLUSTER=1); an engine whose package is not
installed (no wheel for the platform) skips its tests with the reason.

Ray starts once for this module (``ray.init(num_cpus=2)``, about 13 s on an idle 2-core machine),
Dask once (``LocalCluster``, two worker processes of one thread each, about 3 s).
"""

from __future__ import annotations

import _thread
import asyncio
import collections
import io
import itertools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nbagent import Agent, Retry, UserError
from nbagent.dataframe import BATCH_COLUMNS
from nbagent.models.openai import OpenAIModel
from nbagent.store import SQLiteStore
from tests.cluster_engines import start_dask, start_ray
from tests.wire.scripted_server import ScriptedServer

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.environ.get("NBAGENT_SKIP_CLUSTER") == "1", reason="NBAGENT_SKIP_CLUSTER=1"),
]

PRICES = {"scripted": {"input": 1.0, "output": 2.0}}


# ---------------------------------------------------------------------------------- engines
@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    ray = pytest.importorskip("ray", reason="Ray is not installed (no wheel for this platform?)")
    start_ray()
    yield "ray"
    ray.shutdown()


@pytest.fixture(scope="module")
def dask_client() -> Any:
    pytest.importorskip("distributed", reason="dask.distributed is not installed")
    client = start_dask()
    yield client
    cluster = client.cluster
    client.close()
    cluster.close()


@pytest.fixture(params=["ray", "dask"])
def executor(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("ray_cluster" if request.param == "ray" else "dask_client")


@pytest.fixture
def server() -> Any:
    with ScriptedServer(delay=0.01) as srv:
        yield srv


def recording_tools(log: Path) -> list[Any]:
    """The agent's one tool, which appends ``<row>\\t<pid>`` to `log` each time it runs."""

    def record(row: str) -> str:
        """Record that this row's tool ran.

        Args:
            row: the row's question.
        """
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{row}\t{os.getpid()}\n")
        return f"recorded {row}"

    return [record]


def tool_runs(log: Path) -> collections.Counter[str]:
    if not log.exists():
        return collections.Counter()
    return collections.Counter(line.split("\t")[0] for line in log.read_text().splitlines())


def make_agent(server: ScriptedServer, tmp_path: Path, store: str = "t.db", **kwargs: Any) -> Agent:
    kwargs.setdefault("tools", recording_tools(tmp_path / "tools.log"))
    model = OpenAIModel("scripted", base_url=server.base_url, provider="scripted")
    return Agent(model, store=str(tmp_path / store), retry=Retry(attempts=2, initial_delay=0.05),
                 prices=PRICES, **kwargs)


def wait_for(condition: Any, timeout: float = 90.0, what: Any = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(0.02)


def _all_lanes_waiting(server: ScriptedServer, quiet_s: float = 1.5) -> None:
    """Wait until the batch is still: requests are held and nothing else moves for `quiet_s`.
    Then every lane (a row running in a chunk) is either held on the server or out of rows, so
    every row answered before is stored."""
    last: tuple[int, int] | None = None
    since = time.monotonic()

    def still() -> bool:
        nonlocal last, since
        now = (server.served, len(server.held))
        if now != last:
            last, since = now, time.monotonic()
            return False
        return len(server.held) >= 2 and time.monotonic() - since >= quiet_s

    wait_for(still, what=lambda: f"a still batch: {server.held} held, {server.served} served")


def client_pid(server: ScriptedServer, port: int) -> int:
    """The process on this machine whose TCP connection to `server` has local port `port`."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.raddr and conn.raddr.port == server.port:
            assert conn.pid is not None
            return int(conn.pid)
    raise AssertionError(f"no process holds the connection from port {port}")


# ---------------------------------------------------------------------------------- tests
def test_the_frame_is_the_local_paths_in_input_order(executor: Any, server: ScriptedServer, tmp_path: Path) -> None:
    questions = pd.Series([f"question {i}" for i in range(14)] + [None, "bad [fail]", "slow down [429]"],
                          index=[f"q{i}" for i in range(17)], name="question")
    local = make_agent(server, tmp_path, store="local.db").map(questions, concurrency=4, progress=False,
                                                               thread_prefix="same")
    on_local = dict(server.requests)
    server.reset()
    remote = make_agent(server, tmp_path, store="remote.db").map(
        questions, executor=executor, concurrency=4, chunk_size=3, progress=False, thread_prefix="same")
    assert tuple(remote.columns) == BATCH_COLUMNS
    assert remote.index.tolist() == questions.index.tolist()
    assert remote["output"]["q3"] == "answer to question 3: recorded question 3"
    assert remote["status"].tolist() == ["completed"] * 14 + ["failed", "failed", "completed"]
    assert "400" in remote["error"]["q15"] and "refuses 'bad [fail]'" in remote["error"]["q15"]
    assert remote["error"]["q14"].startswith("missing input")
    assert (remote["input_tokens"][:14] == 20).all() and (remote["steps"][:14] == 2).all()
    assert remote["cost"]["q0"] == pytest.approx((20 * 1.0 + 10 * 2.0) / 1e6)
    # the same frame as the local path: values, dtypes, index; timings and run ids aside
    volatile = ["duration_s", "run_id"]
    pd.testing.assert_frame_equal(remote.drop(columns=volatile), local.drop(columns=volatile))
    assert remote["run_id"].notna().sum() == local["run_id"].notna().sum()
    # and the same requests reached the server (the 429 row was retried after its Retry-After)
    assert dict(server.requests) == on_local
    assert server.requests["slow down [429]"] == 3


def test_concurrency_caps_the_rows_running_at_once_on_all_workers(executor: Any, tmp_path: Path) -> None:
    with ScriptedServer(delay=0.05) as slow:
        df = make_agent(slow, tmp_path).map([f"r{i}" for i in range(24)], executor=executor, concurrency=4,
                                            progress=False)
        assert (df["status"] == "completed").all()
        assert 2 <= slow.max_active <= 4


def test_the_bar_advances_as_rows_finish_on_the_workers(executor: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import tqdm.auto

    updates: list[tuple[float, int]] = []

    class Recorded(tqdm.auto.tqdm):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, file=io.StringIO(), **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            updates.append((time.monotonic(), int(n or 0)))
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorded)
    with ScriptedServer(delay=0.03) as slow:
        df = make_agent(slow, tmp_path).map([f"r{i}" for i in range(20)], executor=executor, concurrency=2,
                                            chunk_size=10, desc="cluster")
    assert (df["status"] == "completed").all()
    assert [n for _, n in updates] == [1] * 20
    # two chunks of ten rows, each row taking two 30 ms answers: the bar moved in many steps
    # while the chunks ran (per chunk, it would have moved twice, ten rows at a time)
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(updates)]
    assert sum(gap > 0.03 for gap in gaps) >= 5, gaps


def test_a_tool_that_cannot_travel_fails_before_any_row_runs(executor: Any, server: ScriptedServer,
                                                             tmp_path: Path) -> None:
    lock = threading.Lock()

    def guarded(row: str) -> str:
        """Uses a lock of this process."""
        with lock:
            return row

    agent = make_agent(server, tmp_path, tools=[guarded])
    with pytest.raises(UserError, match=r"tool 'guarded' cannot be sent to the workers .*lock"):
        agent.map(["a", "b"], executor=executor, progress=False)
    assert server.served == 0


def test_the_key_stays_home_and_a_worker_without_one_says_which_variable(executor: Any, server: ScriptedServer,
                                                                         tmp_path: Path) -> None:
    secret = "sk-test-never-leaves-this-process-0123456789"
    model = OpenAIModel("scripted", base_url=server.base_url, api_key=secret, provider="scripted")
    agent = Agent(model, store=str(tmp_path / "k.db"))
    with pytest.raises(UserError, match="no OPENAI_API_KEY in its environment") as caught:
        agent.map(["a"], executor=executor, progress=False)
    assert secret not in str(caught.value)
    assert server.served == 0


def test_paused_rows_end_paused_and_are_decided_later_from_the_notebook(executor: Any, server: ScriptedServer,
                                                                        tmp_path: Path) -> None:
    from nbagent import tool

    log = tmp_path / "tools.log"
    record = recording_tools(log)[0]
    agent = make_agent(server, tmp_path, tools=[tool(requires_approval=True)(record)])
    first = agent.map(["a", "b", "c"], executor=executor, progress=False)
    assert first["status"].tolist() == ["paused"] * 3
    assert first["error"].str.contains("waiting for a decision: record").all()
    assert not log.exists()
    decided = agent.resume_sync(thread=first["thread"][1], always_allow=["record"])  # here, in the notebook
    assert decided.status == "completed" and decided.output == "answer to b: recorded b"
    again = agent.map(["a", "b", "c"], executor=executor, progress=False)
    assert again["status"].tolist() == ["paused", "completed", "paused"]
    assert again["skipped"].all()
    assert tool_runs(log) == {"b": 1}


def _run_in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["df"] = target()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def _kill_a_worker_mid_batch(executor: Any, server: ScriptedServer, agent: Agent,
                             prompts: list[str]) -> tuple[pd.DataFrame, set[str], int]:
    """Run the batch; once every lane waits on the server, SIGKILL the worker process of one
    waiting request, then let the server answer. Returns the frame, the rows answered before
    the kill, and the killed pid."""
    server.hold(after=10)
    thread, box = _run_in_thread(lambda: agent.map(prompts, executor=executor, concurrency=4, chunk_size=4,
                                                   progress=False))
    try:
        _all_lanes_waiting(server)  # every row answered before is stored
        answered_before = set(server.stats()["answered"])
        victim = client_pid(server, server.held[0][1])
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not _alive(victim), timeout=10, what="the worker to die")
    finally:  # let the batch end, whatever happened, so that it does not outlive the test
        server.release()
        thread.join(120)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    return box["df"], answered_before, victim


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_worker_loses_no_settled_row_and_no_row_runs_twice(executor: Any, server: ScriptedServer,
                                                                     tmp_path: Path) -> None:
    prompts = [f"row {i}" for i in range(24)]
    agent = make_agent(server, tmp_path)
    first, answered_before, victim = _kill_a_worker_mid_batch(executor, server, agent, prompts)
    assert answered_before and len(answered_before) < len(prompts)
    # the engine ran the dead worker's rows again elsewhere: settled ones were skipped there,
    # interrupted ones continued from the store
    assert (first["status"] == "completed").all(), first[["status", "error"]]
    runs = tool_runs(tmp_path / "tools.log")
    assert runs == dict.fromkeys(prompts, 1)  # every tool ran exactly once
    assert not _alive(victim)
    for prompt in answered_before:  # rows settled before the kill never reached the server again
        assert server.requests[prompt] == 2, prompt
    before = server.served
    second = agent.map(prompts, executor=executor, concurrency=4, progress=False)
    assert server.served == before  # the re-run ran nothing: every row was settled
    assert second["skipped"].all() and second["output"].tolist() == first["output"].tolist()


def test_ray_rows_of_a_dead_worker_fail_when_retries_are_spent_and_a_rerun_completes_them(
    ray_cluster: Any, server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nbagent.dataframe import _ray

    monkeypatch.setattr(_ray, "RETRIES", 0)
    prompts = [f"row {i}" for i in range(24)]
    agent = make_agent(server, tmp_path)
    first, answered_before, _ = _kill_a_worker_mid_batch(ray_cluster, server, agent, prompts)
    lost = first[first["status"] == "failed"]
    assert 1 <= len(lost) <= 4, first[["status", "error"]]
    assert lost["error"].str.contains("the Ray worker running this row died 1 times").all()
    assert (first["status"] != "failed").sum() >= len(answered_before)
    second = agent.map(prompts, executor=ray_cluster, concurrency=4, progress=False)
    assert (second["status"] == "completed").all()
    assert tool_runs(tmp_path / "tools.log") == dict.fromkeys(prompts, 1)  # none ran twice
    for prompt in answered_before:
        assert server.requests[prompt] == 2, prompt


def test_ctrl_c_cancels_the_remaining_chunks_and_a_rerun_completes_them(executor: Any, server: ScriptedServer,
                                                                        tmp_path: Path) -> None:
    prompts = [f"row {i}" for i in range(40)]
    agent = make_agent(server, tmp_path)
    server.hold(after=8)

    def press_stop() -> None:
        try:
            _all_lanes_waiting(server)
        finally:
            _thread.interrupt_main()  # what the kernel's Stop button does

    # A kernel handles SIGINT; a process started in the background may inherit it ignored, and
    # then interrupt_main() does nothing at all (the batch would run until the test's timeout).
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=press_stop, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            agent.map(prompts, executor=executor, concurrency=4, chunk_size=4, progress=False)
    finally:
        signal.signal(signal.SIGINT, handler)
    stopped_at = server.served + len(server.held)
    done_before = set(server.stats()["answered"])  # (the held requests are answered on release,
    server.release()                               # to clients that are gone)
    time.sleep(1.0)  # nothing more comes: the remaining chunks were cancelled
    assert server.served <= stopped_at
    assert len(done_before) < len(prompts) // 2
    statuses = _statuses(tmp_path / "t.db", _threads(agent, prompts))
    assert statuses["completed"] == len(done_before)
    assert statuses["cancelled"] >= 1  # the rows running when Stop was pressed
    assert statuses[None] >= len(prompts) // 2  # the remaining chunks never started
    second = agent.map(prompts, executor=executor, concurrency=4, progress=False)
    assert (second["status"] == "completed").all()
    assert second["skipped"].sum() >= len(done_before)
    assert tool_runs(tmp_path / "tools.log") == dict.fromkeys(prompts, 1)


def _statuses(path: Path, threads: list[str]) -> collections.Counter[str | None]:
    async def load() -> list[Any]:
        store = SQLiteStore(path)
        return [await store.load(t) for t in threads]

    return collections.Counter(s.meta.status if s is not None else None for s in asyncio.run(load()))


def _threads(agent: Agent, prompts: list[str]) -> list[str]:
    from nbagent.dataframe import batch_thread_ids

    return batch_thread_ids(agent, list(prompts), list(range(len(prompts))))


@pytest.mark.postgres
def test_workers_share_a_postgres_store_and_a_rerun_from_it_skips_every_row(
    executor: Any, server: ScriptedServer, tmp_path: Path, postgres_url: str, pg_schema: str
) -> None:
    """What a cluster of machines does: the workers write to one PostgreSQL store (the store
    travels by its URL), the notebook reads the rows back from it, and a re-run runs nothing."""
    from nbagent.store import PostgresStore

    log = tmp_path / "tools.log"
    model = OpenAIModel("scripted", base_url=server.base_url, provider="scripted")
    agent = Agent(model, tools=recording_tools(log), store=PostgresStore(postgres_url, schema=pg_schema),
                  prices=PRICES)
    rows = [f"pg row {i}" for i in range(8)]
    first = agent.map(rows, executor=executor, concurrency=4, chunk_size=2, progress=False)
    assert first["status"].tolist() == ["completed"] * 8 and not first["skipped"].any()
    assert first["output"][5] == "answer to pg row 5: recorded pg row 5"
    served = server.served
    again = agent.map(rows, executor=executor, concurrency=4, chunk_size=2, progress=False)
    assert again["skipped"].all() and again["output"].tolist() == first["output"].tolist()
    assert server.served == served  # nothing reached the model again
    assert tool_runs(log) == {row: 1 for row in rows}
    stored = {info.thread: info.status for info in asyncio.run(agent.threads())}  # read here, in the notebook
    assert all(stored[thread] == "completed" for thread in first["thread"])


def _stubborn_chunk(marker: str) -> Any:
    """A chunk task that yields one row, then ignores Ray's cancellation (a KeyboardInterrupt
    raised where it cannot stop at once, e.g. inside a blocking call of some library)."""
    import time as _time

    yield (0, {"status": "completed"})
    end = _time.monotonic() + 40
    while _time.monotonic() < end:
        try:
            _time.sleep(0.2)
        except KeyboardInterrupt:
            Path(marker).write_text("interrupted")


def test_ray_cancel_returns_within_its_wait_even_when_a_chunk_does_not_stop(ray_cluster: Any, tmp_path: Path) -> None:
    """Ctrl-C on a Ray batch: the driver waits at most its grace period for the chunks to stop,
    then raises, even if a chunk task never ends (it hung the whole test run once, waiting for
    the end of a cancelled chunk's stream with no time limit)."""
    import ray

    from nbagent.dataframe._ray import RayEngine, _Chunk

    engine = RayEngine()
    stubborn = ray.remote(max_retries=0)(_stubborn_chunk)
    generator = stubborn.remote(str(tmp_path / "marker"))
    engine._chunks[generator] = _Chunk([], 0)
    assert ray.get(next(generator)) == (0, {"status": "completed"})  # the task is running
    start = time.monotonic()
    engine.cancel(2.0)
    assert time.monotonic() - start < 6.0
    assert engine.running() == 0
    ray.cancel(generator, force=True)
