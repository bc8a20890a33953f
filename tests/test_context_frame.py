"""`nbagent.context_frame` and `plot_context`: each model call's request by part, compaction
summaries included, from a run, an agent and a store, and its stacked bars."""

from __future__ import annotations

import asyncio

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest

import nbagent
from nbagent import Agent, Compaction, UserError
from nbagent.context import PARTS
from nbagent.dataframe import CONTEXT_COLUMNS, plot_context
from nbagent.models.function import FunctionModel
from nbagent.store.sqlite import SQLiteStore
from nbagent.usage import ModelCallUsage
from tests.test_context import calling, rows_tool


def long_session(store, turns: int = 12) -> Agent:
    model = FunctionModel(calling("get_rows", n=20), context_window=1_000)
    agent = Agent(model, tools=[rows_tool()], system="Be brief.", store=store,
                  compaction=Compaction(at=0.6, keep_last=4))
    thread = None
    for turn in range(turns):
        result = agent.run_sync(f"rows for turn {turn}", thread=thread)
        assert result.status == "completed", result.error
        thread = result.thread
    return agent


def test_context_frame_of_a_stored_session_adds_up(tmp_path) -> None:
    agent = long_session(SQLiteStore(tmp_path / "t.db"))
    frame = nbagent.context_frame(agent)
    assert list(frame.columns) == list(CONTEXT_COLUMNS)
    usage = nbagent.usage_frame(agent)
    assert len(frame) == len(usage) and "context" not in usage.columns  # one row per model call
    assert set(frame["purpose"].astype(object)) == {"run", "compaction"}
    assert (frame[list(PARTS)].sum(axis=1) == frame["input_tokens"]).all()  # the parts add up
    runs = frame[frame["purpose"] == "run"]
    assert (runs["window"] == 1_000).all()
    assert runs["fraction"].tolist() == pytest.approx((runs["input_tokens"] / 1_000).tolist())
    assert (runs["tool_results"] > 0).any() and (runs["system"] > 0).all()
    summaries = frame[frame["purpose"] == "compaction"]
    assert (summaries["tools"] == 0).all() and (summaries["history"] > 0).all()  # the transcript
    # After a compaction the history part shrinks: the X-ray shows why the request stays small.
    first = summaries.index[0]
    before, after = frame.loc[first - 1], frame.loc[first + 1]
    assert after["history"] + after["tool_results"] < before["history"] + before["tool_results"]
    # The same rows from a new store object (a kernel restart), and from one run's result.
    again = nbagent.context_frame(SQLiteStore(tmp_path / "t.db"))
    pd.testing.assert_frame_equal(again, frame)


def test_context_frame_of_a_result_and_rows_without_sizes() -> None:
    result = Agent(FunctionModel(calling("get_rows", n=3), context_window=10_000),
                   tools=[rows_tool()], store="memory").run_sync("rows")
    frame = nbagent.context_frame(result)
    assert frame["step"].tolist() == [1, 2]
    assert frame.iloc[-1][list(PARTS)].tolist() == [result.context.by_part[p] for p in PARTS]
    old = ModelCallUsage("r", "t", 1, 0.0, "openai", "gpt-4o-mini", input_tokens=50)  # stored before sizes were
    mixed = nbagent.context_frame([old])
    assert mixed["latest"].isna().all() and mixed["window"].isna().all() and mixed["fraction"].isna().all()
    assert str(mixed["system"].dtype) == "Int64"


def test_plot_context_draws_stacked_parts_and_hatches_summaries() -> None:
    agent = long_session("memory", turns=10)
    frame = nbagent.context_frame(agent)
    ax = plot_context(frame)
    assert len(ax.containers) == len(PARTS)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) == len(frame) and any(label.endswith("summary") for label in labels)
    hatched = [i for i, label in enumerate(labels) if label.endswith("summary")]
    assert all(ax.containers[0][i].get_hatch() == "//" for i in hatched)
    assert ax.get_ylabel() == "input tokens"
    other = agent.run_sync("another thread")
    assert other.status == "completed"
    with pytest.raises(UserError, match="pass thread="):
        plot_context(nbagent.context_frame(agent))
    assert plot_context(agent, thread=other.thread).get_title().endswith(other.thread)


def test_context_frame_thread_filter() -> None:
    agent = long_session("memory", turns=3)
    thread = agent.own_threads()[0]
    second = agent.run_sync("hello")
    frame = nbagent.context_frame(agent, thread=thread)
    assert set(frame["thread"].astype(object)) == {thread}
    assert set(nbagent.context_frame(agent)["thread"].astype(object)) == {thread, second.thread}
    store_rows = asyncio.run(agent.store.load(thread)).usage
    assert len(frame) == len(store_rows)


def test_runs_frame_steps_count_the_runs_own_calls_only() -> None:
    """A compaction summary is a usage row of its run (its cost counts) but not a step."""
    model = FunctionModel(calling("get_rows", n=20), context_window=1_000)
    agent = Agent(model, tools=[rows_tool()], store="memory", compaction=Compaction(at=0.6, keep_last=4))
    results, thread = [], None
    for turn in range(12):
        results.append(agent.run_sync(f"rows for turn {turn}", thread=thread))
        thread = results[-1].thread
    compacted = [r for r in results if any(row.purpose == "compaction" for row in r.usage.calls)]
    assert compacted
    runs = nbagent.runs_frame(agent).set_index("run_id")
    for result in results:
        assert runs.loc[result.run_id, "steps"] == result.steps == 2
        assert runs.loc[result.run_id, "input_tokens"] == result.usage.input_tokens  # the summary's included
