"""Evals (#28): agent.evaluate with every kind of evaluator, judge usage rows, resume, diff,
compare over three agents, the forecast against the real batch."""

from __future__ import annotations

import math

import matplotlib
import pandas as pd
import pytest

import nbagent
from nbagent import Agent, Retry, evals
from nbagent.exceptions import ServerError
from nbagent.models import FunctionModel, TestModel

matplotlib.use("Agg")


def capitals(messages, info):
    text = messages[-1].content
    return "Paris" if "France" in text else "Berlin, I think" if "Germany" in text else "I do not know"


CASES = pd.DataFrame({
    "input": ["Capital of France?", "Capital of Germany?", "Capital of Italy?"],
    "expected": ["Paris", "Berlin", "Rome"],
})


def short(output, expected, row):
    """A plain function with the issue's signature."""
    return {"score": len(output) < 10, "reason": f"{len(output)} characters"}


def test_every_kind_of_evaluator_scores_its_own_column() -> None:
    agent = Agent(FunctionModel(capitals), store="memory")
    polite = evals.judge("Is the answer polite?", model=FunctionModel(lambda m, i: '{"pass": true, "reason": "ok"}'))

    def first_word(output):  # one argument is enough
        return output.split()[0].strip(",") == "Berlin"

    report = agent.evaluate(CASES, evaluators=[evals.equals(), evals.contains("Paris"), polite, short, first_word],
                            progress=False)
    f = report.frame
    for column in ("input", "output", "expected", "status", "cost", "latency_s", "thread"):
        assert column in f
    assert f["equals"].tolist() == [1.0, 0.0, 0.0]
    assert f["contains"].tolist() == [1.0, 0.0, 0.0]
    assert f["judge"].tolist() == [1.0, 1.0, 1.0]
    assert f["judge_reason"].tolist() == ["ok"] * 3
    assert f["short"].tolist() == [1.0, 0.0, 0.0]
    assert f["short_reason"].tolist() == ["5 characters", "15 characters", "13 characters"]
    assert f["first_word"].tolist() == [0.0, 1.0, 0.0]
    assert "equals_reason" not in f  # reasons only where given
    summary = report.summary()
    assert list(summary.index) == ["equals", "contains", "judge", "short", "first_word"]
    assert list(summary.columns) == ["mean", "pass_rate", "scored", "errors", "not_run"]
    assert summary.loc["equals", "pass_rate"] == pytest.approx(1 / 3)
    assert summary.loc["judge", "mean"] == 1.0
    assert not summary.isna().any().any()  # no NaN cell that reads as a failure (a total row had two)
    totals = report.totals()
    assert (totals["cases"], totals["not_run"]) == (3, 0)
    assert totals["latency_p95_s"] >= totals["latency_p50_s"] > 0
    assert "equals=0.33" in repr(report)


def test_contains_defaults_to_expected_and_equals_skips_rows_without_one() -> None:
    agent = Agent(FunctionModel(capitals), store="memory")
    cases = pd.DataFrame({"input": ["Capital of Germany?", "Capital of France?"], "expected": ["berlin", None]})
    f = agent.evaluate(cases, [evals.contains(), evals.equals()], progress=False).frame
    assert f["contains"].iloc[0] == 1.0  # case-insensitive by default
    assert math.isnan(f["equals"].iloc[1])  # no expected answer: not scored


def test_a_failing_evaluator_gives_an_error_cell_and_the_other_rows_go_on() -> None:
    agent = Agent(FunctionModel(capitals), store="memory")

    def picky(output, expected):
        if "Germany" in expected or output.startswith("Berlin"):
            raise ValueError("cannot judge Germany")
        return True

    report = agent.evaluate(CASES, [picky, evals.equals()], progress=False)
    f = report.frame
    assert f["picky"].iloc[0] == 1.0 and math.isnan(f["picky"].iloc[1]) and f["picky"].iloc[2] == 1.0
    assert f["picky_error"].iloc[1] == "ValueError: cannot judge Germany"
    assert f["picky_error"].isna().tolist() == [True, False, True]
    assert f["equals"].notna().all()
    assert report.summary().loc["picky", "errors"] == 1


def test_numpy_scores_count_and_scores_outside_0_1_are_refused() -> None:
    """Any numpy comparison returns numpy.bool_: it scores like a bool. A score outside [0, 1]
    (5, -1, inf) is refused: an error cell, never a number the summary averages."""
    import numpy as np

    agent = Agent(FunctionModel(capitals), store="memory")

    def np_pass(output, expected):
        return np.int64(len(output)) < 10  # numpy.bool_

    def np_score(output, expected, row):
        return {"score": np.float32(0.5) if "Paris" in output else np.int64(1), "reason": np.str_("numpy")}

    def out_of_range(output, expected):
        return {"Paris": 5, "Berlin, I think": -1}.get(output, float("inf"))

    report = agent.evaluate(CASES, [np_pass, np_score, out_of_range], progress=False)
    f = report.frame
    assert f["np_pass"].tolist() == [1.0, 0.0, 0.0] and f.get("np_pass_error") is None
    assert f["np_score"].tolist() == [0.5, 1.0, 1.0] and f["np_score_reason"].tolist() == ["numpy"] * 3
    assert f["out_of_range"].isna().all()
    assert f["out_of_range_error"].tolist() == [
        f"UserError: an evaluator's score must be in [0, 1] (or a bool, or None: not scored); got {bad}"
        for bad in ("5", "-1", "inf")]
    summary = report.summary()
    assert summary.loc["out_of_range", "errors"] == 3 and math.isnan(summary.loc["out_of_range", "mean"])
    assert summary.loc["np_pass", "pass_rate"] == pytest.approx(1 / 3)


def test_a_judge_call_is_a_usage_row_with_purpose_eval_on_the_case_thread() -> None:
    agent = Agent(FunctionModel(capitals), store="memory")
    judge_model = FunctionModel(lambda m, i: "FAIL: it is rude" if "Berlin" in m[-1].content else "PASS",
                                model_name="judge-model")
    report = agent.evaluate(CASES, [evals.judge("Is it polite?", model=judge_model)], progress=False)
    assert report.frame["judge"].tolist() == [1.0, 0.0, 1.0]
    usage = nbagent.usage_frame(agent)
    judged = usage[usage["purpose"] == "eval"]
    assert len(judged) == 3
    assert set(judged["model"]) == {"judge-model"}
    assert set(judged["thread"]) == set(report.frame["thread"])
    assert set(judged["run_id"]) == set(report.frame["run_id"])
    runs = nbagent.runs_frame(agent)
    assert (runs["steps"] == 1).all()  # a judge call is not one of the run's own steps
    # the judge sees the question, the answer and the expected answer
    assert "Question: Capital of France?" in judge_model.requests[0].messages[-1].content


async def test_a_judge_row_waits_out_another_writer_of_the_case_thread() -> None:
    """Another writer (a run going on in the thread, another judge) appends between the judge's
    load and its append: the judge loads the thread again and its row is still kept."""
    from nbagent.evals._evaluators import Case
    from nbagent.messages import UserMessage
    from nbagent.store import MemoryStore

    class Raced(MemoryStore):
        raced = 0

        async def load(self, thread):
            loaded = await super().load(thread)
            if loaded is not None and self.raced:
                self.raced -= 1
                await self.append(thread, version=loaded.version, step=loaded.step + 1,
                                  messages=[UserMessage("And Italy?")])
            return loaded

    store = Raced()
    result = await Agent(FunctionModel(capitals), store=store).run("Capital of France?")
    case = Case("Capital of France?", result.output, "Paris", {}, result.status, result.thread, result.run_id,
                store)
    store.raced = 1
    score = await evals.judge("Right?", model=FunctionModel(lambda m, i: "PASS")).score(case)
    assert (score.score, score.error) == (1.0, None)
    loaded = await store.load(result.thread)
    assert [r.purpose for r in loaded.usage] == ["run", "eval"]
    assert [m.kind for m in loaded.messages] == ["user", "assistant", "user"]  # the other writer's kept too


def test_priced_judge_cost_counts_in_eval_cost_and_the_total() -> None:
    prices = {"judge-model": {"input": 1_000_000.0, "output": 0.0}, "*": {"input": 0, "output": 0}}
    agent = Agent(FunctionModel(capitals), store="memory", prices=prices)
    judge_model = FunctionModel(lambda m, i: "yes", model_name="judge-model")
    report = agent.evaluate(CASES.head(1), [evals.judge("Right?", model=judge_model)], progress=False)
    cost = report.frame["eval_cost"].iloc[0]
    assert cost > 0
    assert report.frame["status"].iloc[0] == "completed"
    assert report.totals()["cost"] == pytest.approx(cost)  # the run itself is free here


def test_a_judge_that_answers_nonsense_is_an_error_cell() -> None:
    agent = Agent(FunctionModel(capitals), store="memory")
    report = agent.evaluate(CASES.head(2), [evals.judge("?", model=FunctionModel(lambda m, i: "hmm"))],
                            progress=False)
    assert report.frame["judge_error"].str.contains("neither pass nor fail").all()


def test_evaluate_resumes_after_a_restart(tmp_path) -> None:
    path = str(tmp_path / "threads.db")
    calls = []

    def dying(messages, info):
        calls.append(messages[-1].content)
        if len(calls) > 1:
            raise RuntimeError("the kernel died")  # the rows after the first never finish
        return capitals(messages, info)

    first = Agent(FunctionModel(dying), store=path, name="capitals")
    report = first.evaluate(CASES, [evals.equals()], concurrency=1, progress=False)
    assert report.frame["status"].tolist() == ["completed", "failed", "failed"]
    calls.clear()
    again = Agent(FunctionModel(lambda m, i: (calls.append(m[-1].content), capitals(m, i))[1]), store=path,
                  name="capitals")  # a new kernel: the same agent on the same file
    report = again.evaluate(CASES, [evals.equals()], concurrency=1, progress=False)
    assert calls == ["Capital of Germany?", "Capital of Italy?"]  # the finished row was not run again
    assert report.frame["equals"].tolist() == [1.0, 0.0, 0.0]
    assert report.frame["status"].tolist() == ["completed"] * 3


KILLED_MID_EVALUATION = """
import asyncio, sys
sys.path.insert(0, {root!r})
from nbagent import Agent, Retry, evals
from nbagent.exceptions import ServerError
from nbagent.models import FunctionModel
from tests.test_evals import CASES, capitals

async def answer(messages, info):
    if "Italy" in messages[-1].content:
        open({marker!r}, "w").close()   # the third row has started: kill the kernel now
        await asyncio.sleep(120)
    return capitals(messages, info)

Agent(FunctionModel(answer), store={path!r}, name="capitals").evaluate(CASES, [evals.equals()], concurrency=1,
                                                                        progress=False)
"""


def test_evaluate_resumes_after_the_kernel_is_killed_mid_evaluation(tmp_path) -> None:
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    path, marker = str(tmp_path / "threads.db"), tmp_path / "third-row-started"
    root = str(Path(__file__).resolve().parents[1])
    code = KILLED_MID_EVALUATION.format(root=root, marker=str(marker), path=path)
    kernel = subprocess.Popen([sys.executable, "-c", code], cwd=root)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert kernel.poll() is None and time.monotonic() < deadline, "the evaluation ended before row 3"
            time.sleep(0.05)
    finally:
        kernel.send_signal(signal.SIGKILL)  # no cleanup: the run of row 3 is left 'running'
        kernel.wait(timeout=30)
    calls: list[str] = []
    again = Agent(FunctionModel(lambda m, i: (calls.append(m[-1].content), capitals(m, i))[1]), store=path,
                  name="capitals")  # a new kernel: the same agent on the same file
    report = again.evaluate(CASES, [evals.equals()], concurrency=1, progress=False)
    assert calls == ["Capital of Italy?"]  # the two finished rows were not run again
    assert report.frame["status"].tolist() == ["completed"] * 3
    assert report.frame["equals"].tolist() == [1.0, 0.0, 0.0]
    assert report.frame["output"].tolist() == ["Paris", "Berlin, I think", "I do not know"]


def test_diff_says_which_cases_improved_or_regressed() -> None:
    old = Agent(FunctionModel(capitals), store="memory").evaluate(CASES, [evals.equals()], progress=False)
    new = Agent(FunctionModel(lambda m, i: "Rome" if "Italy" in m[-1].content else "Berlin"), store="memory",
                system="v2").evaluate(CASES, [evals.equals()], progress=False)
    d = evals.diff(old, new)
    assert d.index.names == ["case", "evaluator"]
    assert d["change"].tolist() == ["regressed", "improved", "improved"]
    assert d.loc[(0, "equals"), "before"] == 1.0 and d.loc[(0, "equals"), "after"] == 0.0
    with pytest.raises(nbagent.UserError):
        evals.diff(old, old.frame)


def test_evaluator_names_must_be_unique_and_lambdas_need_one() -> None:
    agent = Agent(FunctionModel(capitals), store="memory")
    with pytest.raises(nbagent.UserError, match="share a name"):
        agent.evaluate(CASES, [evals.equals(), evals.equals()], progress=False)
    with pytest.raises(nbagent.UserError, match="lambda"):
        agent.evaluate(CASES, [lambda o: True], progress=False)
    report = agent.evaluate(CASES, [evals.Evaluator("nonempty", lambda case: bool(case.output))], progress=False)
    assert report.frame["nonempty"].tolist() == [1.0] * 3


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_compare_three_agents_in_one_wide_frame() -> None:
    agents = {
        "capitals": Agent(FunctionModel(capitals), store="memory"),
        "paris": Agent(FunctionModel(lambda m, i: "Paris"), store="memory"),
        "tools": Agent(TestModel(text="Rome"), tools=[add], store="memory"),
    }
    frame = nbagent.compare(CASES, agents=agents, evaluators=[evals.equals()], progress=False)
    assert isinstance(frame, evals.ComparisonFrame)
    assert list(frame.columns.get_level_values(0).unique()) == ["capitals", "paris", "tools"]
    assert list(frame["capitals"].columns) == ["output", "status", "error", "tool_calls", "input_tokens",
                                               "output_tokens", "cost", "latency_s", "equals"]
    assert frame[("paris", "output")].tolist() == ["Paris"] * 3
    assert frame[("tools", "tool_calls")].tolist() == [1, 1, 1]
    assert frame[("capitals", "tool_calls")].tolist() == [0, 0, 0]
    assert frame.xs("equals", axis=1, level=1).sum().tolist() == [1.0, 1.0, 1.0]
    html = frame.view()._repr_html_()
    assert "Capital of Germany?" in html and "Berlin, I think" in html and "equals=" in html
    assert "paris: Paris" in repr(frame.view())
    assert frame.plot.latency() is not None
    assert frame.plot.cost_vs_score().get_ylabel() == "mean equals"


def test_compare_models_on_one_agent() -> None:
    agent = Agent(FunctionModel(capitals), store="memory", system="Be brief.")
    frame = nbagent.compare(CASES["input"], agent=agent,
                            models=[FunctionModel(lambda m, i: "a", model_name="m1"), TestModel(text="b")],
                            progress=False)
    assert list(frame.columns.get_level_values(0).unique()) == ["m1", "test"]
    assert frame[("m1", "output")].tolist() == ["a"] * 3
    assert agent.model.model_name == "function"  # the agent itself is unchanged
    with pytest.raises(nbagent.UserError):
        nbagent.compare(CASES, agents={"a": agent}, models=["test"])


def test_the_forecast_matches_the_real_batch_and_its_sample_is_not_run_twice() -> None:
    calls = []
    prices = {"function": {"input": 1.0, "output": 2.0}}

    def answer(messages, info):
        calls.append(1)
        return "x" * 40

    agent = Agent(FunctionModel(answer), store="memory", prices=prices)
    rows = [f"question number {i}" for i in range(20)]
    forecast = agent.estimate(rows, sample=4)
    assert len(calls) == 4 and len(forecast.sample) == 4
    answers = agent.map(rows, progress=False)
    assert len(calls) == 20 and answers["skipped"].sum() == 4
    assert forecast.input_tokens == pytest.approx(answers["input_tokens"].sum(), rel=0.1)
    assert forecast.output_tokens == answers["output_tokens"].sum()
    low, mid, high = forecast.cost
    assert low <= answers["cost"].sum() <= high or mid == pytest.approx(answers["cost"].sum(), rel=0.1)
    assert "Forecast(20 rows from a sample of 4" in repr(forecast)
    assert "<caption>Forecast</caption>" in forecast._repr_html_()
    dry = agent.map(rows, dry_run=True, sample=2)
    assert isinstance(dry, evals.Forecast) and dry.rows == 20


def test_a_second_forecast_of_the_same_rows_times_them_from_the_store(tmp_path) -> None:
    """Its sample was answered by the first (the batch skips those rows, with no duration): the
    time stored with their runs stands in, also in a new kernel on the same file."""
    import asyncio

    async def slow(messages, info):
        await asyncio.sleep(0.05)
        return "x" * 40

    path = str(tmp_path / "threads.db")
    rows = [f"question number {i}" for i in range(20)]
    first = Agent(FunctionModel(slow), store=path, name="slow").estimate(rows, sample=3, concurrency=2)
    again = Agent(FunctionModel(slow), store=path, name="slow").estimate(rows, sample=3, concurrency=2)
    assert again.sample["skipped"].all() and not math.isnan(again.wall_s)
    # each row takes at least its 0.05 s sleep; 20 rows at concurrency 2 are 10 rounds
    assert 0.5 <= again.wall_s < 2.0 and 0.5 <= first.wall_s
    assert "nan" not in repr(again) and "nan" not in again._repr_html_()


@pytest.mark.local_llm
def test_evaluate_compare_and_forecast_on_the_local_model(local_llm_base_url) -> None:
    """End to end on the bundled local model: a judge, a comparison of 3 agents (scripted, test,
    local), and a forecast against the real totals of the same batch."""
    from nbagent.models import ScriptedModel
    from nbagent.models.openai import OpenAIModel

    def local() -> OpenAIModel:
        return OpenAIModel("local-model", base_url=local_llm_base_url, api_key="local", provider="local",
                           settings={"temperature": 0, "max_tokens": 16})

    agent = Agent(local(), store="memory")
    report = agent.evaluate(CASES, [evals.contains(), evals.judge("Does it name a city?", model=local())],
                            concurrency=2, progress=False)
    assert report.frame["status"].tolist() == ["completed"] * 3
    # a 135M model often answers neither pass nor fail: then the row has an error cell, never both
    scored = report.frame["judge"].notna()
    errors = report.frame["judge_error"].notna() if "judge_error" in report.frame else ~scored
    assert (scored ^ errors).all()
    usage = nbagent.usage_frame(agent)
    assert (usage["purpose"] == "eval").sum() == 3  # every judge call is a usage row, read or not
    assert usage["cost_total"].fillna(0).sum() == 0.0  # a local model costs nothing

    frame = nbagent.compare(CASES, agents={
        "scripted": Agent(ScriptedModel(["Paris", "Berlin", "Rome"]), store="memory"),
        "test": Agent(TestModel(text="Rome"), store="memory"),
        "local": Agent(local(), store="memory"),
    }, evaluators=[evals.contains()], concurrency=1, progress=False)
    assert frame[("scripted", "contains")].tolist() == [1.0, 1.0, 1.0]
    assert frame[("local", "status")].tolist() == ["completed"] * 3
    assert (frame[("local", "input_tokens")] > 0).all()

    rows = [f"Name a colour. ({i})" for i in range(12)]
    batch_agent = Agent(local(), store="memory")
    forecast = batch_agent.estimate(rows, sample=4, concurrency=2)
    answers = batch_agent.map(rows, concurrency=2, progress=False)
    assert answers["skipped"].sum() == 4
    assert forecast.input_tokens == pytest.approx(answers["input_tokens"].sum(), rel=0.25)
    assert forecast.output_tokens == pytest.approx(answers["output_tokens"].sum(), rel=0.5)


def test_compare_says_it_reused_the_answers_evaluate_stored_and_keeps_their_latency_and_cost() -> None:
    """Notebook 09: `evaluate`, then `compare` of the same agent's model on the same cases. The
    same thread ids: compare reuses the stored answers. It says so in the view, and keeps their
    stored latency (it was NaN: 'n/a' in the view, nothing for plot.latency) and cost."""
    import asyncio

    async def slow(messages, info):
        await asyncio.sleep(0.05)
        return capitals(messages, info)

    prices = {"function": {"input": 1.0, "output": 2.0}}
    agent = Agent(FunctionModel(slow), store="memory", prices=prices)
    report = agent.evaluate(CASES, [evals.equals()], progress=False)
    other = FunctionModel(lambda m, i: "Paris", model_name="always-paris")
    frame = nbagent.compare(CASES, agent=agent, models=[agent.model, other], evaluators=[evals.equals()],
                            progress=False)
    latency = frame[("function", "latency_s")]
    assert latency.notna().all() and (latency >= 0.05).all(), latency  # the stored runs' time
    html = frame.view()._repr_html_()
    assert " · n/a equals" not in html  # a latency under every answer
    assert html.count("reused 3 stored answers") == 1 and "reused 0" not in html
    assert frame.reused == {"function": 3, "always-paris": 0}
    assert repr(frame.view()).startswith("function: reused 3 stored answers\n")
    assert frame[("function", "cost")].tolist() == report.frame["cost"].tolist()
    assert frame.plot.latency() is not None
    again = agent.evaluate(CASES, [evals.equals()], progress=False)
    assert again.frame["skipped"].all() and (again.frame["latency_s"] >= 0.05).all()


def test_a_reused_answer_does_not_count_the_judge_calls_of_an_earlier_evaluation() -> None:
    """A judge's usage row is appended to the judged case's thread. Evaluating again reused the
    answer with the thread's whole cost and time: the first judge's $40 counted as the run's,
    and its stored latency ran to the end of that judge call."""
    import asyncio

    async def slow_judge(messages, info):
        await asyncio.sleep(0.3)
        return "PASS"

    prices = {"judge-model": {"input": 1_000_000.0, "output": 0.0}, "function": {"input": 1.0, "output": 1.0}}
    agent = Agent(FunctionModel(capitals), store="memory", prices=prices)
    judge = evals.judge("Right?", model=FunctionModel(slow_judge, model_name="judge-model"))
    first = agent.evaluate(CASES.head(2), [judge], progress=False)
    second = agent.evaluate(CASES.head(2), [judge], progress=False)
    assert second.frame["cost"].tolist() == first.frame["cost"].tolist()  # was + the first judge's cost
    assert batch_cost(agent) == pytest.approx(first.frame["cost"].sum())
    runs = nbagent.runs_frame(agent)
    assert (runs["wall_s"] < 0.3).all() and (runs["steps"] == 1).all()  # wall_s ran to the judges' answers
    assert second.frame["skipped"].all()
    assert (second.frame["latency_s"] < 0.3).all()  # the run's time, not until the judge answered
    assert second.totals()["cost"] == pytest.approx(first.totals()["cost"])


def batch_cost(agent: Agent) -> float:
    """The cost `agent.map` reports for the cases' rows (all skipped): the runs' own."""
    return float(agent.map(CASES.head(2)["input"], progress=False)["cost"].sum())


def test_the_forecast_shows_the_rows_still_to_run_beside_the_total() -> None:
    """Notebook 09: '~22 s' for 6 rows, then '00:08' for the 4 the batch still ran. The view
    says both: all the rows, and the ones still to run (the sampled ones are done)."""
    import asyncio

    async def answer(messages, info):
        await asyncio.sleep(0.02)
        return "x" * 40

    agent = Agent(FunctionModel(answer), store="memory", prices={"function": {"input": 1.0, "output": 2.0}})
    rows = [f"question number {i}" for i in range(6)]
    forecast = agent.estimate(rows, sample=2, concurrency=1)
    assert forecast.settled == 2
    left = forecast.remaining
    assert (left.rows, left.settled) == (4, 0)
    assert left.wall_s == pytest.approx(forecast.wall_s * 4 / 6)
    assert left.cost[1] == pytest.approx(forecast.cost[1] * 4 / 6)
    assert left.output_tokens == 4 * forecast.output_tokens // 6
    shown = forecast._repr_html_()
    assert "<th></th><th>all</th><th>still to run</th>" in shown
    assert "<th style='text-align:left'>rows</th><td>6 (sample 2)</td><td>4</td>" in shown
    assert f"<th style='text-align:left'>wall time</th><td>{forecast._wall()}</td><td>{left._wall()}</td>" in shown
    assert "the batch skips the 2 sampled rows that are done" in shown
    assert repr(forecast).endswith(f"; 4 still to run: {nbagent.usage.usd(left.cost[1])}, ~{left.wall_s:.1f}s)")
    assert "still to run" not in repr(left) and "still to run" not in left._repr_html_()
    answers = agent.map(rows, progress=False)
    assert int((~answers["skipped"]).sum()) == left.rows


def test_a_sampled_row_that_failed_is_still_to_run() -> None:
    def flaky(messages, info):
        if messages[-1].content == "q1":
            raise ServerError("503", status_code=503)
        return "ok"

    agent = Agent(FunctionModel(flaky), store="memory", retry=Retry(attempts=1))
    forecast = agent.estimate(["q0", "q1"], sample=2)
    assert forecast.sample["status"].tolist() == ["completed", "failed"]
    assert (forecast.settled, forecast.remaining.rows) == (1, 1)  # the batch continues the failed row
