"""``agent.map(..., batch_api=True)``: tool-using rows through the providers' batch APIs, against the
loopback batch server (tests/wire/batch_server.py), for OpenAI's Chat Completions and Responses
APIs and Anthropic's Message Batches; a SQLite or PostgreSQL store where durability is the point.

What a user would notice: each step of every row goes through one batch per round and never
through a live call; the tools run once each, here, between rounds; the costs are the batch
prices; errors and expiry are per row; the same map run again (after ``wait=False``, an Interrupt,
a kill -9, in a new process) re-attaches to its batches and submits nothing twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import nbagent
from nbagent import Agent, Decisions, tool
from nbagent.exceptions import UserError
from nbagent.models import FallbackModel, FunctionModel, WrappedModel, record
from nbagent.models.anthropic import AnthropicModel
from nbagent.models.openai import OpenAIModel, OpenAIResponsesModel
from nbagent.pricing import price_row
from nbagent.store import MemoryStore, PostgresStore, SQLiteStore
from tests.wire.batch_server import (
    BatchServer,
    RequestError,
    RequestExpired,
    ServerFault,
    Text,
    ToolCall,
    fetch_stats,
    route,
    script,
)

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-batch-api-test-0123456789"
APIS = ["chat", "responses", "anthropic"]
CITIES = ["Paris", "Lima", "Oslo"]


def model_for(api: str, server: BatchServer | str) -> Any:
    url = server if isinstance(server, str) else server.url
    if api == "anthropic":
        return AnthropicModel("claude-sonnet-4-5", base_url=url, api_key=KEY)
    if api == "responses":
        return OpenAIResponsesModel("gpt-4o-mini", base_url=url + "/v1", api_key=KEY)
    return OpenAIModel("gpt-4o-mini", base_url=url + "/v1", api_key=KEY)


class Weather:
    """A tool that counts its runs (by city)."""

    def __init__(self, approval: Any = False) -> None:
        self.calls: list[str] = []

        @tool(requires_approval=approval)
        def get_weather(city: str) -> str:
            """The weather in a city.

            Args:
                city: the city.
            """
            self.calls.append(city)
            return f"sunny in {city}"

        self.tool = get_weather


def agent_for(api: str, server: BatchServer, store: Any = "memory", **options: Any) -> tuple[Agent, Weather]:
    weather = options.pop("weather", None) or Weather()
    return Agent(model_for(api, server), tools=[weather.tool], store=store, **options), weather


def run_map(agent: Agent, rows: Any, **options: Any) -> Any:
    options.setdefault("poll_s", 0.01)
    options.setdefault("progress", False)
    return agent.map(rows, batch_api=True, **options)


def steps_of(server: BatchServer) -> list[list[int]]:
    """The step of each request, batch by batch (the server counts model turns in the history)."""
    by_batch: dict[str, list[int]] = {}
    for request in server.requests():
        by_batch.setdefault(request.batch_id, []).append(request.step)
    return list(by_batch.values())


# ------------------------------------------------------------------------------------ rounds
@pytest.mark.parametrize("api", APIS)
def test_two_step_rows_go_through_two_rounds_each_tool_once_and_no_live_call(api: str) -> None:
    with BatchServer(polls=1, shuffle=True, blank_lines=True, duplicate_lines=1) as server:
        agent, weather = agent_for(api, server)
        frame = run_map(agent, CITIES)
        assert frame["status"].tolist() == ["completed"] * 3
        assert frame["output"].tolist() == [f"answer to {c}: sunny in {c}" for c in CITIES]
        assert sorted(weather.calls) == sorted(CITIES)  # each tool once, run here between the rounds
        assert steps_of(server) == [[0, 0, 0], [1, 1, 1]]  # one batch per round, every row in it
        assert (server.created, server.resubmitted()) == (2, [])
        # No live call: every usage row is a batch row, and the server saw batch calls only.
        usage = nbagent.usage_frame(agent)
        assert len(usage) == 6 and usage["batch"].all() and frame["steps"].tolist() == [2, 2, 2]
        # A row answered by a finished batch is never asked for again: the same map skips them all.
        again = run_map(agent, CITIES)
        assert again["skipped"].all() and server.created == 2


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_costs_are_the_batch_price_in_the_frame_and_the_usage_frame(api: str) -> None:
    with BatchServer(polls=0) as server:
        agent, _ = agent_for(api, server)
        frame = run_map(agent, CITIES[:2])
    usage = nbagent.usage_frame(agent)
    for call in (await_rows(agent)):
        live = call.__class__(**{**call.to_dict(), "batch": False, "cost_input": None, "cost_output": None,
                                 "cost_total": None})
        price_row(live)
        assert call.batch and call.cost_total == pytest.approx(live.cost_total / 2)
    assert frame["cost"].sum() == pytest.approx(usage["cost_total"].sum())
    assert usage.groupby("thread", observed=True)["cost_total"].sum().tolist() == pytest.approx(
        frame["cost"].tolist())


def await_rows(agent: Agent) -> list[Any]:
    return [row for t in agent.own_threads() for row in agent.thread_usage_sync(t).calls]


# ------------------------------------------------------------------------------------ per-row outcomes
@pytest.mark.parametrize("api", APIS)
def test_errors_and_expiry_are_per_row_and_a_later_map_resubmits_the_expired(api: str) -> None:
    rows = ["Paris", "Lima [fail]", "Oslo [expire]", "Rome [server-error]"]
    with BatchServer(polls=1) as server:
        agent, weather = agent_for(api, server)
        frame = run_map(agent, rows)
        assert frame["status"].tolist() == ["completed", "failed", "expired", "failed"]
        assert "the batch server refuses 'Lima [fail]'" in frame["error"][1]  # the provider's message
        assert frame["error"][1].startswith("BadRequestError: 400")
        assert "expired before request" in frame["error"][2] and "run the map again" in frame["error"][2]
        assert "server had an error" in frame["error"][3]
        assert weather.calls == ["Paris"] and server.created == 2

        def city(request: Any) -> str:
            return str(request.prompt.split()[0])

        server.responder = script(lambda r: ToolCall("get_weather", {"city": city(r)}),
                                  lambda r: Text(f"{city(r)} is fine"))
        again = run_map(agent, rows)
        assert again["status"].tolist() == ["completed", "completed", "completed", "completed"]
        assert again["skipped"].tolist() == [True, False, False, False]
        assert again["output"][2] == "Oslo is fine" and sorted(weather.calls) == ["Lima", "Oslo", "Paris", "Rome"]
        # The expired and failed rows were submitted again; the answered one never was.
        assert set(server.resubmitted()) == {cid for cid in server.submitted if cid.endswith("-1")} - {
            cid for cid, n in server.submitted.items() if n == 1 and cid.endswith("-1")}
        assert [n for cid, n in server.submitted.items()].count(2) == 3


def test_a_whole_batch_the_provider_refuses_fails_its_rows_with_its_words_then_runs_again() -> None:
    with BatchServer(polls=1) as server:
        agent, weather = agent_for("chat", server)
        server.plan_next(outcome="failed")
        frame = run_map(agent, CITIES)
        assert frame["status"].tolist() == ["failed"] * 3
        assert "Enqueued token limit reached" in frame["error"][0] and weather.calls == []
        again = run_map(agent, CITIES)
        assert again["status"].tolist() == ["completed"] * 3 and len(weather.calls) == 3


# ------------------------------------------------------------------------------------ wait=False
@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_wait_false_returns_at_once_and_later_calls_collect(api: str) -> None:
    with BatchServer(polls=None) as server:
        agent, weather = agent_for(api, server, store="memory")
        first = run_map(agent, CITIES, wait=False)
        assert first["status"].tolist() == ["submitted"] * 3 and first["output"].isna().all()
        [batch] = server.stats()["statuses"]
        still = run_map(agent, CITIES, wait=False)
        assert still["status"].tolist() == ["in_progress"] * 3 and server.created == 1

        server.finish(batch)
        second = run_map(agent, CITIES, wait=False)  # round 1 taken, the tools ran, round 2 submitted
        assert second["status"].tolist() == ["submitted"] * 3 and len(weather.calls) == 3
        assert second["cost"].gt(0).all() and second["steps"].tolist() == [1, 1, 1]
        assert server.created == 2

        server.finish(list(server.stats()["statuses"])[1])
        done = run_map(agent, CITIES, wait=False)
        assert done["status"].tolist() == ["completed"] * 3
        assert (server.created, server.resubmitted(), len(weather.calls)) == (2, [], 3)


# ------------------------------------------------------------------------------------ approvals
def test_a_row_that_pauses_waits_and_the_others_go_on_then_decisions_continue_it_in_a_batch() -> None:
    weather = Weather(approval=lambda args: args.city == "Lima")
    with BatchServer(polls=0) as server:
        agent, _ = agent_for("chat", server, weather=weather)
        frame = run_map(agent, CITIES)
        assert frame["status"].tolist() == ["completed", "paused", "completed"]
        assert "waiting for a decision: get_weather(city='Lima')" in frame["error"][1]
        assert steps_of(server) == [[0, 0, 0], [1, 1]] and weather.calls == ["Paris", "Oslo"]

        [pending] = agent.pending_sync(frame["thread"][1])
        again = run_map(agent, CITIES, decisions={1: Decisions().approve(pending)})
        assert again["status"].tolist() == ["completed"] * 3
        assert again["output"][1] == "answer to Lima: sunny in Lima"
        assert again["skipped"].tolist() == [True, False, True]
        assert steps_of(server)[-1] == [1] and weather.calls == ["Paris", "Oslo", "Lima"]
        assert nbagent.usage_frame(agent)["batch"].all() and server.resubmitted() == []


# ------------------------------------------------------------------------------------ refused up front
def test_models_without_a_batch_api_are_refused_before_anything_runs(tmp_path: Path) -> None:
    plain = Agent(FunctionModel(lambda m, r: "hi"), store="memory")
    with pytest.raises(UserError, match=r"has none\. Nothing was submitted"):
        run_map(plain, ["a"])
    with BatchServer() as server:
        chain = Agent(FallbackModel([model_for("chat", server), model_for("anthropic", server)]), store="memory")
        with pytest.raises(UserError, match="a FallbackModel cannot fall back inside a provider's batch"):
            run_map(chain, ["a"])
    # A server that speaks chat completions but not the batch API: named before any row runs.
    from tests.wire.scripted_server import ScriptedServer

    with ScriptedServer() as live:
        store = SQLiteStore(tmp_path / "t.db")
        agent = Agent(OpenAIModel("m", base_url=live.base_url, api_key=KEY), store=store)
        with pytest.raises(UserError, match=r"does not serve the batch API of OpenAIModel \(GET /v1/batches "
                                            r"answered 404\); nothing was submitted"):
            run_map(agent, ["a"])
        assert asyncio.run(store.threads()) == []
    with pytest.raises(UserError, match="wait=, poll_s= and decisions= go with batch_api=True"):
        plain.map(["a"], wait=False)
    with pytest.raises(UserError, match="poll_s is seconds"):
        run_map(plain, ["a"], poll_s=0)


# ------------------------------------------------------------------------------------ durability
def child(api: str, url: str, store: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "batch_api_child.py"), api, url, str(store),
                             str(log), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def wait_for(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def batch_server_process() -> Any:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "wire" / "batch_server.py"), "--polls", "0"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        port = int(proc.stdout.readline().split()[1])  # type: ignore[union-attr]
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_kill_9_while_waiting_then_the_same_map_in_a_new_process_reattaches(
        api: str, batch_server_process: str, tmp_path: Path) -> None:
    url = batch_server_process
    httpx.post(f"{url}/_batch/plan", json={"polls": None}).raise_for_status()  # round 1 runs until told
    store, log = tmp_path / "threads.db", tmp_path / "tools.log"
    proc = child(api, url, store, log)
    try:
        wait_for(lambda: fetch_stats(url)["polls"])  # submitted, stored, and being polled
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    [batch_id] = fetch_stats(url)["statuses"]
    httpx.post(f"{url}/_batch/finish/{batch_id}").raise_for_status()

    again = child(api, url, store, log)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert out.splitlines()[1:] == [f"completed answer to {c}: sunny in {c}" for c in CITIES]
    stats = fetch_stats(url)
    assert stats["batches"] == 2 and stats["resubmitted"] == []  # round 1 re-attached, round 2 new
    assert sorted(log.read_text().split()) == sorted(CITIES)  # each tool once, across the processes


@pytest.mark.slow
def test_an_interrupt_while_waiting_leaves_the_batch_running_and_a_later_map_takes_it(
        batch_server_process: str, tmp_path: Path) -> None:
    url = batch_server_process
    httpx.post(f"{url}/_batch/plan", json={"polls": None}).raise_for_status()
    store, log = tmp_path / "threads.db", tmp_path / "tools.log"
    proc = child("chat", url, store, log)
    wait_for(lambda: fetch_stats(url)["polls"])
    proc.send_signal(signal.SIGINT)  # what the kernel's Interrupt button sends
    out, err = proc.communicate(timeout=30)
    assert "INTERRUPTED" in out, err
    [(batch_id, status)] = fetch_stats(url)["statuses"].items()
    assert status == "in_progress"  # the Interrupt stopped the waiting, not the batch
    stored = asyncio.run(SQLiteStore(store).threads())
    assert {t.status for t in stored if not t.thread.endswith("~batch-api")} == {"cancelled"}
    httpx.post(f"{url}/_batch/finish/{batch_id}").raise_for_status()
    again = child("chat", url, store, log)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["completed"] * 3
    assert fetch_stats(url)["resubmitted"] == [] and fetch_stats(url)["batches"] == 2


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_a_crash_between_creating_a_batch_and_storing_its_id_finds_the_batch_again(
        api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.dataframe import _batch_record

    class Crash(Exception):
        pass

    saves = []
    real = _batch_record.BatchRecord.save

    async def save(self: Any) -> None:
        saves.append(1)
        if len(saves) >= 2:  # from the write after the provider's answer on, the process is "dead"
            raise Crash
        await real(self)

    with BatchServer(polls=2) as server:
        agent, _ = agent_for(api, server, store=SQLiteStore(tmp_path / "t.db"))
        monkeypatch.setattr(_batch_record.BatchRecord, "save", save)
        with pytest.raises(Crash):
            run_map(agent, CITIES)
        monkeypatch.setattr(_batch_record.BatchRecord, "save", real)
        assert server.created == 1
        frame = run_map(agent, CITIES)
        assert frame["status"].tolist() == ["completed"] * 3
        assert (server.created, server.resubmitted()) == (2, [])


def test_cancel_batches_leaves_the_rows_resumable() -> None:
    with BatchServer(polls=None, done_before_stop=1) as server:
        agent, weather = agent_for("chat", server)
        assert run_map(agent, CITIES, wait=False)["status"].tolist() == ["submitted"] * 3
        cancelled = agent.cancel_batches()
        assert cancelled.columns.tolist() == ["batch_id", "status", "requests"]
        assert cancelled["status"].tolist() == ["cancelling"] and cancelled["requests"].tolist() == [3]
        taken = run_map(agent, CITIES, wait=False)
        # The request that ran before the cancel is taken (round 2 submitted); the others were cancelled.
        assert taken["status"].tolist() == ["submitted", "cancelled", "cancelled"]
        assert "was cancelled before request" in taken["error"][1]
        server.plan.polls = 0
        done = run_map(agent, CITIES)
        assert done["status"].tolist() == ["completed"] * 3 and len(weather.calls) == 3


@pytest.mark.postgres
def test_the_rounds_on_a_postgres_store(postgres_url: str, pg_schema: str) -> None:
    with BatchServer(polls=None) as server:
        store = PostgresStore(postgres_url, schema=pg_schema)
        agent, weather = agent_for("responses", server, store=store)
        assert run_map(agent, CITIES, wait=False)["status"].tolist() == ["submitted"] * 3
        # Another kernel (a new agent, a new store object) collects it.
        other, _ = agent_for("responses", server, store=PostgresStore(postgres_url, schema=pg_schema),
                             weather=weather)
        server.plan.polls = 0
        server.finish(next(iter(server.stats()["statuses"])))
        frame = run_map(other, CITIES)
        assert frame["status"].tolist() == ["completed"] * 3 and len(weather.calls) == 3
        assert (server.created, server.resubmitted()) == (2, [])
        assert nbagent.usage_frame(other)["batch"].all()


def test_a_route_of_answers_per_row_and_a_tool_answer_with_two_calls() -> None:
    two = [ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})]
    responder = route({}, default=script(two, Text("both sunny")))
    with BatchServer(responder, polls=0) as server:
        agent, weather = agent_for("anthropic", server)
        frame = run_map(agent, ["two cities"])
        assert frame["output"].tolist() == ["both sunny"] and sorted(weather.calls) == ["Paris", "Rome"]
        assert steps_of(server) == [[0], [1]]


def test_errors_of_other_kinds_from_a_scripted_responder() -> None:
    responder = script(RequestError("prompt is too long: 300000 tokens > 200000 maximum"))
    with BatchServer(responder, polls=0) as server:
        agent, _ = agent_for("anthropic", server)
        frame = run_map(agent, ["x"])
    assert frame["status"][0] == "failed" and "ContextOverflowError" in frame["error"][0]
    with BatchServer(script(ServerFault("overloaded")), polls=0) as server:
        frame = run_map(agent_for("chat", server)[0], ["x"])
    assert "overloaded" in frame["error"][0]
    with BatchServer(script(RequestExpired()), polls=0) as server:
        frame = run_map(agent_for("responses", server)[0], ["x"])
    assert frame["status"][0] == "expired"


# ------------------------------------------------------------------------------------ wrappers, forecast
class Counting(WrappedModel):
    """A user's wrapper: counts the requests, overrides nothing else."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.asked: list[int] = []

    async def request(self, request: Any) -> Any:
        self.asked.append(request.step)
        return await self.inner.request(request)


def test_a_sub_agents_usage_rows_keep_their_place_in_the_tree_inside_a_batch_api_map() -> None:
    """The mapped agent's steps go through the batch; its sub-agent (`Agent.as_tool`, a model of
    its own) runs as a tool between the rounds, its rows stamped with agent, depth and the parent's
    call, and counted in the row's tokens but not its steps."""
    researcher = Agent(FunctionModel(lambda messages, info: "notes"), name="researcher")
    with BatchServer(polls=0) as server:
        boss = Agent(model_for("chat", server), tools=[researcher.as_tool()], store=MemoryStore(), name="boss")
        frame = run_map(boss, CITIES)
        assert frame["status"].tolist() == ["completed"] * 3 and steps_of(server) == [[0, 0, 0], [1, 1, 1]]
        assert frame["output"].tolist() == [f"answer to {c}: notes" for c in CITIES]
    usage = nbagent.usage_frame(boss)
    own, sub = usage[usage["depth"] == 0], usage[usage["depth"] == 1]
    assert len(own) == 6 and own["batch"].all() and set(own["agent"]) == {"boss"}
    assert own["parent_call_id"].isna().all()
    assert len(sub) == 3 and not sub["batch"].any() and set(sub["agent"]) == {"researcher"}
    for thread in frame["thread"]:  # each sub-agent's thread hangs under its row's call
        mine = sub[sub["thread"].astype(str).str.startswith(f"{thread}/")]
        assert len(mine) == 1 and mine["thread"].iloc[0] == f"{thread}/{mine['parent_call_id'].iloc[0]}"
    assert frame["steps"].tolist() == [2, 2, 2]  # the row's own steps; the sub-agent's aside
    tokens = usage.groupby(usage["thread"].astype(str).str.split("/").str[0])["input_tokens"].sum()
    assert frame.set_index("thread")["input_tokens"].to_dict() == tokens.to_dict()


def test_a_users_wrapper_and_record_run_in_front_of_the_batch() -> None:
    with BatchServer(polls=0) as server:
        wrapper = Counting(record(model_for("chat", server)))
        agent, _ = agent_for("chat", server, store=MemoryStore())
        agent.model = wrapper
        frame = run_map(agent, CITIES)
        assert frame["status"].tolist() == ["completed"] * 3 and steps_of(server) == [[0, 0, 0], [1, 1, 1]]
        assert sorted(wrapper.asked) == [1, 1, 1, 2, 2, 2]  # the wrapper's own request ran, then the batch
        recorded = asyncio.run(agent.store.recordings())
        assert len(recorded) == 6 and {r["thread"] for r in recorded} == set(frame["thread"])


def test_estimate_with_batch_api_gives_the_batch_price_and_rounds_beside_the_live_forecast() -> None:
    from tests.wire.scripted_server import ScriptedServer

    @tool
    def lookup(row: str) -> str:
        """Look the row up.

        Args:
            row: the row.
        """
        return f"found {row}"

    with ScriptedServer() as live:
        agent = Agent(OpenAIModel("gpt-4o-mini", base_url=live.base_url, api_key=KEY), tools=[lookup],
                      store="memory")
        forecast = agent.estimate([f"question {i}" for i in range(10)], sample=3, batch_api=True)
    assert forecast.batch_cost is not None and forecast.rounds == 2
    assert forecast.batch_cost == pytest.approx(tuple(c / 2 for c in forecast.cost))
    assert "; batch API: $" in repr(forecast) and "2 rounds of up to 24 h" in repr(forecast)
    assert "cost, batch API" in forecast._repr_html_()
    # The sampled rows are settled: the rows still to run have the same share of the batch price.
    left = forecast.remaining
    assert forecast.settled == 3 and left.rows == 7 and left.rounds == 2
    assert left.batch_cost == pytest.approx(tuple(c * 7 / 10 for c in forecast.batch_cost))
    assert f", batch API {nbagent.usage.usd(left.batch_cost[1])})" in repr(forecast)
    assert forecast._repr_html_().count("cost, batch API") == 1  # one row, a cell per column
    plain = agent.estimate([f"question {i}" for i in range(10)], sample=3)
    assert plain.batch_cost is None and "batch API" not in repr(plain)


def test_anthropic_native_context_goes_in_the_lines_and_live_compaction_is_refused() -> None:
    from nbagent import Compaction

    with BatchServer(polls=0) as server:
        agent, _ = agent_for("anthropic", server, compaction=Compaction.native())
        frame = run_map(agent, ["Paris"])
        assert frame["status"].tolist() == ["completed"]
        assert all("context_management" in r.body for r in server.requests())  # a request parameter
        responses, _ = agent_for("responses", server, compaction=Compaction.native())
        with pytest.raises(UserError, match=r"would call a model live \(Compaction.native\(\) on the Responses"):
            run_map(responses, ["Paris"])
        summarized, _ = agent_for("chat", server, compaction=Compaction(summarizer=model_for("chat", server)))
        with pytest.raises(UserError, match="a summarizer of its own"):
            run_map(summarized, ["Paris"])
