"""Frames and plots read what the user asked for.

Notebooks of one folder share one store (``./.nbagent/threads.db``). An `Agent` given to a frame
function or a plot means *its* threads (run, resumed, forked or shown by it in this process), a
`Store` means every stored thread; `agent.threads()` lists the agent's. Each run read from a store
has the status it ended with (not only the latest run of a thread), and the step axis of a token
plot has whole-number ticks.
"""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from nbagent import Agent
from nbagent.dataframe import plot_cost, plot_tokens, runs_frame, tool_calls_frame, usage_frame
from nbagent.models import ScriptedModel, tool_call
from nbagent.store import SQLiteStore
from tests.test_store_contract import add, refund


@pytest.fixture
def agg():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def _two_notebooks(tmp_path):
    """Two agents, as in two notebooks of one folder: one store file, different threads."""
    path = tmp_path / ".nbagent" / "threads.db"
    weather = Agent(ScriptedModel([tool_call("add", a=1, b=2), "3", "again"]), tools=[add], store=str(path))
    orders = Agent(ScriptedModel(["ok"] * 3), store=str(path))
    weather.run_sync("one", thread="weather-1")
    weather.run_sync("two", thread="weather-1")
    orders.run_sync("x", thread="order-1")
    orders.run_sync("y", thread="order-2")
    return weather, orders


def test_an_agent_lists_and_frames_only_its_own_threads(tmp_path):
    weather, orders = _two_notebooks(tmp_path)
    assert [t.thread for t in weather.threads_sync()] == ["weather-1"]
    assert sorted(t.thread for t in orders.threads_sync()) == ["order-1", "order-2"]
    assert weather.own_threads() == ["weather-1"]
    assert set(usage_frame(weather)["thread"]) == {"weather-1"}
    assert set(usage_frame(orders)["thread"]) == {"order-1", "order-2"}
    assert set(tool_calls_frame(weather)["thread"]) == {"weather-1"}
    assert set(runs_frame(orders)["thread"]) == {"order-1", "order-2"}
    assert len(runs_frame(weather)) == 2
    # the store, or thread=, reach every stored thread
    assert set(usage_frame(weather.store)["thread"]) == {"weather-1", "order-1", "order-2"}
    assert len(asyncio.run(weather.store.threads())) == 3
    assert set(usage_frame(weather, thread="order-2")["thread"]) == {"order-2"}


def test_a_new_agent_on_a_used_store_starts_with_no_threads(tmp_path):
    _two_notebooks(tmp_path)
    fresh = Agent(ScriptedModel(["hi"]), store=str(tmp_path / ".nbagent" / "threads.db"))
    assert fresh.threads_sync() == []
    assert len(usage_frame(fresh)) == 0 and list(usage_frame(fresh).columns) == list(usage_frame([]).columns)
    assert len(runs_frame(fresh)) == 0 and len(tool_calls_frame(fresh)) == 0
    fresh.run_sync("hello", thread="mine")
    assert [t.thread for t in fresh.threads_sync()] == ["mine"]
    assert usage_frame(fresh)["thread"].tolist() == ["mine"]


def test_resumed_forked_and_viewed_threads_are_the_agents(tmp_path):
    path = str(tmp_path / "t.db")
    first = Agent(ScriptedModel([tool_call("refund", order=42), "done"]), tools=[refund], store=path)
    paused = first.run_sync("refund 42", thread="support")
    other = Agent(ScriptedModel(["done"]), tools=[refund], store=path)  # as after a restart
    assert other.threads_sync() == []
    other.resume_sync(thread="support", approve=other.pending_sync("support"))
    assert [t.thread for t in other.threads_sync()] == ["support"]
    third = Agent(ScriptedModel([]), tools=[refund], store=path)
    alt = third.fork_sync("support", at_step=1, new_thread="support-alt")
    assert third.own_threads() == [alt]
    assert paused.status == "paused"


def test_plots_of_an_agent_show_only_its_threads(agg):
    weather, orders = _two_notebooks_in_memory()
    ax = plot_tokens(orders)
    assert sorted(line.get_label() for line in ax.get_lines()) == ["order-1", "order-2"]
    ax = plot_cost(weather, by="model")
    assert len(ax.patches) == 1


def _two_notebooks_in_memory():
    from nbagent.store import MemoryStore

    store = MemoryStore()
    weather = Agent(ScriptedModel(["a", "b"]), store=store)
    orders = Agent(ScriptedModel(["x", "y"]), store=store)
    weather.run_sync("one", thread="w")
    orders.run_sync("x", thread="order-1")
    orders.run_sync("y", thread="order-2")
    weather.run_sync("two", thread="w")
    return weather, orders


# ------------------------------------------------------------------------------------ run status


def test_every_stored_run_has_the_status_it_ended_with(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    agent = Agent(ScriptedModel([tool_call("refund", order=1), "refunded", "second", "third"]),
                  tools=[refund], store=store)
    paused = agent.run_sync("refund 1", thread="t")
    done = agent.resume_sync(paused, approve=paused.pending)
    agent.run_sync("again", thread="t")
    agent.run_sync("and again", thread="t")
    frame = runs_frame(agent)
    assert frame["run_id"].tolist()[:2] == [paused.run_id, done.run_id]
    assert frame["status"].tolist() == ["paused", "completed", "completed", "completed"]
    assert not frame["status"].isna().any()
    assert frame["steps"].tolist() == [1, 1, 1, 1]
    assert frame.equals(runs_frame(SQLiteStore(tmp_path / "t.db")))  # read back by another process


def test_stopped_and_failed_runs_keep_their_reason_and_error_after_later_runs():
    from nbagent.store import MemoryStore

    agent = Agent(ScriptedModel([tool_call("add", a=1, b=1)] * 2 + ["fine"]), tools=[add],
                  store=MemoryStore(), max_steps=2)
    stopped = agent.run_sync("loop", thread="t")
    agent.max_steps = 5
    agent.run_sync("now answer", thread="t")
    frame = runs_frame(agent).set_index("run_id")
    assert frame.loc[stopped.run_id, ["status", "stop_reason"]].tolist() == ["stopped", "max_steps"]
    assert frame["status"].tolist() == ["stopped", "completed"]


def test_a_fork_keeps_the_status_of_the_runs_it_copies():
    from nbagent.store import MemoryStore

    agent = Agent(ScriptedModel(["one", "two", "three"]), store=MemoryStore())
    agent.run_sync("a", thread="t")
    agent.run_sync("b", thread="t")
    alt = agent.fork_sync("t", at_step=1, new_thread="t-alt")
    agent.run_sync("c", thread=alt)
    frame = runs_frame(agent, thread=alt)
    assert frame["status"].tolist() == ["completed", "completed"]


def test_a_forked_run_is_a_row_of_each_thread_that_holds_it():
    from nbagent.store import MemoryStore

    store = MemoryStore()
    agent = Agent(ScriptedModel([tool_call("add", a=1, b=2), "3", "4"]), tools=[add], store=store)
    first = agent.run_sync("add", thread="t")
    alt = agent.fork_sync("t", at_step=1, new_thread="t-alt")
    agent.resume_sync(thread=alt)
    frame = runs_frame(store)
    mine = frame[frame["run_id"] == first.run_id]
    assert mine["thread"].tolist() == ["t", "t-alt"] and mine["steps"].tolist() == [2, 1]  # was one row, 3 steps
    assert mine["status"].tolist() == ["completed", "completed"]
    assert mine["input_tokens"].sum() == first.usage.input_tokens + first.usage.calls[0].input_tokens


def test_the_meta_record_does_not_grow_with_the_runs_of_a_thread(tmp_path):
    """Every append rewrites the thread's meta record (several per step), and a chat thread gets
    one run per message: the record written by the 100th run is no bigger than the 2nd's (how
    earlier runs ended is kept by their checkpoints, written once)."""
    import json
    import sqlite3

    store = SQLiteStore(tmp_path / "t.db")
    agent = Agent(ScriptedModel(["ok"] * 100), store=store)

    def sizes():
        meta = asyncio.run(store.load("t")).meta.to_dict()
        meta.update(thread_step=0, started_at=0.0, ended_at=0.0)  # numbers whose digits may vary
        with sqlite3.connect(store.path) as conn:
            stored = conn.execute("SELECT length(CAST(meta AS BLOB)) FROM threads WHERE id = 't'").fetchone()[0]
        return len(json.dumps(meta)), stored

    for _ in range(2):
        agent.run_sync("hi", thread="t")
    second, second_row = sizes()
    for _ in range(98):
        agent.run_sync("hi", thread="t")
    hundredth, hundredth_row = sizes()
    assert hundredth <= second
    assert hundredth_row <= second_row + 8  # the step count's and the times' digits only
    frame = runs_frame(store)
    assert len(frame) == 100 and set(frame["status"]) == {"completed"} and not frame["status"].isna().any()


# ------------------------------------------------------------------------------------ plots


def test_token_plot_steps_are_whole_numbers(agg):
    agent = Agent(ScriptedModel([tool_call("add", a=1, b=2), tool_call("add", a=3, b=4), "7"]),
                  tools=[add])
    result = agent.run_sync("add")
    ax = plot_tokens(result)
    ax.figure.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    labels = [label.get_text() for label in ax.get_xticklabels() if label.get_text()]
    assert not any("." in label for label in labels), labels
    several = plot_tokens(pd.concat([usage_frame(result), usage_frame(agent.run_sync("again"))]))
    several.figure.canvas.draw()
    assert all(float(t).is_integer() for t in several.get_xticks())


def test_rows_a_batch_skips_are_the_agents_threads_too(tmp_path):
    path = str(tmp_path / "t.db")
    Agent(ScriptedModel(["a", "b"]), store=path).map(["q1", "q2"], progress=False)
    again = Agent(ScriptedModel([]), store=path)  # the same cell after a restart: both rows skipped
    answers = again.map(["q1", "q2"], progress=False)
    assert answers["skipped"].tolist() == [True, True]
    assert sorted(usage_frame(again)["thread"]) == sorted(answers["thread"])
