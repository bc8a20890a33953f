"""``agent.map(rows, confirm_over=...)``: the batch is forecast first; within the limit it runs,
over it the forecast waits with Run and Cancel buttons (ipywidgets, clicked here as a person
would), and only the sampled rows have run until Run is clicked."""

from __future__ import annotations

import pandas as pd
import pytest

import nbagent
from nbagent import Agent, evals
from nbagent.models import FunctionModel

PRICES = {"function": {"input": 1.0, "output": 2.0}}  # USD per million tokens
ROWS = [f"question number {i}" for i in range(20)]


def counting() -> tuple[Agent, list[str]]:
    calls: list[str] = []

    def answer(messages, info):
        calls.append(messages[-1].content)
        return "x" * 40

    return Agent(FunctionModel(answer), store="memory", prices=PRICES), calls


def test_a_batch_within_the_limit_runs_at_once_and_skips_its_sample() -> None:
    agent, calls = counting()
    answers = agent.map(ROWS, confirm_over=1.00, sample=4, progress=False)
    assert isinstance(answers, pd.DataFrame) and len(answers) == 20
    assert len(calls) == 20 and answers["skipped"].sum() == 4  # the sample was not paid twice
    assert (answers["status"] == "completed").all()


def test_over_the_limit_only_the_sample_runs_until_run() -> None:
    agent, calls = counting()
    pending = agent.map(ROWS, confirm_over=0.0, sample=4, progress=False)
    assert isinstance(pending, evals.BatchConfirmation)
    assert len(calls) == 4 and pending.status == "waiting" and pending.frame is None
    assert pending.forecast.rows == 20 and len(pending.forecast.sample) == 4
    text = repr(pending)
    assert text.startswith("BatchConfirmation(20 rows waiting: it may cost up to $") and "over confirm_over=$0" in text
    assert "<caption>Forecast</caption>" in pending._repr_html_()
    answers = pending.run()
    assert len(calls) == 20 and answers["skipped"].sum() == 4 and pending.status == "done"
    assert pending.run() is answers and len(calls) == 20  # a second run() runs nothing
    assert repr(pending).startswith("BatchConfirmation(done: 20 rows, cost $")


def test_the_run_button_runs_the_batch_and_the_cancel_button_does_not() -> None:
    agent, calls = counting()
    pending = agent.map(ROWS, confirm_over=0.0, sample=2, progress=False)
    box = pending.widget()
    assert pending.widget() is box  # one view per batch
    buttons = {b.description: b for b in box.children[1].children}
    assert set(buttons) == {"Run", "Cancel"} and not any(b.disabled for b in buttons.values())
    assert "20 rows waiting" in box.children[2].value
    buttons["Run"].click()
    assert len(calls) == 20 and pending.status == "done" and len(pending.frame) == 20  # type: ignore[arg-type]
    assert all(b.disabled for b in buttons.values())
    assert "done: 20 rows" in box.children[2].value

    other, other_calls = counting()
    cancelled = other.map(ROWS, confirm_over=0.0, sample=2, progress=False)
    buttons = {b.description: b for b in cancelled.widget().children[1].children}
    buttons["Cancel"].click()
    assert len(other_calls) == 2 and cancelled.status == "cancelled" and cancelled.frame is None
    assert all(b.disabled for b in buttons.values())
    assert "cancelled: only the 2 sampled rows of 20 ran" in cancelled.widget().children[2].value
    with pytest.raises(nbagent.UserError, match="cancelled"):
        cancelled.run()
    later = other.map(ROWS, progress=False)  # running the rows later skips the sample
    assert later["skipped"].sum() == 2 and len(other_calls) == 20


def test_an_unknown_cost_asks_and_a_failed_click_says_why() -> None:
    calls: list[int] = []

    def answer(messages, info):
        calls.append(1)
        if len(calls) > 2:
            raise RuntimeError("boom")  # a row failing is a failed row, not a failed click
        return "ok"

    agent = Agent(FunctionModel(answer), store="memory")  # no price: the cost is unknown
    pending = agent.map(ROWS[:5], confirm_over=100.0, sample=2, progress=False)
    assert isinstance(pending, evals.BatchConfirmation)
    assert "its cost is unknown (the model has no price)" in repr(pending)
    pending.run()
    assert pending.frame is not None and pending.frame["status"].tolist().count("failed") == 3

    def broken():
        raise RuntimeError("the store is gone")

    stuck = evals.BatchConfirmation(pending.forecast, 1.0, broken)
    box = stuck.widget()
    box.children[1].children[0].click()
    assert stuck.status == "failed" and "RuntimeError: the store is gone" in box.children[2].value


def test_model_text_in_the_forecast_is_never_live_html() -> None:
    agent, _ = counting()
    pending = agent.map(["<img src=x onerror=alert(1)>"] * 3, confirm_over=0.0, sample=1, progress=False)
    assert "<img" not in pending._repr_html_() and "<img" not in pending.widget().children[2].value
    bundle = pending._repr_mimebundle_()
    assert bundle["text/plain"] == repr(pending) and "application/vnd.jupyter.widget-view+json" in bundle


def test_confirm_over_takes_a_cost_and_not_with_dry_run() -> None:
    agent, calls = counting()
    with pytest.raises(nbagent.UserError, match="confirm_over is a cost"):
        agent.map(ROWS, confirm_over="a lot", progress=False)
    with pytest.raises(nbagent.UserError, match="dry_run"):
        agent.map(ROWS, confirm_over=1.0, dry_run=True, progress=False)
    assert calls == []


def test_the_run_button_is_tinted_as_the_chat_views_primary_buttons() -> None:
    from pathlib import Path

    from nbagent.widgets.frame import ViewFrame

    agent, _ = counting()
    box = agent.map(ROWS, confirm_over=0.0, sample=1, progress=False).widget()
    run = box.children[1].children[0]
    assert "nbagent-button-primary" in run._dom_classes and "nbagent-confirm" in box._dom_classes
    assert any(isinstance(w, ViewFrame) for w in box.children)  # the stylesheet comes with the box
    css = (Path(nbagent.__file__).parent / "widgets" / "view.css").read_text()
    assert ":is(.nbagent-chat, .nbagent-confirm) .jupyter-button.nbagent-button-primary {" in css


def test_evals_confirm_and_map_with_forecast_are_what_agent_map_hands_its_options_to() -> None:
    agent, calls = counting()
    forecast = evals.map_with_forecast(agent, ROWS, dry_run=True, sample=3, progress=False)
    assert isinstance(forecast, evals.Forecast) and forecast.rows == 20 and len(calls) == 3
    pending = evals.confirm(agent, ROWS, 0.0, sample=3, progress=False)
    assert isinstance(pending, evals.BatchConfirmation) and len(calls) == 3  # the same 3 rows: skipped
    assert isinstance(evals.map_with_forecast(agent, ROWS, progress=False), pd.DataFrame)
    assert len(calls) == 20
