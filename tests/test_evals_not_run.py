"""A run that did not complete is not a wrong answer (#48): a provider down, a run paused for an
approval, a judge whose own model fails. Such a case is not scored (NaN), no evaluator or judge is
called for it, it is counted under ``not_run``, and it stays out of the mean, the pass rate, the
diff's regressions and the cost-vs-score plot."""

from __future__ import annotations

import math

import matplotlib
import pandas as pd
import pytest

import nbagent
from nbagent import Agent, Retry, evals, tool
from nbagent.exceptions import ServerError
from nbagent.models import FunctionModel, tool_call

matplotlib.use("Agg")

CASES = pd.DataFrame({
    "input": ["Capital of France?", "Capital of Italy?"],
    "expected": ["Paris", "Rome"],
})
DOWN = "503 Service Unavailable\n<html><body>upstream connect error</body></html>"
"""A provider's error page: the view shows its first line."""


def capitals(messages, info):
    return "Paris" if "France" in messages[-1].content else "Rome"


def down(messages, info):
    raise ServerError(DOWN, status_code=503)


def broken_agent(**kwargs) -> Agent:
    """Every request is a 503, and retries are off: every run fails."""
    return Agent(FunctionModel(down), store="memory", retry=Retry(attempts=1), **kwargs)


class Counted:
    """A plain evaluator that counts the cases it was asked about."""

    __name__ = "counted"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, output, expected):
        self.seen.append(output)
        return output == expected


def test_a_failing_model_in_evaluate_is_not_scored() -> None:
    counted = Counted()
    report = broken_agent().evaluate(CASES, [evals.equals(), counted], progress=False)
    f = report.frame
    assert f["status"].tolist() == ["failed", "failed"]
    assert f["error"].str.contains("503 Service Unavailable").all()
    assert f["equals"].isna().all() and f["counted"].isna().all()  # were 0.0: "wrong"
    assert counted.seen == []  # no evaluator is asked about a run that did not answer
    assert "equals_error" not in f  # the evaluator did not fail: the run did
    summary = report.summary()
    assert summary.loc["equals"].to_dict() == pytest.approx(
        {"mean": math.nan, "pass_rate": math.nan, "scored": 0, "errors": 0, "not_run": 2}, nan_ok=True)
    totals = report.totals()
    assert (totals["cases"], totals["not_run"]) == (2, 2)
    assert math.isnan(totals["latency_p50_s"])  # the time to fail is not an answer's latency
    assert repr(report).startswith("EvalReport(2 cases, 2 not run, ") and "equals=n/a" in repr(report)


def test_a_run_that_failed_is_left_out_of_the_mean_and_the_pass_rate() -> None:
    def italy_down(messages, info):
        if "Italy" in messages[-1].content:
            return down(messages, info)
        return capitals(messages, info)

    agent = Agent(FunctionModel(italy_down), store="memory", retry=Retry(attempts=1))
    report = agent.evaluate(CASES, [evals.equals()], progress=False)
    assert report.frame["equals"].tolist()[0] == 1.0 and math.isnan(report.frame["equals"].tolist()[1])
    row = report.summary().loc["equals"]
    assert (row["mean"], row["pass_rate"], row["scored"], row["not_run"]) == (1.0, 1.0, 1, 1)


def test_a_paused_run_in_evaluate_is_not_scored() -> None:
    @tool(requires_approval=True)
    def look_up(city: str) -> str:
        """Look a capital up."""
        return city

    def asks(messages, info):
        if "Italy" in messages[-1].content:
            return tool_call("look_up", city="Italy")  # waits for an approval: the run pauses
        return capitals(messages, info)

    counted = Counted()
    agent = Agent(FunctionModel(asks), tools=[look_up], store="memory")
    report = agent.evaluate(CASES, [evals.contains(), counted], progress=False)
    f = report.frame
    assert f["status"].tolist() == ["completed", "paused"]
    assert f["contains"].tolist()[0] == 1.0 and math.isnan(f["contains"].tolist()[1])
    assert counted.seen == ["Paris"]
    assert report.summary().loc["contains", "not_run"] == 1 and report.summary().loc["contains", "mean"] == 1.0


def test_diff_says_not_run_when_the_provider_went_down() -> None:
    """Before: the model answered; after: it is down. Not a regression: not run."""
    before = Agent(FunctionModel(capitals), store="memory").evaluate(CASES, [evals.equals()], progress=False)
    after = broken_agent().evaluate(CASES, [evals.equals()], progress=False)
    d = evals.diff(before, after)
    assert d["change"].tolist() == ["not run", "not run"]  # were "regressed": 1.0 -> 0.0
    assert list(d["change"].cat.categories) == ["improved", "regressed", "same", "not run"]
    assert d["before"].tolist() == [1.0, 1.0] and d["after"].isna().all()
    assert (d["change"] == "regressed").sum() == 0
    back = evals.diff(after, before)  # down, then answered again: not an improvement either
    assert back["change"].tolist() == ["not run", "not run"]


def test_compare_with_one_provider_down() -> None:
    frame = nbagent.compare(CASES, agents={"good": Agent(FunctionModel(capitals), store="memory"),
                                           "broken": broken_agent()},
                            evaluators=[evals.equals()], progress=False)
    assert frame[("broken", "status")].tolist() == ["failed", "failed"]
    assert frame[("broken", "error")].str.contains("503 Service Unavailable").all()
    assert frame[("good", "error")].isna().all()
    means = frame.xs("equals", axis=1, level="field").mean()
    assert means["good"] == 1.0 and math.isnan(means["broken"])  # was 0.0: "always wrong"
    html = frame.view()._repr_html_()
    assert html.count("ServerError: 503 503 Service Unavailable</small>") == 2  # the error's first line
    assert "upstream connect error" not in html and "&lt;html&gt;" not in html
    assert "equals=n/a" in html
    text = repr(frame.view())
    assert "  broken: (failed) ServerError: 503 503 Service Unavailable\n" in text + "\n"
    ax = frame.plot.cost_vs_score()
    assert len(ax.collections) == 1  # good's point only: broken has no score to plot, not 0
    assert [t.get_text() for t in ax.texts] == ["good", "not scored (no completed run): broken"]


def test_a_judge_whose_model_fails_is_an_error_not_a_fail() -> None:
    judged: list[str] = []

    def judge_down(messages, info):
        judged.append(messages[-1].content)
        return down(messages, info)

    judge = evals.judge("Is it right?", model=FunctionModel(judge_down), retry=Retry(attempts=1))
    report = Agent(FunctionModel(capitals), store="memory").evaluate(CASES, [judge], progress=False)
    assert report.frame["judge"].isna().all()
    assert report.frame["judge_error"].str.startswith("ServerError: 503 503 Service Unavailable").all()
    row = report.summary().loc["judge"]
    assert (row["scored"], row["errors"], row["not_run"]) == (0, 2, 0) and math.isnan(row["mean"])
    # and a judge is never asked about a run that did not complete (it scored those 0 unasked)
    judged.clear()
    report = broken_agent().evaluate(CASES, [evals.judge("Is it right?", model=FunctionModel(judge_down))],
                                     progress=False)
    assert judged == [] and report.frame["judge"].isna().all() and "judge_error" not in report.frame
