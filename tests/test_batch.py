"""Batch runs: input order, failures isolated, re-runs skip finished rows, bounded concurrency."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pandas as pd
import pytest

from nbagent import Agent, Retry, UserError, tool
from nbagent.dataframe import BATCH_COLUMNS, batch, batch_inputs, batch_thread_ids
from nbagent.messages import AssistantMessage
from nbagent.models import FunctionModel, tool_call
from nbagent.models.base import ModelResponse
from nbagent.store import MemoryStore, SQLiteStore
from nbagent.usage import TokenCounts


class Counter:
    """An instant fake: answers ``echo: <prompt>``; counts calls and concurrent requests."""

    def __init__(self, fail_on: set[str] = frozenset(), delay: bool = False) -> None:
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.fail_on = set(fail_on)
        self.delay = delay

    async def __call__(self, messages, request):
        self.calls += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            prompt = next(m.content for m in messages if m.kind == "user")
            if self.delay:
                await asyncio.sleep(random.random() * 0.02)
            if prompt in self.fail_on:
                raise ValueError(f"cannot answer {prompt!r}")
            return ModelResponse(
                AssistantMessage(text=f"echo: {prompt}", finish_reason="stop"),
                TokenCounts(len(prompt), 0, 0, 2, 0),
                model="fake",
            )
        finally:
            self.active -= 1


def make_agent(fn, store=None, **kwargs) -> Agent:
    return Agent(FunctionModel(fn), store=store or MemoryStore(), retry=Retry(attempts=1), **kwargs)


def test_a_part_of_batch_inputs_runs_as_those_rows_of_the_batch():
    """A sample taken with `batch_inputs` keeps its rows' thread ids (positions 4 and 8 of a list
    slice to a RangeIndex range(4, 12, 4), which would have keyed them 0 and 1), so the whole
    batch afterwards runs only the other rows."""
    fake = Counter()
    agent = make_agent(fake)
    rows = [f"q{i}" for i in range(10)]
    labelled = pd.Series(rows, index=[f"r{i}" for i in range(10)])
    for inputs in (rows, labelled):
        part = batch(agent, batch_inputs(inputs).iloc[[4, 8]], progress=False)
        whole = batch(agent, inputs, progress=False)
        assert part["thread"].tolist() == whole["thread"].iloc[[4, 8]].tolist()
        assert whole["skipped"].tolist() == [i in (4, 8) for i in range(10)]
    assert fake.calls == 20
    assert batch_inputs(labelled).index.tolist() == labelled.index.tolist()
    with pytest.raises(UserError, match="not one string"):
        batch_inputs("one question")


def test_batch_only_runs_rows_forecasting_is_agent_maps():
    agent = make_agent(Counter())
    with pytest.raises(TypeError, match="confirm_over"):
        batch(agent, ["a"], confirm_over=1.0)
    assert isinstance(agent.map(["a"], sample=1, progress=False), pd.DataFrame)  # sample alone: a plain batch


def test_results_keep_input_order_and_columns():
    fake = Counter(delay=True)
    agent = make_agent(fake)
    questions = [f"question {i}" for i in range(40)]
    df = batch(agent, questions, concurrency=8, progress=False)
    assert tuple(df.columns) == BATCH_COLUMNS
    assert df["input"].tolist() == questions
    assert df["output"].tolist() == [f"echo: {q}" for q in questions]
    assert set(df["status"]) == {"completed"}
    assert df["error"].isna().all()
    assert df["input_tokens"].tolist() == [len(q) for q in questions]
    assert df["output_tokens"].tolist() == [2] * 40
    assert df["steps"].tolist() == [1] * 40
    assert (df["duration_s"] >= 0).all()
    assert not df["skipped"].any()
    assert df["thread"].is_unique
    assert df["cost"].isna().all()  # the fake model has no price
    assert fake.calls == 40
    assert 1 < fake.max_active <= 8


def test_a_failing_row_has_its_error_and_the_others_complete():
    fake = Counter(fail_on={"b"})
    agent = make_agent(fake)
    df = batch(agent, ["a", "b", "c"], progress=False)
    assert df["status"].tolist() == ["completed", "failed", "completed"]
    assert df["output"][0] == "echo: a" and df["output"][2] == "echo: c"
    assert df["output"].isna().tolist() == [False, True, False]
    assert "cannot answer 'b'" in df["error"][1]
    assert df["error"].isna().tolist() == [True, False, True]


def test_rerun_skips_completed_rows_and_continues_failed_ones():
    fake = Counter(fail_on={"b"})
    agent = make_agent(fake)
    first = batch(agent, ["a", "b", "c"], progress=False)
    assert fake.calls == 3
    fake.fail_on.clear()  # the provider recovered
    second = batch(agent, ["a", "b", "c"], progress=False)
    assert fake.calls == 4  # only "b" ran again
    assert second["skipped"].tolist() == [True, False, True]
    assert second["status"].tolist() == ["completed"] * 3
    assert second["output"].tolist() == ["echo: a", "echo: b", "echo: c"]
    assert second["thread"].tolist() == first["thread"].tolist()
    # skipped rows report what they cost when they ran
    assert second["input_tokens"].tolist() == [1, 1, 1]
    # the continued thread holds one question, not two
    history = agent.store
    loaded = asyncio.run(history.load(second["thread"][1]))
    assert [m.kind for m in loaded.messages] == ["user", "assistant"]
    third = batch(agent, ["a", "b", "c"], progress=False)
    assert fake.calls == 4 and third["skipped"].all()
    # a changed input is a new row; a new prefix runs everything again
    batch(agent, ["a", "B!", "c"], progress=False)
    assert fake.calls == 5
    batch(agent, ["a", "b", "c"], progress=False, thread_prefix="again")
    assert fake.calls == 8


def test_rerun_skips_with_the_default_sqlite_store(tmp_path):
    fake = Counter()
    store = SQLiteStore(tmp_path / "b.db")
    df1 = batch(make_agent(fake, store), ["x", "y"], progress=False)
    # a new agent object with the same configuration (as after a kernel restart) finds them
    df2 = batch(make_agent(fake, SQLiteStore(tmp_path / "b.db")), ["x", "y"], progress=False)
    assert fake.calls == 2
    assert df2["output"].tolist() == df1["output"].tolist() and df2["skipped"].all()


def test_series_index_is_kept_and_agent_map():
    fake = Counter()
    agent = make_agent(fake)
    questions = pd.Series(["p", "q", "r"], index=[10, 20, 30], name="question")
    df = agent.map(questions, concurrency=2, progress=False)
    assert df.index.tolist() == [10, 20, 30]
    assert df["output"].tolist() == ["echo: p", "echo: q", "echo: r"]
    frame = pd.DataFrame({"question": questions})
    joined = frame.join(df[["output"]])
    assert joined.loc[20, "output"] == "echo: q"
    one_col = batch(agent, frame[["question"]], progress=False)
    assert one_col["skipped"].all()


def test_duplicate_inputs_get_their_own_threads_and_missing_inputs_fail():
    fake = Counter()
    agent = make_agent(fake)
    df = batch(agent, ["same", "same", None, float("nan"), 42], progress=False)
    assert df["thread"].is_unique
    assert df["status"].tolist() == ["completed", "completed", "failed", "failed", "completed"]
    assert "missing input" in df["error"][2]
    assert df["output"][4] == "echo: 42"
    assert fake.calls == 3


def test_bad_arguments():
    agent = make_agent(Counter())
    with pytest.raises(UserError, match="one string"):
        batch(agent, "just one", progress=False)
    with pytest.raises(UserError, match="concurrency"):
        batch(agent, ["a"], concurrency=0, progress=False)
    with pytest.raises(UserError, match="one column"):
        batch(agent, pd.DataFrame({"a": ["x"], "b": ["y"]}), progress=False)
    assert len(batch(agent, [], progress=False)) == 0


def test_paused_rows_are_reported_and_not_rerun():
    @tool(requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        return "deleted"

    def fn(messages, request):
        if messages[-1].kind == "user":
            return tool_call("delete", name="x")
        return "ok"

    agent = Agent(FunctionModel(fn), tools=[delete], store=MemoryStore())
    df = batch(agent, ["go"], progress=False)
    assert df["status"].tolist() == ["paused"]
    assert df["error"][0].startswith("waiting for a decision: delete(name='x'); use agent.resume(thread=")
    assert "call_" not in df["error"][0]  # the tool and its arguments, not an internal id
    again = batch(agent, ["go"], progress=False)
    assert again["status"].tolist() == ["paused"] and again["skipped"].all()
    assert again["error"][0] == df["error"][0]
    pending = asyncio.run(agent.store.load(df["thread"][0])).meta.pending
    agent.resume_sync(thread=df["thread"][0], approve=[pending[0].id])
    done = batch(agent, ["go"], progress=False)
    assert done["status"].tolist() == ["completed"] and done["output"].tolist() == ["ok"]


async def test_map_from_async_code_and_progress_bar(capsys):
    fake = Counter()
    agent = make_agent(fake)
    df = agent.map(["a", "b"], concurrency=2, progress=True, desc="questions")  # blocks, even on a loop
    assert df["output"].tolist() == ["echo: a", "echo: b"]
    err = capsys.readouterr().err
    assert "questions" in err and "2/2" in err


def test_thread_ids_are_deterministic_and_depend_on_the_agent():
    a1 = make_agent(Counter(), system="Be brief.")
    a2 = make_agent(Counter(), system="Be verbose.")
    ids1 = batch_thread_ids(a1, ["x", "y"], [0, 1])
    assert ids1 == batch_thread_ids(make_agent(Counter(), system="Be brief."), ["x", "y"], [0, 1])
    assert ids1 != batch_thread_ids(a2, ["x", "y"], [0, 1])
    assert batch_thread_ids(a1, ["x"], [0], "exp1")[0].startswith("exp1-0-")


def test_costs_are_summed_per_row():
    def fn(messages, request):
        return ModelResponse(
            AssistantMessage(text="hi", finish_reason="stop"),
            TokenCounts(1_000_000, 0, 0, 1_000_000, 0),
            model="m",
        )

    agent = make_agent(fn, prices={"m": {"input": 1.0, "output": 2.0}})
    df = batch(agent, ["a", "b"], progress=False)
    assert df["cost"].tolist() == [3.0, 3.0]


@pytest.mark.local_llm
def test_local_model_serves_a_20_row_batch(local_llm_base_url):
    from nbagent.dataframe import usage_frame
    from nbagent.models.openai import OpenAIModel

    model = OpenAIModel(
        "local-model",
        base_url=local_llm_base_url,
        api_key="local",
        provider="local",
        settings={"temperature": 0, "max_tokens": 24},
    )
    agent = Agent(model, store=MemoryStore())
    questions = pd.Series([f"What is {i} plus {i}? Answer with a number." for i in range(20)])
    df = agent.map(questions, concurrency=4, progress=False)
    assert df["input"].tolist() == questions.tolist()
    assert df["status"].tolist() == ["completed"] * 20, df["error"].dropna().tolist()
    assert df["output"].str.len().gt(0).all()
    assert (df["input_tokens"] > 0).all() and (df["output_tokens"] > 0).all()
    assert df["cost"].tolist() == [0.0] * 20  # a local model costs nothing
    usage = usage_frame(agent)
    assert len(usage) == 20
    assert usage["input_tokens"].sum() == df["input_tokens"].sum()
    assert set(usage["provider"]) == {"local"}


def test_tqdm_disable_turns_the_bar_off_even_in_a_notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    """tqdm's TQDM_DISABLE is ignored by tqdm.notebook (what tqdm.auto picks in a kernel): a
    notebook executed to be saved would keep a bar that reads 0% for ever."""
    import tqdm.auto
    import tqdm.notebook

    made: list[Any] = []
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda *a, **k: made.append(k) or tqdm.notebook.tqdm(*a, **k))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    df = batch(make_agent(Counter()), ["a"], progress=True)
    assert df["status"].tolist() == ["completed"] and made == []


def test_the_bar_rate_is_rows_over_elapsed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-run settles its rows at once after a slow first one: the rate must agree with the
    elapsed time (tqdm's moving average kept the first row's rate: '8/8 [00:00<00:00, 1.21row/s]')."""
    import tqdm.std

    from nbagent.dataframe._rows import progress_bar

    now = [100.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    bar = progress_bar(8, True, "rows")
    try:
        now[0] += 0.8
        bar.update(1)
        now[0] += 0.01
        for _ in range(7):
            bar.update(1)
        shown = bar.format_meter(**bar.format_dict)
    finally:
        bar.close()
    assert "8/8 [00:00<00:00" in shown and "9.88row/s" in shown, shown


def test_skipped_rows_leave_the_bar_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-run loads its settled rows at once: they are counted (``skipped=4`` after the bar) but
    not in the rate, which is the rows that ran over the time they took. Counting them said 3
    rows/s for rows that took 1 s each (notebook 09: '457 rows/s' for answers loaded from the store)."""
    import tqdm.auto
    import tqdm.std

    now = [100.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    monkeypatch.delenv("TQDM_DISABLE", raising=False)

    def one_second(messages, request):
        now[0] += 1.0
        return "ok"

    agent = make_agent(one_second)
    batch(agent, ["a", "b", "c", "d"], progress=False)
    bars: list[Any] = []
    made = tqdm.auto.tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda *a, **k: bars.append(made(*a, **k)) or bars[-1])
    df = batch(agent, ["a", "b", "c", "d", "e", "f"], concurrency=1)
    assert df["skipped"].tolist() == [True] * 4 + [False] * 2
    (bar,) = bars
    shown = bar.format_meter(**bar.format_dict)
    assert "6/6 [00:02<00:00" in shown and "1.00row/s" in shown and "skipped=4" in shown, shown
