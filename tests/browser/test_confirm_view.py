"""``agent.map(rows, confirm_over=...)`` in a real browser (JupyterLab, headless Chromium): a
batch whose forecast passes the limit shows the forecast with Run and Cancel buttons; clicking
Run runs the rest of the batch (the sampled rows are not asked twice), clicking Cancel runs
nothing more and the view says so. The pictures go to tests/browser/artifacts."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))

SETUP = '''\
from nbagent import Agent
from nbagent.models import FunctionModel

PRICES = {"function": {"input": 1.0, "output": 2.0}}  # USD per million tokens: the cost is known
ROWS = [f"question number {i}" for i in range(20)]

def counting():
    calls = []
    def answer(messages, info):
        calls.append(messages[-1].content)
        return "ANSWER to " + messages[-1].content
    return Agent(FunctionModel(answer), store="memory", prices=PRICES), calls

agent, calls = counting()
pending = agent.map(ROWS, confirm_over=0.000001, sample=2)
pending
'''

AFTER_RUN = '''\
print(f"RAN calls={len(calls)} status={pending.status} rows={len(pending.frame)} "
      f"skipped={int(pending.frame['skipped'].sum())} completed={int((pending.frame['status'] == 'completed').sum())}")
pending.frame[["input", "output", "status"]].head(3)
'''

CANCEL = '''\
other, other_calls = counting()
held = other.map(ROWS, confirm_over=0.000001, sample=2)
held
'''

AFTER_CANCEL = 'print(f"HELD calls={len(other_calls)} status={held.status} frame={held.frame}")'

_BUTTONS = """(i) => {
  const boxes = Array.from(document.querySelectorAll('.jp-OutputArea .nbagent-confirm'));
  const box = boxes.filter(b => b.querySelector('button'))[i];
  if (!box) return null;
  return Array.from(box.querySelectorAll('button')).map(b => [b.innerText.trim(), b.disabled]);
}"""

_BORDERS = """(i) => {
  const boxes = Array.from(document.querySelectorAll('.jp-OutputArea .nbagent-confirm'));
  return Array.from(boxes.filter(b => b.querySelector('button'))[i].querySelectorAll('button'))
    .map(b => getComputedStyle(b).borderTopColor);
}"""
# the theme's brand colour as a computed border colour
_BRAND = "() => { const s = document.createElement('span'); " \
         "s.style.border = '1px solid var(--jp-brand-color1)'; document.body.appendChild(s); " \
         "const c = getComputedStyle(s).borderTopColor; s.remove(); return c; }"


def _confirm_boxes(page) -> int:
    return int(page.eval("() => document.querySelectorAll('.jp-OutputArea .nbagent-confirm button').length / 2"))


def test_run_and_cancel_buttons_of_a_batch_over_its_limit(jupyter_lab, make_notebook, page_factory):
    page = page_factory(jupyter_lab, make_notebook([SETUP, AFTER_RUN, CANCEL, AFTER_CANCEL]))
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: _confirm_boxes(page) == 1, "the forecast's Run and Cancel buttons", timeout=60)
    shown = page.wait_text("20 rows waiting", cell=0, timeout=30)
    assert "Forecast" in shown and "20 (sample 2)" in shown and "input tokens" in shown, shown
    assert "over confirm_over=$0.000001" in shown and "the 2 sampled rows ran" in shown, shown
    assert page.eval(_BUTTONS, 0) == [["Run", False], ["Cancel", False]]
    run, cancel = page.eval(_BORDERS, 0)
    assert run == page.eval(_BRAND) and cancel != run, (run, cancel)  # Run is tinted as the chat's Send
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    box = page.page.locator(".jp-OutputArea .nbagent-confirm").first
    box.screenshot(path=str(ARTIFACTS / "confirm_view-waiting.png"))

    page.click("Run")
    page.wait_text("done: 20 rows, cost $", cell=0, timeout=60)
    page.wait_for(lambda: page.eval(_BUTTONS, 0) == [["Run", True], ["Cancel", True]], "both buttons disabled")
    page.run_cell(1)
    page.wait_idle()
    ran = page.wait_text("RAN ", cell=1, timeout=60)
    assert "RAN calls=20 status=done rows=20 skipped=2 completed=20" in ran, ran  # the sample was not paid twice
    assert "ANSWER to question number 0" in ran, ran  # the batch's frame, its answers
    box.screenshot(path=str(ARTIFACTS / "confirm_view-done.png"))

    page.run_cell(2)
    page.wait_idle()
    page.wait_for(lambda: _confirm_boxes(page) == 2, "the second batch's buttons", timeout=60)
    page.wait_text("20 rows waiting", cell=2, timeout=30)
    page.click("Cancel")  # the first batch's buttons are disabled: this is the second batch's
    page.wait_text("cancelled: only the 2 sampled rows of 20 ran", cell=2, timeout=30)
    page.wait_for(lambda: page.eval(_BUTTONS, 1) == [["Run", True], ["Cancel", True]], "both buttons disabled")
    page.run_cell(3)
    page.wait_idle()
    held = page.wait_text("HELD ", cell=3, timeout=60)
    assert "HELD calls=2 status=cancelled frame=None" in held, held  # nothing beyond the sample ran
    page.page.locator(".jp-OutputArea .nbagent-confirm").nth(1).screenshot(
        path=str(ARTIFACTS / "confirm_view-cancelled.png"))
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
