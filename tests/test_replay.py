"""Record and replay (`nbagent.models.record` / `replay`, issue #29): a recorded run replayed with
no model answers the same, for free; a changed request fails naming its first difference, or
goes live with ``then=``; recordings live in every store and export to JSON Lines without keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, tool
from nbagent.exceptions import ReplayMismatchError, UserError
from nbagent.messages import ToolResultMessage
from nbagent.models import (
    FunctionModel,
    RecordingModel,
    ReplayModel,
    ScriptedModel,
    auto,
    export_recording,
    record,
    replay,
    tool_call,
)
from nbagent.store import MemoryStore, PostgresStore, SQLiteStore, Store
from tests.wire.scripted_server import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]

WEATHER = {"Paris": "sunny", "Oslo": "snow"}
NETWORK_OFF = (
    "import socket\n"
    "def _off(*args, **kwargs):\n    raise OSError('the network is off')\n"
    "socket.socket.connect = _off; socket.socket.connect_ex = _off; socket.create_connection = _off\n"
)
"""Prepended to a subprocess's code: any connection it tries fails."""


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return WEATHER.get(city, "unknown")


def script(steps: int = 3) -> ScriptedModel:
    """Tool calls for steps 1 .. steps-1, then a text answer."""
    calls: list[Any] = [tool_call("weather", city="Paris" if i % 2 else "Oslo") for i in range(1, steps)]
    model = ScriptedModel([*calls, "Paris is sunny, Oslo has snow."], model_name="gpt-4.1-mini")
    model.provider = "openai"  # priced like gpt-4.1-mini, so the recorded cost is known
    return model


def open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "threads.db")
    return PostgresStore(request.getfixturevalue("postgres_url"), schema=request.getfixturevalue("pg_schema"))


def visible(messages: list[Any]) -> list[dict[str, Any]]:
    """Messages as dicts without timings (a tool's duration differs between two runs)."""
    out = []
    for m in messages:
        data = m.to_dict()
        data.pop("duration_s", None)
        out.append(data)
    return out


@pytest.mark.parametrize("kind", KINDS)
async def test_replay_answers_like_the_recording_for_free(kind: str, request: pytest.FixtureRequest,
                                                          tmp_path: Path) -> None:
    store = open_store(kind, request, tmp_path)
    live = script()
    first = await Agent(record(live), tools=[weather], store=store).run("Weather?", thread="t1")
    assert first.status == "completed" and len(live.requests) == 3
    assert len(await store.recordings(["t1"])) == 3

    model = replay(store, thread="t1")
    again = await Agent(model, tools=[weather], store=store).run("Weather?", thread="t2")
    assert again.output == first.output
    assert visible(again.messages) == visible(first.messages)
    assert model.replayed == 3
    rows = again.usage.calls
    assert [r.replayed for r in rows] == [True] * 3
    assert all(r.cost_total == 0 for r in rows)
    assert [r.recorded_cost for r in rows] == [r.cost_total for r in first.usage.calls]
    assert all(r.recorded_cost and r.recorded_cost > 0 for r in rows)
    assert [r.input_tokens for r in rows] == [r.input_tokens for r in first.usage.calls]
    stored = await store.load("t2")  # the flags and the recorded cost survive the store
    assert stored is not None
    assert [(r.replayed, r.cost_total, r.recorded_cost) for r in stored.usage] == [
        (True, 0.0, r.cost_total) for r in first.usage.calls]
    original = await store.load("t1")
    assert original is not None and not any(r.replayed for r in original.usage)
    await store.close()


async def test_events_and_frames_are_those_of_the_recorded_run_but_free() -> None:
    """Streamed, into another store: the same events and the same frames, except each run's id
    and timings, and the replayed usage rows' flags and cost."""
    from pandas.testing import assert_frame_equal

    import nbagent

    recorded_in, replayed_in = MemoryStore(), MemoryStore()
    first = Agent(record(script()), tools=[weather], store=recorded_in)
    events = [e async for e in first.stream("Weather?", thread="w")]
    again = Agent(replay(recorded_in, thread="w"), tools=[weather], store=replayed_in)
    replayed_events = [e async for e in again.stream("Weather?", thread="w")]

    def told(items: list[Any]) -> list[tuple[str, Any]]:
        return [(e.kind, getattr(e, "delta", None) or getattr(getattr(e, "result", None), "content", None))
                for e in items]

    assert told(replayed_events) == told(events)
    timings = ["run_id", "time", "started", "latency_s", "duration_s", "wall_s"]
    free = ["cost_input", "cost_output", "cost_total", "replayed", "recorded_cost"]
    for frame in (nbagent.usage_frame, nbagent.tool_calls_frame, nbagent.runs_frame):
        a, b = frame(first), frame(again)
        assert len(a) == len(b) > 0
        same = [c for c in a.columns if c not in timings + free]
        assert_frame_equal(a[same], b[same], obj=frame.__name__)
    usage, replayed_usage = nbagent.usage_frame(first), nbagent.usage_frame(again)
    assert not usage["replayed"].any() and replayed_usage["replayed"].all()
    assert (replayed_usage["cost_total"] == 0).all()
    assert replayed_usage["recorded_cost"].tolist() == usage["cost_total"].tolist()
    assert nbagent.runs_frame(again)["cost_total"].sum() == 0


async def test_streamed_deltas_are_recorded_and_replayed() -> None:
    store = MemoryStore()
    agent = Agent(record(FunctionModel(lambda m, r: "one two three")), store=store)
    live = [e.delta async for e in agent.stream("hi", thread="s") if e.kind == "text-delta"]
    (entry,) = await store.recordings(["s"])
    assert [d[2] for d in entry["deltas"]] == live == ["one", " two", " three"]
    assert all(isinstance(d[0], float) for d in entry["deltas"])
    replayed = Agent(replay(store, thread="s"))
    again = [e.delta async for e in replayed.stream("hi") if e.kind == "text-delta"]
    assert again == live


async def test_a_changed_request_fails_naming_the_first_difference() -> None:
    store = MemoryStore()
    await Agent(record(script()), tools=[weather], store=store).run("Weather?", thread="t1")
    result = await Agent(replay(store, thread="t1"), tools=[weather]).run("Weather in Rome?")
    assert result.status == "failed"
    assert isinstance(result.exception, ReplayMismatchError)
    assert "message 0 (user) differs" in result.error  # type: ignore[operator]
    assert "Weather in Rome?" in result.error  # type: ignore[operator]
    assert "Weather?" in result.error  # type: ignore[operator]


async def test_then_goes_live_at_exactly_the_first_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    first = await Agent(record(script(4)), tools=[weather], store=store).run("Weather?", thread="t1")
    assert first.steps == 4
    monkeypatch.setitem(WEATHER, "Oslo", "rain")  # step 2's tool result changes: step 3 asks anew
    live = FunctionModel(lambda m, r: "live answer")
    model = replay(store, thread="t1", then=live)
    result = await Agent(model, tools=[weather]).run("Weather?")
    assert result.status == "completed"
    assert model.replayed == 2 and model.live
    assert [r.step for r in live.requests] == [3]
    assert result.output == "live answer"
    assert [r.replayed for r in result.usage.calls] == [True, True, False]


async def test_go_live_from_step_3_of_6_calls_the_model_for_steps_3_to_6_only() -> None:
    store = MemoryStore()
    recorded = await Agent(record(script(6)), tools=[weather], store=store).run("Weather?", thread="t1")
    assert recorded.steps == 6
    agent = Agent(replay(store, thread="t1", then=script(6)), tools=[weather], store=store)
    live = agent.model.then  # type: ignore[attr-defined]
    live.position = 2  # the live model continues the script from step 3
    fork = await agent.fork("t1", at_step=2, edit="fog")  # step 2's tool result, edited
    result = await agent.resume(thread=fork)
    assert result.status == "completed"
    assert [r.step for r in live.requests] == [3, 4, 5, 6]
    fork_messages = (await store.load(fork)).messages  # type: ignore[union-attr]
    assert any(isinstance(m, ToolResultMessage) and m.content == "fog" for m in fork_messages)


async def test_matching_is_by_content_not_position() -> None:
    store = MemoryStore()
    a = Agent(record(FunctionModel(lambda m, r: "answer to " + m[-1].content)), store=store)  # type: ignore[union-attr]
    await a.run("first", thread="a")
    await a.run("second", thread="b")
    model = replay(store)
    agent = Agent(model)
    assert (await agent.run("second")).output == "answer to second"
    assert (await agent.run("first")).output == "answer to first"


def test_export_holds_no_key_and_replays_in_another_process(tmp_path: Path) -> None:
    secret = "sk-test-very-secret-0123456789"
    store = SQLiteStore(tmp_path / "threads.db")
    with ScriptedServer() as server:
        from nbagent.models import OpenAIModel

        real = OpenAIModel("scripted", base_url=server.base_url, api_key=secret)
        agent = Agent(record(real), tools=[weather], store=store, prices={"scripted": {"input": 1, "output": 2}})
        first = agent.run_sync("Paris", thread="web")
        asked = server.requests_for("Paris")
    assert first.status == "completed" and asked == 2
    path = tmp_path / "recording.jsonl"
    assert export_recording(store, path) == 2
    text = path.read_text()
    assert secret not in text and "Authorization" not in text and server.base_url not in text
    assert [json.loads(line)["thread"] for line in text.splitlines()] == ["web", "web"]
    # Another process, the server gone and the network off: the recording answers the same run.
    code = NETWORK_OFF + (
        "import sys; from nbagent import Agent, tool\n"
        "from nbagent.models import auto\n"
        "@tool\ndef weather(city: str) -> str:\n    '''The weather in a city.'''\n"
        "    return {'Paris': 'sunny', 'Oslo': 'snow'}.get(city, 'unknown')\n"
        "r = Agent(auto(), tools=[weather]).run_sync('Paris')\n"
        "print(r.status, '|', r.output, '|', [u.replayed for u in r.usage.calls])\n"
    )
    env = {"NBAGENT_REPLAY": str(path), "PATH": "/usr/bin:/bin", "NBAGENT_STORE": str(tmp_path / "other.db")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == f"completed | {first.output} | [True, True]"




@pytest.mark.local_llm
def test_a_local_model_run_replays_with_the_network_off(tmp_path: Path, local_llm_base_url: str) -> None:
    from nbagent.models import OpenAIModel

    local = OpenAIModel("local-model", base_url=local_llm_base_url, api_key="local", provider="local",
                        settings={"temperature": 0, "max_tokens": 16})
    store = SQLiteStore(tmp_path / "threads.db")
    agent = Agent(record(local), store=store)
    first = agent.run_sync("Name a colour.", thread="colour")
    assert first.status == "completed" and first.output
    path = tmp_path / "local.jsonl"
    assert export_recording(store, path) == 1
    code = NETWORK_OFF + (
        "import sys; from nbagent import Agent\n"
        "from nbagent.models import auto\n"
        "r = Agent(auto()).run_sync('Name a colour.')\n"
        "print(repr(r.output), r.status, [(u.replayed, u.cost_total, u.input_tokens) for u in r.usage.calls])\n"
    )
    env = {"NBAGENT_REPLAY": str(path), "PATH": "/usr/bin:/bin", "NBAGENT_STORE": str(tmp_path / "other.db")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    row = first.usage.calls[0]
    assert out.strip() == f"{first.output!r} completed [(True, 0.0, {row.input_tokens})]"


def test_auto_replays_what_nbagent_replay_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore(tmp_path / "rec.db")
    Agent(record(FunctionModel(lambda m, r: "hello")), store=store).run_sync("hi", thread="x")
    monkeypatch.setenv("NBAGENT_REPLAY", str(tmp_path / "rec.db"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used")
    model = auto()
    assert isinstance(model, ReplayModel) and len(model.recordings) == 1
    assert repr(model) == f"replay({str(tmp_path / 'rec.db')!r}, 1 call of function)"  # whose answers
    assert Agent(model).run_sync("hi").output == "hello"


def test_nbagent_record_makes_auto_record_each_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """How scripts/make_notebooks.py --record records a notebook without changing a cell."""
    for name in ("NBAGENT_REPLAY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OLLAMA_MODEL"):
        monkeypatch.delenv(name, raising=False)
    stand_in = FunctionModel(lambda m, r: "hello")
    assert auto(fallback=stand_in) is stand_in
    monkeypatch.setenv("NBAGENT_RECORD", "1")
    model = auto(fallback=stand_in)
    assert isinstance(model, RecordingModel)
    store = SQLiteStore(tmp_path / "rec.db")
    Agent(model, store=store).run_sync("hi", thread="x")
    assert export_recording(store, tmp_path / "rec.jsonl") == 1
    monkeypatch.setenv("NBAGENT_RECORD", "0")
    assert auto(fallback=stand_in) is stand_in


def test_replay_of_an_unknown_thread_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no recorded model call of thread 'nope'"):
        replay(MemoryStore(), thread="nope")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n")
    with pytest.raises(UserError, match="line 1"):
        replay(bad)


@pytest.mark.parametrize("kind", KINDS)
async def test_deleting_a_thread_deletes_its_recordings(kind: str, request: pytest.FixtureRequest,
                                                        tmp_path: Path) -> None:
    store = open_store(kind, request, tmp_path)
    agent = Agent(record(script()), tools=[weather], store=store)
    await agent.run("Weather?", thread="t1")
    agent.model = record(script())
    await agent.run("Weather?", thread="t2")
    assert len(await store.recordings()) == 6
    assert await agent.delete_thread("t1") is True
    assert "t1" not in agent.own_threads()
    assert await store.recordings(["t1"]) == []
    assert [r["thread"] for r in await store.recordings()] == ["t2"] * 3
    with pytest.raises(UserError, match="no recorded model call of thread 't1'"):
        replay(store, thread="t1")
    assert await agent.delete_thread("t1") is False
    await store.append("t3", version=0, step=0, messages=[])  # prune takes recordings along too
    await store.add_recording("t3", (await store.recordings(["t2"]))[0])
    assert await store.prune(older_than=-60) == ["t2", "t3"]
    assert await store.recordings() == []
    await store.close()


def test_delete_thread_sync_deletes_recordings_in_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    agent = Agent(record(script()), tools=[weather], store=SQLiteStore(path))
    agent.run_sync("Weather?", thread="t1")
    assert agent.delete_thread_sync("t1") is True
    assert export_recording(str(path), tmp_path / "left.jsonl") == 0


async def test_go_live_from_a_step_of_an_exported_recording_in_a_fresh_store(tmp_path: Path) -> None:
    """CI / Binder: the recording is a file and the store is empty. The replayed run rebuilds the
    thread for free, the fork edits step 2's tool result, and only steps 3 to 6 call the model."""
    recorded = MemoryStore()
    await Agent(record(script(6)), tools=[weather], store=recorded).run("Weather?", thread="t1")
    path = tmp_path / "recording.jsonl"
    assert export_recording(recorded, path) == 6

    def answer(messages: list[Any], info: Any) -> Any:
        return tool_call("weather", city="Paris") if info.step < 6 else "Fog in Oslo, sun in Paris."

    live = FunctionModel(answer)
    agent = Agent(replay(path, then=live), tools=[weather], store=MemoryStore())
    again = await agent.run("Weather?", thread="t1")
    assert again.steps == 6 and live.requests == []
    assert all(r.replayed and r.cost_total == 0 for r in again.usage.calls)
    fork = await agent.fork("t1", at_step=2, edit="fog")
    result = await agent.resume(thread=fork)
    assert result.status == "completed" and result.output == "Fog in Oslo, sun in Paris."
    assert [r.step for r in live.requests] == [3, 4, 5, 6]
    assert any(isinstance(m, ToolResultMessage) and m.content == "fog" for m in live.requests[0].messages)
    stored = await agent.store.load(fork)
    assert stored is not None
    assert [(r.step, r.replayed) for r in stored.usage] == [
        (1, True), (2, True), (3, False), (4, False), (5, False), (6, False)]


def counted_tools() -> tuple[list[Any], list[str]]:
    """An async tool whose first call of an answer is slower (its results come in out of order),
    and the list of the cities it was called for."""
    import asyncio

    ran: list[str] = []

    @tool
    async def forecast(city: str) -> str:
        """Tomorrow's weather in a city (a network call, say)."""
        ran.append(city)
        await asyncio.sleep(0.05 if city == "Paris" else 0.0)
        return f"{city}: {WEATHER.get(city, 'unknown')}"

    return [forecast], ran


def two_calls_then_text() -> FunctionModel:
    def answer(messages: list[Any], info: Any) -> Any:
        if info.step == 1:
            return [tool_call("forecast", city="Paris"), tool_call("forecast", city="Oslo")]
        if info.step == 2:
            return tool_call("forecast", city="Rome")
        return "done: " + " / ".join(m.content for m in messages if isinstance(m, ToolResultMessage))

    return FunctionModel(answer)


async def test_tools_recorded_takes_results_from_the_recording_and_runs_no_tool(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    tools, ran = counted_tools()
    first = await Agent(record(two_calls_then_text()), tools=tools, store=store).run("Plan a trip", thread="t1")
    assert first.status == "completed" and sorted(ran) == ["Oslo", "Paris", "Rome"]
    results = [m for m in first.messages if isinstance(m, ToolResultMessage)]
    assert [m.content for m in results[:2]] == ["Oslo: snow", "Paris: sunny"]  # Paris was slower
    ran.clear()
    monkeypatch.setitem(WEATHER, "Paris", "storm")  # the tools would now answer differently

    again = await Agent(replay(store, thread="t1", tools="recorded"), tools=tools).run("Plan a trip")
    assert ran == []  # no tool ran
    assert again.status == "completed" and again.output == first.output
    by_call = {m.call_id: m.content for m in again.messages if isinstance(m, ToolResultMessage)}
    assert by_call == {m.call_id: m.content for m in results}  # each call got its own recorded result
    assert all(m.duration_s == 0.0 for m in again.messages if isinstance(m, ToolResultMessage))

    ran_again = await Agent(replay(store, thread="t1"), tools=tools).run("Plan a trip")  # default: tools run
    assert sorted(ran) == ["Oslo", "Paris"]  # then step 2 differs: the run stops before Rome
    assert ran_again.status == "failed" and isinstance(ran_again.exception, ReplayMismatchError)
    assert "Paris: storm" in ran_again.error  # type: ignore[operator]


async def test_tools_recorded_without_a_recorded_result_gives_an_error_result() -> None:
    store = MemoryStore()
    tools, ran = counted_tools()
    agent = Agent(record(two_calls_then_text()), tools=tools, store=store, max_steps=2)
    first = await agent.run("Plan a trip", thread="t1")  # stops after step 2's tool: Rome's result never sent
    assert first.stop_reason == "max_steps" and "Rome" in ran
    ran.clear()
    again = await Agent(replay(store, thread="t1", tools="recorded"), tools=tools, max_steps=2).run("Plan a trip")
    assert ran == []
    rome = [m for m in again.messages if isinstance(m, ToolResultMessage)][-1]
    assert rome.is_error and "holds no recorded result for this call" in rome.content
    live = await Agent(replay(store, thread="t1", tools="recorded", then=two_calls_then_text()), tools=tools,
                       max_steps=2).run("Plan a trip")
    assert ran == ["Rome"] and live.messages[-1].content == "Rome: unknown"  # type: ignore[union-attr]
    with pytest.raises(UserError, match="tools must be 'run' or 'recorded'"):
        replay(store, tools="none")  # type: ignore[arg-type]


async def test_results_that_finish_in_another_order_still_match() -> None:
    """Concurrent calls finish in any order: the recording (Oslo's result first) answers a run
    whose results come in the calls' order."""
    store = MemoryStore()
    tools, _ran = counted_tools()
    first = await Agent(record(two_calls_then_text()), tools=tools, store=store).run("Plan a trip", thread="t1")
    assert [m.content for m in first.messages if isinstance(m, ToolResultMessage)][:2] == ["Oslo: snow", "Paris: sunny"]
    again = await Agent(replay(store, thread="t1"), tools=tools, tools_in_order=True).run("Plan a trip")
    assert [m.content for m in again.messages if isinstance(m, ToolResultMessage)][:2] == ["Paris: sunny", "Oslo: snow"]
    assert again.status == "completed" and again.output == first.output


async def test_a_replay_reports_the_recorded_models_window_so_results_are_cut_the_same(tmp_path: Path) -> None:
    @tool
    def table() -> str:
        """A long table."""
        return "row\n" * 5_000

    def ask_then_answer(messages: list[Any], info: Any) -> Any:
        return tool_call("table") if messages[-1].kind == "user" else "done"

    store = MemoryStore()
    live = Agent(record(FunctionModel(ask_then_answer, context_window=4_000)), tools=[table], store=store)
    first = await live.run("Show the table")
    assert first.status == "completed" and first.messages[2].full_content  # cut to the 4,000-token window
    path = tmp_path / "window.jsonl"
    export_recording(store, path)
    assert json.loads(path.read_text().splitlines()[0])["context_window"] == 4_000
    replayed_model = replay(path)
    assert replayed_model.context_window == 4_000
    again = await Agent(replayed_model, tools=[table], store=MemoryStore()).run("Show the table")
    assert again.status == "completed", again.error  # the same cut, so the same requests match
    assert again.messages[2].content == first.messages[2].content
    # A recording made before the window was kept: the model's known window from its name.
    line = json.loads(path.read_text().splitlines()[0])
    del line["context_window"]
    line["provider"], line["model"] = "openai", "gpt-4o-mini"
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(line) + "\n")
    assert replay(old).context_window == 128_000
