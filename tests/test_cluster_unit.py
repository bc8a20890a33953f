"""What cluster batches rely on, without a cluster: how an agent travels (pickled as its
definition, never with a key), the checks made before any row runs, the plan, the worker's chunk
runner and the driver's loop (with a fake engine). The real engines are in test_cluster.py."""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
import threading
import time
import types
from typing import Any

import cloudpickle
import pytest

from nbagent import Agent, UserError, tool
from nbagent.dataframe import BATCH_COLUMNS, _executors, _rows, _worker, batch
from nbagent.dataframe._executors import payload, plan, run_on_cluster
from nbagent.models import FunctionModel, TestModel
from nbagent.models.anthropic import AnthropicModel
from nbagent.models.openai import OpenAIModel
from nbagent.store import MemoryStore, SQLiteStore

SECRET = "sk-test-this-key-must-never-be-pickled-42"


# ---------------------------------------------------------------------------------- travel
def test_an_openai_model_pickles_without_its_key_and_reads_the_key_where_it_arrives(monkeypatch):
    model = OpenAIModel("gpt-4.1-mini", api_key=SECRET, settings={"temperature": 0})
    data = cloudpickle.dumps(model)
    assert SECRET.encode() not in data
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-workers-own-key-0123456789")
    there = pickle.loads(data)
    assert there._api_key.get() == "sk-the-workers-own-key-0123456789"
    assert (there.model_name, there.settings, there.base_url) == ("gpt-4.1-mini", {"temperature": 0}, None)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(UserError, match=r"no OPENAI_API_KEY in its environment.*runtime_env") as caught:
        pickle.loads(data)
    assert SECRET not in str(caught.value)


def test_a_keyless_servers_placeholder_travels(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIModel("llama3.1", base_url="http://127.0.0.1:11434/v1", provider="ollama")
    there = pickle.loads(cloudpickle.dumps(model))
    assert there._api_key.get() == "not-needed" and there.base_url == model.base_url


def test_the_local_models_fixed_key_travels(monkeypatch):
    from nbagent.models._local import LocalModel

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = LocalModel("local-model", base_url="http://127.0.0.1:18282/v1", api_key="local",
                       server_key=(None, None, 4096), start_timeout=1.0)
    assert pickle.loads(cloudpickle.dumps(model))._api_key.get() == "local"


def test_an_anthropic_model_pickles_without_its_key(monkeypatch):
    model = AnthropicModel("claude-haiku-4-5", api_key=SECRET)
    data = cloudpickle.dumps(model)
    assert SECRET.encode() not in data
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-workers-own")
    assert pickle.loads(data)._api_key.get() == "sk-ant-workers-own"


def test_a_key_itself_and_a_model_with_an_sdk_client_refuse_to_pickle():
    with pytest.raises(TypeError, match="never pickled"):
        cloudpickle.dumps(OpenAIModel("m", api_key=SECRET)._api_key)
    from openai import AsyncOpenAI

    with pytest.raises(TypeError, match="client="):
        cloudpickle.dumps(OpenAIModel("m", client=AsyncOpenAI(api_key=SECRET)))


def test_an_agent_pickles_as_its_definition_with_its_store_as_a_path(tmp_path, monkeypatch):
    monkeypatch.setenv("NBAGENT_STORE", str(tmp_path / "default.db"))

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return city.upper()

    agent = Agent(TestModel(), tools=[lookup], system="Be brief.")
    agent.config()  # a cached RunConfig does not travel
    there = pickle.loads(cloudpickle.dumps(agent))
    assert isinstance(there.store, SQLiteStore) and there.store.path == tmp_path / "default.db"
    assert there._config is None and there.system == "Be brief." and list(there.tools) == ["lookup"]
    assert there.run_sync("go", thread="t1").output == '{"lookup": "A"}'
    assert pickle.loads(pickle.dumps(SQLiteStore(tmp_path / "x.db"))).path == tmp_path / "x.db"


# ---------------------------------------------------------------------------------- checks
class _Pickler:
    """Enough of an engine for `payload`: cloudpickle, as Ray and Dask use."""

    name = "fake"

    def __init__(self) -> None:
        self.by_value_modules: list[Any] = []

    def dumps(self, obj: Any) -> bytes:
        return cloudpickle.dumps(obj)

    def by_value(self, module: Any) -> None:
        self.by_value_modules.append(module)
        cloudpickle.register_pickle_by_value(module)


def test_a_memory_store_is_refused_with_what_to_use_instead():
    agent = Agent(TestModel(), store=MemoryStore())
    with pytest.raises(UserError, match=r"MemoryStore lives in this one.*store='batch.db'"):
        payload(agent, _Pickler())


def test_a_part_that_cannot_be_pickled_is_named(tmp_path):
    lock = threading.Lock()

    def guarded(row: str) -> str:
        """Holds a lock of this process."""
        with lock:
            return row

    agent = Agent(TestModel(), tools=[guarded], store=str(tmp_path / "a.db"))
    with pytest.raises(UserError, match=r"tool 'guarded' cannot be sent to the workers \(TypeError: .*lock"):
        payload(agent, _Pickler())
    agent = Agent(TestModel(), store=str(tmp_path / "a.db"), stop_when=lambda r: lock.locked())
    with pytest.raises(UserError, match="stop_when cannot be sent"):
        payload(agent, _Pickler())


def test_functions_of_a_module_with_no_file_travel_by_value(tmp_path):
    module = types.ModuleType("nbagent_fileless_example")
    sys.modules[module.__name__] = module
    try:
        exec('def shout(text: str) -> str:\n    """Shout."""\n    return text.upper() + "!"\n', module.__dict__)
        agent = Agent(TestModel(), tools=[module.shout], store=str(tmp_path / "f.db"))
        engine = _Pickler()
        data = payload(agent, engine)
        assert engine.by_value_modules == [module]
    finally:
        del sys.modules[module.__name__]
    code = ("import pickle, sys; a = pickle.loads(sys.stdin.buffer.read()); "
            "print(a.tools['shout'].function('hi'))")
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == "HI!"


def test_executor_and_chunk_size_are_checked():
    agent = Agent(TestModel(), store=MemoryStore())
    with pytest.raises(UserError, match="executor='spark'"):
        agent.map(["a"], executor="spark", progress=False)
    with pytest.raises(UserError, match="executor= takes"):
        agent.map(["a"], executor=object(), progress=False)
    with pytest.raises(UserError, match="chunk_size= is for cluster executors"):
        agent.map(["a"], chunk_size=10, progress=False)
    assert batch(agent, ["a"], executor="local", progress=False)["status"][0] == "completed"


def test_executor_dask_without_a_client_says_how_to_make_one():
    pytest.importorskip("distributed")
    from nbagent.dataframe._dask import current_client

    with pytest.raises(UserError, match=r"needs a dask.distributed Client: client = Client\(\)"):
        current_client()


@pytest.mark.parametrize(("rows", "slots", "concurrency", "chunk_size", "expected"), [
    (1000, 2, 32, None, (2, 16, 100)),    # two chunks in flight, 16 rows at once each
    (1000, 8, 32, None, (8, 4, 25)),
    (10, 2, 32, None, (2, 16, 32)),       # fewer rows than one chunk's concurrency
    (100, 16, 4, None, (4, 1, 5)),        # fewer rows at once than slots: the cap wins
    (100, 2, 5, 7, (2, 2, 7)),            # 2 x 2 <= 5
])
def test_the_plan_never_runs_more_rows_at_once_than_concurrency(rows, slots, concurrency, chunk_size, expected):
    in_flight, per_chunk, size = plan(rows, slots, concurrency, chunk_size)
    assert (in_flight, per_chunk, size) == expected
    assert in_flight * per_chunk <= concurrency


# ---------------------------------------------------------------------------------- the worker
def _slow_agent(delay: float = 0.05) -> Agent:
    async def answer(messages, info):
        await asyncio.sleep(delay)
        return f"echo {messages[-1].content}"

    return Agent(FunctionModel(answer), store=MemoryStore())


def test_a_chunk_yields_each_row_as_it_is_settled():
    agent = _slow_agent()
    rows = [(i, f"q{i}", f"t{i}") for i in range(6)]
    seen = []
    start = time.monotonic()
    for position, row in _worker.run_chunk(agent, rows, concurrency=2):
        seen.append((position, row["output"], time.monotonic() - start))
    assert sorted(p for p, _, _ in seen) == list(range(6))
    assert all(output == f"echo q{p}" for p, output, _ in seen)
    assert seen[0][2] < seen[-1][2] - 0.08  # three waves of two, reported as they came


def test_a_stopped_chunk_cancels_its_running_rows_and_runs_no_more():
    agent = _slow_agent(delay=1.5)
    rows = [(i, f"q{i}", f"t{i}") for i in range(6)]
    stop_at = time.monotonic() + 0.3
    out = list(_worker.run_chunk(agent, rows, concurrency=2, stopped=lambda: time.monotonic() > stop_at))
    assert out == []

    async def statuses():
        return [(await agent.store.load(f"t{i}")) for i in range(6)]

    states = asyncio.run(statuses())
    assert [s.meta.status for s in states[:2]] == ["cancelled", "cancelled"]
    assert states[2:] == [None] * 4


def test_a_worker_rebuilds_the_agent_once_per_batch(tmp_path):
    data = cloudpickle.dumps(Agent(TestModel(), store=str(tmp_path / "w.db")))
    first = _worker.agent_for("batch-a", data)
    assert _worker.agent_for("batch-a", data) is first
    assert _worker.agent_for("batch-b", data) is not first


# ---------------------------------------------------------------------------------- the driver
class _FakeEngine:
    """Runs each chunk at once in this process; `script` says what to report instead."""

    name = "fake"

    def __init__(self, script: dict[int, str] | None = None) -> None:
        self.script = script or {}
        self.chunks: list[list[Any]] = []
        self.pending: list[Any] = []
        self.cancelled = False
        self.agent: Agent | None = None

    def slots(self) -> int:
        return 2

    def dumps(self, obj: Any) -> bytes:
        return cloudpickle.dumps(obj)

    def by_value(self, module: Any) -> None:
        pass

    def start(self, data: bytes, concurrency: int) -> None:
        self.agent = pickle.loads(data)
        self.concurrency = concurrency

    def submit(self, rows: list[Any]) -> None:
        self.chunks.append(rows)
        self.pending.append(rows)

    def running(self) -> int:
        return len(self.pending)

    def poll(self, timeout: float) -> list[Any]:
        rows = self.pending.pop(0)
        what = self.script.get(len(self.chunks) - len(self.pending) - 1)
        if what == "lost":
            return [("lost", [r[0] for r in rows], "the fake worker died")]
        if what == "boom":
            raise RuntimeError("the chunk failed as a whole")
        assert self.agent is not None
        settled = list(_worker.run_chunk(self.agent, rows, self.concurrency))
        return [("tick", p) for p, _ in settled] + [("row", p, row) for p, row in settled]

    def cancel(self, wait_s: float) -> None:
        self.cancelled = True

    def close(self) -> None:
        pass


class _Bar:
    def __init__(self) -> None:
        self.n = self.failed = self.skipped = self.initial = 0
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, refresh: bool, failed: int = 0, skipped: int = 0) -> None:
        self.failed, self.skipped = failed, skipped

    def close(self) -> None:
        self.closed = True


def test_the_driver_builds_the_local_frame_and_reports_lost_rows(tmp_path, monkeypatch):
    engine = _FakeEngine({1: "lost"})
    monkeypatch.setattr(_executors, "engine_for", lambda executor: engine)
    bar = _Bar()
    monkeypatch.setattr(_rows, "progress_bar", lambda total, enabled, desc: bar)
    agent = Agent(TestModel(text="done"), store=str(tmp_path / "d.db"))
    df = run_on_cluster(agent, [f"q{i}" for i in range(7)], "fake", concurrency=4, thread_prefix=None,
                        progress=True, desc=None, chunk_size=3)
    assert bar.n == 7 and bar.failed == 3 and bar.closed  # a row reported twice (tick, row) counts once
    assert bar.skipped == bar.initial == 0
    assert tuple(df.columns) == BATCH_COLUMNS
    assert [len(c) for c in engine.chunks] == [3, 3, 1]
    assert df["status"].tolist() == ["completed"] * 3 + ["failed"] * 3 + ["completed"]
    assert df["error"][3] == ("the fake worker died; run the batch again to continue this row where it "
                              "was stored")
    assert df["thread"].tolist() == batch(Agent(TestModel(text="done"), store=MemoryStore()),
                                          [f"q{i}" for i in range(7)], progress=False)["thread"].tolist()
    # Again: the four settled rows are skipped (ticked first, then known as skipped), the lost ones
    # run; the skipped rows move the bar's `initial`, so tqdm's rate counts only the rows that ran.
    again = _Bar()
    monkeypatch.setattr(_rows, "progress_bar", lambda total, enabled, desc: again)
    monkeypatch.setattr(_executors, "engine_for", lambda executor: _FakeEngine())
    df = run_on_cluster(agent, [f"q{i}" for i in range(7)], "fake", concurrency=4, thread_prefix=None,
                        progress=True, desc=None, chunk_size=3)
    assert df["skipped"].tolist() == [True] * 3 + [False] * 3 + [True]
    assert (again.n, again.initial, again.skipped, again.failed) == (7, 4, 4, 0)


def test_a_chunk_failing_as_a_whole_cancels_the_rest_and_raises(tmp_path, monkeypatch):
    engine = _FakeEngine({0: "boom"})
    monkeypatch.setattr(_executors, "engine_for", lambda executor: engine)
    agent = Agent(TestModel(), store=str(tmp_path / "e.db"))
    with pytest.raises(RuntimeError, match="failed as a whole"):
        run_on_cluster(agent, ["a", "b", "c"], "fake", concurrency=2, thread_prefix=None, progress=False,
                       desc=None, chunk_size=1)
    assert engine.cancelled


def test_ray_and_dask_are_imported_only_when_chosen():
    code = ("import nbagent, nbagent.dataframe, sys; from nbagent.dataframe import _executors, _worker; "
            "print(sorted(m for m in ('ray', 'dask', 'distributed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
