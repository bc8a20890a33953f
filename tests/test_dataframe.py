"""Usage, tool-call and run frames: exact numbers from the fakes, dtypes, export, plots."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest
from genai_prices import Usage as GPUsage
from genai_prices import calc_price

import nbagent
from nbagent import Agent, ToolCall, tool
from nbagent.dataframe import (
    RUN_SCHEMA,
    TOOL_CALL_SCHEMA,
    USAGE_SCHEMA,
    runs_frame,
    tool_calls_frame,
    usage_frame,
    usage_from_columns,
)
from nbagent.messages import AssistantMessage
from nbagent.models import ScriptedModel, tool_call
from nbagent.models.base import ModelResponse
from nbagent.pricing import UnknownPriceWarning, _reset_warnings
from nbagent.store import MemoryStore, SQLiteStore
from nbagent.usage import ModelCallUsage, TokenCounts


@pytest.fixture(autouse=True)
def _fresh_warnings():
    _reset_warnings()
    yield
    _reset_warnings()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def boom(x: int) -> int:
    """Always fails."""
    raise ValueError("no luck")


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order (needs approval)."""
    return f"refunded {order}"


def answer(message: AssistantMessage, *counts: int, model: str = "gpt-4o-mini") -> ModelResponse:
    return ModelResponse(message, TokenCounts(*counts), model=model)


def calls(*items: ToolCall) -> AssistantMessage:
    return AssistantMessage(tool_calls=list(items), finish_reason="tool_calls")


def text(value: str) -> AssistantMessage:
    return AssistantMessage(text=value, finish_reason="stop")


def openai_model(script: list) -> ScriptedModel:
    model = ScriptedModel(script)
    model.provider = "openai"  # priced like an OpenAI model (the fakes are not priced otherwise)
    return model


def gp_cost(
    model: str, input_tokens: int, cache_read: int, output: int, when: float
) -> tuple[float, float, float]:
    calc = calc_price(
        GPUsage(input_tokens=input_tokens, cache_read_tokens=cache_read or None, output_tokens=output),
        model_ref=model,
        provider_id="openai",
        genai_request_timestamp=datetime.fromtimestamp(when, timezone.utc),
    )
    return float(calc.input_price), float(calc.output_price), float(calc.total_price)


def assert_dtypes(df: pd.DataFrame, schema: dict[str, str]) -> None:
    assert list(df.columns) == list(schema)
    for name, kind in schema.items():
        dtype = df[name].dtype
        if kind == "category":
            assert isinstance(dtype, pd.CategoricalDtype), name
        elif kind == "string":
            assert pd.api.types.is_string_dtype(dtype) or dtype.kind == "O", name
        else:
            assert str(dtype) == kind, (name, str(dtype))


# ------------------------------------------------------------------------------------ usage


def test_usage_rows_are_exactly_what_the_model_reported():
    model = openai_model(
        [
            answer(calls(tool_call("add", a=1, b=2, id="c1")), 1200, 1024, 0, 30, 10),
            answer(text("3"), 1300, 1152, 0, 5, 0, model="gpt-4.1-mini"),
        ]
    )
    agent = Agent(model, tools=[add], store=MemoryStore())
    result = agent.run_sync("1+2?")
    df = usage_frame(result)
    assert_dtypes(df, USAGE_SCHEMA)
    assert len(df) == 2
    assert df["step"].tolist() == [1, 2]
    assert df["input_tokens"].tolist() == [1200, 1300]
    assert df["cache_read_tokens"].tolist() == [1024, 1152]
    assert df["output_tokens"].tolist() == [30, 5]
    assert df["reasoning_tokens"].tolist() == [10, 0]
    assert df["tool_calls"].tolist() == [1, 0]
    assert df["finish_reason"].tolist() == ["tool_calls", "stop"]
    assert df["model"].tolist() == ["gpt-4o-mini", "gpt-4.1-mini"]
    assert df["provider"].tolist() == ["openai", "openai"]
    assert set(df["run_id"]) == {result.run_id} and set(df["thread"]) == {result.thread}
    assert (df["latency_s"] >= 0).all()
    assert df["time"].dt.tz is not None and str(df["time"].dt.tz) == "UTC"
    rows = result.usage.calls
    assert df["time"].tolist() == [pd.Timestamp(r.time, unit="s", tz="UTC") for r in rows] or np.allclose(
        df["time"].astype("int64") / 1e9, [r.time for r in rows], atol=1e-6
    )
    # totals add up to the run's Usage
    assert df["input_tokens"].sum() == result.usage.input_tokens == 2500
    assert df["output_tokens"].sum() == result.usage.output_tokens == 35
    assert df["cost_total"].sum() == pytest.approx(result.usage.cost_total)
    # costs are genai-prices' numbers for each model, cached input included
    for i, (m, inp, cached, out) in enumerate(
        [("gpt-4o-mini", 1200, 1024, 30), ("gpt-4.1-mini", 1300, 1152, 5)]
    ):
        ci, co, ct = gp_cost(m, inp, cached, out, rows[i].time)
        assert df["cost_input"][i] == ci and df["cost_output"][i] == co and df["cost_total"][i] == ct
    assert (df["currency"] == "USD").all()


def test_unknown_model_gives_nan_cost_and_one_warning():
    model = openai_model([answer(text("a"), 10, 0, 0, 2, 0, model="nobody-knows-me")] * 3)
    agent = Agent(model, store=MemoryStore())
    with pytest.warns(UnknownPriceWarning) as record:
        results = [agent.run_sync("q") for _ in range(3)]
    assert len([w for w in record if issubclass(w.category, UnknownPriceWarning)]) == 1
    df = usage_frame(results)
    assert len(df) == 3
    assert df[["cost_input", "cost_output", "cost_total"]].isna().all().all()
    assert df["input_tokens"].sum() == 30


def test_custom_prices_reach_the_frame():
    model = openai_model([answer(text("a"), 1_000_000, 0, 0, 1_000_000, 0, model="my-model")])
    agent = Agent(model, store=MemoryStore(), prices={"my-model": {"input": 1.0, "output": 3.0}})
    df = usage_frame(agent.run_sync("q"))
    assert df[["cost_input", "cost_output", "cost_total"]].iloc[0].tolist() == [1.0, 3.0, 4.0]


def test_usage_frame_of_agent_store_and_results_agree():
    store = MemoryStore()
    agent = Agent(
        openai_model([answer(text(f"a{i}"), 100 + i, 0, 0, 10 + i, 0) for i in range(4)]), store=store
    )
    results = [agent.run_sync(f"q{i}") for i in range(4)]
    from_results = usage_frame(results)
    from_agent = usage_frame(agent)
    from_store = usage_frame(store)
    assert len(from_results) == len(from_agent) == len(from_store) == 4
    key = ["thread", "step"]
    a = from_results.sort_values(key).reset_index(drop=True)
    b = from_agent.sort_values(key).reset_index(drop=True)
    assert a["input_tokens"].tolist() == b["input_tokens"].tolist()
    assert a["cost_total"].tolist() == b["cost_total"].tolist()
    one = usage_frame(agent, thread=results[2].thread)
    assert one["input_tokens"].tolist() == [102]
    assert usage_frame(results, thread=[results[0].thread, results[1].thread])["input_tokens"].tolist() == [
        100,
        101,
    ]
    rows = usage_frame([c for r in results for c in r.usage.calls])
    assert rows["output_tokens"].tolist() == [10, 11, 12, 13]


def test_sqlite_store_uses_the_columnar_reader(tmp_path, monkeypatch):
    store = SQLiteStore(tmp_path / "t.db")
    agent = Agent(openai_model([answer(text("x"), 50, 10, 0, 5, 1)] * 3), store=store)
    results = [agent.run_sync("q") for _ in range(3)]
    monkeypatch.setattr(store, "load", None)  # the frame must not load threads one by one
    df = usage_frame(agent)
    assert_dtypes(df, USAGE_SCHEMA)
    assert df["input_tokens"].tolist() == [50, 50, 50]
    assert df["cache_read_tokens"].tolist() == [10] * 3
    assert df["reasoning_tokens"].tolist() == [1] * 3
    assert df["usage_reported"].all()
    assert df["cost_total"].tolist() == [r.usage.cost_total for r in results]
    assert usage_frame(store, thread=results[1].thread)["run_id"].tolist() == [results[1].run_id]


async def test_the_frame_functions_work_on_a_running_loop():
    store = MemoryStore()
    agent = Agent(openai_model([answer(text("x"), 7, 0, 0, 3, 0)]), store=store)
    await agent.run("q")
    df = await asyncio.to_thread(usage_frame, agent)  # the documented form for async code
    assert df["input_tokens"].tolist() == [7]
    # the sync function also works while a loop runs (as in a notebook cell)
    assert usage_frame(agent)["output_tokens"].tolist() == [3]


def test_empty_frames_have_the_schema():
    assert_dtypes(usage_frame([]), USAGE_SCHEMA)
    assert_dtypes(tool_calls_frame([]), TOOL_CALL_SCHEMA)
    assert_dtypes(runs_frame([]), RUN_SCHEMA)
    assert len(usage_frame(MemoryStore())) == 0


def _stored_rows(n: int) -> list[ModelCallUsage]:
    return [
        ModelCallUsage(
            f"run_{i // 4}", f"t{i % 3}", i, 1.7e9 + i / 8, "openai" if i % 9 else "local",
            "gpt-4o-mini" if i % 3 else "gpt-4.1-mini", 100 + i, i % 3, 0, 7 + i, i % 2, 0.5 + i / 100,
            None if i % 5 == 0 else ("stop" if i % 2 else "tool_calls"), i % 3,
            None if i % 7 == 0 else 1e-4 * i, None if i % 7 == 0 else 2e-4, None if i % 7 == 0 else 3e-4,
            "USD", i % 10 != 0,
        )
        for i in range(n)
    ]


def test_usage_frame_from_sqlite_chunks_equals_the_frame_from_rows(tmp_path, monkeypatch):
    """The columnar chunks (shared by threads, filtered per thread) give the very frame the
    rows give: values, NaN for missing costs, dtypes and categories in the same order."""
    import nbagent.store.sqlite._chunks as sqlite_store

    monkeypatch.setattr(sqlite_store, "CHUNK_ROWS", 8)  # many chunks, plus rows not packed yet
    monkeypatch.setattr(sqlite_store, "_SMALL_THREAD", 4)  # threads read from shared chunks
    rows = _stored_rows(75)
    store = SQLiteStore(tmp_path / "t.db")
    versions: dict[str, int] = {}

    async def write():
        for r in rows:
            versions[r.thread] = await store.append(
                r.thread, version=versions.get(r.thread, 0), step=r.step, usage=[r]
            )

    asyncio.run(write())
    assert len((asyncio.run(store.usage_columns())).blocks) > 5
    pairs = [(usage_frame(store), usage_frame(rows))]
    for wanted in ("t1", ["t2", "t0"]):
        names = [wanted] if isinstance(wanted, str) else wanted
        expected = usage_frame([r for n in names for r in rows if r.thread == n])
        pairs.append((usage_frame(store, thread=wanted), expected))
    for got, expected in pairs:
        assert_dtypes(got, USAGE_SCHEMA)
        pd.testing.assert_frame_equal(got, expected)
        for name in ("run_id", "thread", "provider", "model", "finish_reason", "currency"):
            assert got[name].cat.categories.tolist() == expected[name].cat.categories.tolist(), name
    assert pairs[1][0]["thread"].cat.categories.tolist() == ["t1"]
    assert pairs[0][0]["cost_total"].isna().sum() == 11
    asyncio.run(store.close())


def test_usage_from_columns_reads_store_columns_with_a_column_subset():
    store = MemoryStore()
    asyncio.run(store.append("t", version=0, step=1, usage=_stored_rows(3)))
    cols = asyncio.run(store.usage_columns(columns=["model", "input_tokens"]))
    df = usage_from_columns(cols)
    assert_dtypes(df, USAGE_SCHEMA)
    assert df["input_tokens"].tolist() == [100, 101, 102] and df["output_tokens"].tolist() == [0] * 3
    assert df["model"].cat.categories.tolist() == ["gpt-4.1-mini", "gpt-4o-mini"]
    assert df["cost_total"].isna().all() and df["currency"].tolist() == ["USD"] * 3


def test_usage_from_columns_defaults_and_missing_values():
    df = usage_from_columns(
        {
            "run_id": ["r1", "r1"],
            "thread": ["t", "t"],
            "step": [1, 2],
            "time": [1.7e9, 1.7e9 + 1.5],
            "provider": ["openai", "openai"],
            "model": ["m", "m"],
            "input_tokens": [1, 2],
            "cost_total": [0.5, None],
            "finish_reason": ["stop", None],
        }
    )
    assert_dtypes(df, USAGE_SCHEMA)
    assert df["cost_total"].isna().tolist() == [False, True]
    assert df["finish_reason"].isna().tolist() == [False, True]
    assert df["currency"].tolist() == ["USD", "USD"]
    assert df["output_tokens"].tolist() == [0, 0]
    assert (df["time"][1] - df["time"][0]).total_seconds() == 1.5


def test_unreported_usage_is_flagged():
    model = openai_model([answer(text("x"), 0, 0, 0, 0, 0, model="gpt-4o-mini")])
    model.script[0].usage.reported = False
    df = usage_frame(Agent(model, store=MemoryStore()).run_sync("q"))
    assert df["usage_reported"].tolist() == [False]
    assert df["cost_total"].isna().all()


# ------------------------------------------------------------------------------------ tool calls


def test_tool_calls_frame_statuses_sizes_and_decisions():
    store = MemoryStore()
    model = openai_model(
        [
            answer(
                calls(
                    tool_call("add", a=1, b=2, id="c_add"),
                    tool_call("boom", x=1, id="c_boom"),
                    tool_call("refund", order=7, id="c_ok"),
                    tool_call("refund", order=8, id="c_no"),
                    tool_call("refund", order=9, id="c_edit"),
                ),
                10,
                0,
                0,
                5,
                0,
            ),
            answer(text("done"), 20, 0, 0, 2, 0),
        ]
    )
    agent = Agent(model, tools=[add, boom, refund], store=store)
    paused = agent.run_sync("go")
    assert paused.status == "paused"
    first = tool_calls_frame(paused)
    assert_dtypes(first, TOOL_CALL_SCHEMA)
    by = first.set_index("call_id")
    assert by.loc["c_add", "status"] == "done" and by.loc["c_add", "decision"] == "auto"
    assert by.loc["c_boom", "status"] == "failed" and bool(by.loc["c_boom", "is_error"])
    assert by.loc["c_ok", "status"] == "pending" and pd.isna(by.loc["c_ok", "decision"])
    assert pd.isna(by.loc["c_ok", "duration_s"]) and pd.isna(by.loc["c_ok", "result_chars"])
    assert by.loc["c_add", "args_chars"] == len('{"a": 1, "b": 2}')
    assert by.loc["c_add", "result_chars"] == 1  # "3"
    assert by.loc["c_add", "duration_s"] >= 0
    assert by.loc["c_add", "args"] == {"a": 1, "b": 2} and by.loc["c_add", "original_args"] is None
    assert by["time"].notna().all()  # a RunResult too: when each call's state was recorded (was NaT)

    done = agent.resume_sync(
        paused, approve=["c_ok"], deny={"c_no": "too much"}, edit={"c_edit": {"order": 10}}
    )
    assert done.status == "completed"
    resumed = tool_calls_frame(done).set_index("call_id")
    assert sorted(resumed.index) == ["c_edit", "c_no", "c_ok"]  # what this run decided and ran
    assert resumed.loc["c_ok", "decision"] == "approved" and resumed.loc["c_ok", "status"] == "done"
    assert resumed.loc["c_no", "decision"] == "denied" and resumed.loc["c_no", "status"] == "denied"
    assert resumed.loc["c_edit", "decision"] == "edited"
    assert set(resumed["run_id"]) == {done.run_id}
    assert resumed.loc["c_edit", "args"] == {"order": 10}  # what ran, and what the model asked
    assert resumed.loc["c_edit", "original_args"] == {"order": 9}
    assert resumed.loc["c_ok", "original_args"] is None
    assert resumed["time"].notna().all()
    assert (resumed.loc["c_ok", "time"] - resumed.loc["c_ok", "decided_at"]).total_seconds() >= 0

    whole = tool_calls_frame(agent).set_index("call_id")  # the agent knows each tool's policy
    assert len(whole) == 5
    assert whole["decision"].to_dict() == {
        "c_add": "auto",
        "c_boom": "auto",
        "c_ok": "approved",
        "c_no": "denied",
        "c_edit": "edited",
    }
    assert whole["status"].to_dict() == {
        "c_add": "done",
        "c_boom": "failed",
        "c_ok": "done",
        "c_no": "denied",
        "c_edit": "done",
    }
    assert set(whole["run_id"]) == {paused.run_id}  # the run whose model call asked
    assert whole["step"].tolist() == [1] * 5
    assert pd.notna(whole.loc["c_no", "decided_at"])  # denial time is in the ledger
    assert whole["time"].notna().all()
    bare = tool_calls_frame(store).set_index("call_id")  # no agent: the decisions are recorded on the results
    assert bare.loc["c_ok", "decision"] == "approved" and bare.loc["c_no", "decision"] == "denied"
    assert bare.loc["c_edit", "decision"] == "edited"
    assert bare[["decided_at"]].loc[["c_ok", "c_no", "c_edit"]].notna().all().all()
    assert bare[["decided_at"]].loc[["c_add", "c_boom"]].isna().all().all()  # nobody had to decide


def test_tool_calls_of_several_threads_and_filter():
    store = MemoryStore()
    agent = Agent(
        openai_model(
            [answer(calls(tool_call("add", a=1, b=1)), 1, 0, 0, 1, 0), answer(text("2"), 1, 0, 0, 1, 0)] * 2
        ),
        tools=[add],
        store=store,
    )
    r1, r2 = agent.run_sync("a"), agent.run_sync("b")
    both = tool_calls_frame([r1, r2])
    assert both["thread"].tolist() == [r1.thread, r2.thread]
    assert tool_calls_frame(agent, thread=r2.thread)["thread"].tolist() == [r2.thread]


# ------------------------------------------------------------------------------------ runs


def test_runs_frame_from_results_and_from_the_store():
    store = MemoryStore()
    agent = Agent(
        openai_model(
            [
                answer(calls(tool_call("add", a=1, b=1)), 100, 0, 0, 10, 0),
                answer(text("2"), 120, 100, 0, 3, 0),
                answer(text("again"), 50, 0, 0, 5, 0),
            ]
        ),
        tools=[add],
        store=store,
    )
    r1 = agent.run_sync("a")
    r2 = agent.run_sync("b", thread=r1.thread)
    df = runs_frame([r1, r2])
    assert_dtypes(df, RUN_SCHEMA)
    assert df["run_id"].tolist() == [r1.run_id, r2.run_id]
    assert df["status"].tolist() == ["completed", "completed"]
    assert df["steps"].tolist() == [2, 1]
    assert df["input_tokens"].tolist() == [220, 50]
    assert df["cache_read_tokens"].tolist() == [100, 0]
    assert df["total_tokens"].tolist() == [233, 55]
    assert df["tool_calls"].tolist() == [1, 0]
    assert df["cost_total"].tolist() == pytest.approx([r1.usage.cost_total, r2.usage.cost_total])
    assert (df["wall_s"] >= 0).all()
    stored = runs_frame(agent)
    assert stored["run_id"].tolist() == [r1.run_id, r2.run_id]
    assert stored["input_tokens"].tolist() == [220, 50]
    assert stored["status"].tolist() == ["completed", "completed"]  # earlier runs too
    assert stored["cost_total"].tolist() == pytest.approx(df["cost_total"].tolist())


def test_stopped_run_has_its_reason():
    agent = Agent(
        openai_model([answer(calls(tool_call("add", a=1, b=1)), 10, 0, 0, 1, 0)] * 3),
        tools=[add],
        store=MemoryStore(),
        max_steps=2,
    )
    r = agent.run_sync("loop")
    df = runs_frame(r)
    assert df[["status", "stop_reason", "steps"]].iloc[0].tolist() == ["stopped", "max_steps", 2]


# ------------------------------------------------------------------------------------ export


def _sample_agent() -> tuple[Agent, list]:
    agent = Agent(
        openai_model(
            [
                answer(calls(tool_call("add", a=1, b=1)), 100, 50, 0, 10, 0),
                answer(text("2"), 120, 100, 0, 3, 0),
            ]
            * 2
            + [answer(text("x"), 5, 0, 0, 1, 0, model="unpriced-model")]
        ),
        tools=[add],
        store=MemoryStore(),
    )
    with pytest.warns(UnknownPriceWarning):
        results = [agent.run_sync("a"), agent.run_sync("b"), agent.run_sync("c")]
    return agent, results


def test_parquet_round_trip_keeps_dtypes(tmp_path):
    agent, results = _sample_agent()
    for frame in (usage_frame(agent), tool_calls_frame(agent), runs_frame(results)):
        path = tmp_path / "f.parquet"
        frame.to_parquet(path)
        back = pd.read_parquet(path)
        pd.testing.assert_frame_equal(back, frame, check_categorical=False)
        for name, dtype in frame.dtypes.items():
            assert isinstance(back[name].dtype, pd.CategoricalDtype) == isinstance(dtype, pd.CategoricalDtype)
        assert back.shape == frame.shape


def test_csv_export(tmp_path):
    agent, results = _sample_agent()
    df = usage_frame(agent)
    path = tmp_path / "usage.csv"
    df.to_csv(path, index=False)
    back = pd.read_csv(path)
    assert back["input_tokens"].tolist() == df["input_tokens"].tolist()
    assert back["cost_total"].isna().sum() == 1
    tool_calls_frame(agent).to_csv(tmp_path / "tools.csv")
    runs_frame(results).to_csv(tmp_path / "runs.csv")


# ------------------------------------------------------------------------------------ plots


@pytest.fixture
def agg():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def test_plots_return_axes(agg):
    from matplotlib.axes import Axes

    from nbagent.dataframe import cost_by_tool, plot_cost, plot_tokens

    agent, results = _sample_agent()
    usage = usage_frame(agent)
    for by in ("step", "model"):
        ax = plot_cost(usage, by=by)
        assert isinstance(ax, Axes) and ax.get_ylabel() == "cost (USD)"
    assert isinstance(plot_cost(agent, by="tool"), Axes)
    assert isinstance(plot_cost(usage, by="tool", tool_calls=tool_calls_frame(agent)), Axes)
    assert isinstance(plot_tokens(results[0]), Axes)
    ax = plot_tokens(usage)
    assert len(ax.get_lines()) == 3
    per_tool = cost_by_tool(usage, tool_calls_frame(agent))
    assert per_tool.sum() == pytest.approx(usage["cost_total"].sum())
    reading = usage[usage["step"] == 2]["cost_total"].sum()  # the calls that read add's result
    assert per_tool["add"] == pytest.approx(reading)
    with pytest.raises(nbagent.UserError):
        plot_cost(usage, by="tool")
    with pytest.raises(nbagent.UserError):
        plot_cost(usage, by="hour")


def test_plot_tokens_is_cumulative(agg):
    from nbagent.dataframe import plot_tokens

    _, results = _sample_agent()
    ax = plot_tokens(usage_frame(results[0]))
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines["input_tokens"] == [100, 220]
    assert lines["cache_read_tokens"] == [50, 150]
    assert lines["output_tokens"] == [10, 13]


# ------------------------------------------------------------------------------------ edges


def test_lazy_names_on_the_package():
    assert nbagent.usage_frame is usage_frame
    assert nbagent.tool_calls_frame is tool_calls_frame
    assert nbagent.runs_frame is runs_frame
    assert nbagent.output_frame is nbagent.dataframe.output_frame


def test_import_nbagent_does_not_import_pandas():
    code = "import sys, nbagent; print('pandas' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_the_dataframe_tools_import_without_jinja2():
    # readable() needs Jinja2 (pandas' Styler); the rest of nbagent.dataframe does not, and a plain
    # `pip install nbagent pandas` has no Jinja2: importing the package once failed there.
    code = ("import sys; sys.modules['jinja2'] = None\n"
            "import nbagent.dataframe, pandas as pd\n"
            "print(len(nbagent.usage_frame([])), 'pandas.io.formats.style' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 False"


def test_replayed_openai_usage_and_price():
    from nbagent.models.openai import OpenAIModel
    from tests.wire.replay_server import ReplayServer

    with ReplayServer() as srv:
        model = OpenAIModel(
            "gpt-4o-mini", base_url=srv.base_url_for("openai_cached_tokens"), api_key="sk-test"
        )
        result = Agent(model, store=MemoryStore()).run_sync("summarise")
    df = usage_frame(result)
    row = df.iloc[0]
    # the recording: prompt_tokens 1149, cached_tokens 1024, completion_tokens 353
    assert (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (1149, 1024, 353)
    assert row["model"] == "gpt-4o-mini-2024-07-18" and row["provider"] == "openai"
    ci, co, ct = gp_cost("gpt-4o-mini-2024-07-18", 1149, 1024, 353, result.usage.calls[0].time)
    assert (row["cost_input"], row["cost_output"], row["cost_total"]) == (ci, co, ct)
    assert ct == pytest.approx((125 * 0.15 + 1024 * 0.075 + 353 * 0.6) / 1e6)


def test_frames_accept_a_usage_and_reject_junk():
    agent = Agent(openai_model([answer(text("x"), 3, 0, 0, 1, 0)]), store=MemoryStore())
    result = agent.run_sync("q")
    assert usage_frame(result.usage)["input_tokens"].tolist() == [3]
    with pytest.raises(nbagent.UserError, match="expected a RunResult"):
        usage_frame(42)


def test_store_rows_keep_the_cost_they_were_made_with():
    store = MemoryStore()
    row = ModelCallUsage(
        "r", "t", 1, 1.7e9, "openai", "gpt-4o-mini", 1000, 0, 0, 10, 0, 0.1, "stop", 0, 1.0, 2.0, 3.0
    )  # priced in the past at other prices
    asyncio.run(store.append("t", version=0, step=1, usage=[row]))
    df = usage_frame(store)
    assert df[["cost_input", "cost_output", "cost_total"]].iloc[0].tolist() == [1.0, 2.0, 3.0]


def test_times_are_milliseconds_so_a_cell_reads_them() -> None:
    """A float's last digits are no measurement: ``06:15:56.824``, never ``…56.823590400``."""
    from nbagent.dataframe._columns import times

    shown = pd.Series(times([1764742556.8235904, float("nan")])).to_string()
    assert "2025-12-03 06:15:56.824+00:00" in shown and "823590400" not in shown and "NaT" in shown


def test_costs_read_the_same_everywhere() -> None:
    from nbagent.usage import usd

    assert [usd(v) for v in (0, 0.0002, 0.000123456, 0.0123, 0.5, 1.2345, 1234.5, None, float("nan"))] == [
        "$0", "$0.000200", "$0.000123", "$0.0123", "$0.500", "$1.23", "$1,234.50", "n/a", "n/a"]


def test_plot_lines_of_several_threads_stay_apart_and_end_where_their_thread_ends() -> None:
    """Two threads with the same counts are told apart by marker and dash (one line exactly under
    another looked like a missing thread); a thread that ended is not drawn on, flat, to the last
    step of the others; the cost axis reads as dollars."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from nbagent.dataframe import plot_cost, plot_tokens

    rows = [ModelCallUsage("r", t, step, float(step), "p", "m", input_tokens=10, output_tokens=1, cost_total=0.0002)
            for t, steps in (("rome", 3), ("oslo", 3), ("lima", 1)) for step in range(1, steps + 1)]
    frame = nbagent.usage_frame(rows)
    ax = plot_tokens(frame)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert {lines["rome"].get_marker(), lines["oslo"].get_marker()} != {lines["rome"].get_marker()}
    styles = {(line.get_marker(), line.get_linestyle()) for line in lines.values()}
    assert len({dash for _, dash in styles}) == 3 and len({marker for marker, _ in styles}) == 3, styles
    assert list(lines["lima"].get_xdata()[~np.isnan(lines["lima"].get_ydata().astype(float))]) == [1]
    cost_ax = plot_cost(frame)
    cost_ax.figure.canvas.draw()
    assert any(label.get_text().startswith("$") for label in cost_ax.get_yticklabels())


def test_usage_frame_columns_summary_a_list_or_a_clear_error() -> None:
    rows = [ModelCallUsage("r", "t", 1, 1.0, "p", "m", input_tokens=10, output_tokens=1, cost_total=0.0002)]
    summary = nbagent.usage_frame(rows, columns="summary")
    assert summary.columns.tolist() == ["thread", "step", "model", "input_tokens", "output_tokens", "cost_total",
                                        "latency_s", "time"]
    assert nbagent.usage_frame(rows, columns=["cost_total", "step"]).columns.tolist() == ["cost_total", "step"]
    assert len(nbagent.usage_frame(rows).columns) == 26  # every usage column, the tree's, then batch, last
    with pytest.raises(nbagent.UserError, match="no column 'tokens'; the columns are run_id, thread"):
        nbagent.usage_frame(rows, columns=["tokens"])


def test_readable_shows_costs_in_dollars_and_keeps_the_numbers():
    frame = pd.DataFrame({"model": ["a", "b", "c"], "cost_total": [0.0002, 0.0, float("nan")],
                          "recorded_cost": [1234.5, 0.5, 0.0], "latency_s": [0.1234, 2.0, float("nan")],
                          "input_tokens": [10, 20, 30]})
    from nbagent.dataframe import readable

    shown = readable(frame)
    html = shown.to_html()
    for text in ["$0.000200", "$0", "n/a", "$1,234.50", "$0.500", "0.12 s", "2.00 s"]:
        assert f">{text}</td>" in html, (text, html)
    assert ">0.000200</td>" not in html
    assert shown.data is frame and frame["cost_total"].dtype == "float64"
    # its plain text (a saved notebook's text/plain, a console) has the same formats
    plain = repr(shown).splitlines()
    assert plain[1].split() == ["0", "a", "$0.000200", "$1,234.50", "0.12", "s", "10"], plain
    assert "<pandas" not in repr(shown) and "n/a" in plain[3]
    assert frame["cost_total"].sum() == pytest.approx(0.0002)
