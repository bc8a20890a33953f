"""Variables as context in a real browser (JupyterLab, headless Chromium): typing ``@`` in the
chat view's message box offers the kernel's variables (the browser's completion list and a line
with types and shapes), ``@df`` shows a chip whose click shows the exact text sent, and Enter
sends the message with the summary the model then receives."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))

SETUP = '''\
import pandas as pd
from nbagent import Agent
from nbagent.models import FunctionModel
from nbagent.store.memory import MemoryStore

sales = pd.DataFrame({"city": ["Paris", "Lyon", "Oslo"], "amount": [10.5, 3.0, 7.25]})
sales_total = 20.75

def echo(messages, info):  # answers with what it received
    return "RECEIVED: " + messages[-1].content

view = Agent(FunctionModel(echo), store=MemoryStore()).chat(thread="attach")
view
'''


def _datalist_values(page) -> list[str]:
    return list(page.eval(
        "() => Array.from(document.querySelectorAll('.nbagent-chat datalist option')).map(o => o.value)"))


def test_at_completes_variables_and_a_chip_shows_the_text_sent(jupyter_lab, make_notebook, page_factory):
    page = page_factory(jupyter_lab, make_notebook([SETUP]))
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")
    box = page.page.locator(".nbagent-chat input[list]").last
    box.click()
    box.press_sequentially("Which city sold most? @sal", delay=30)
    page.wait_for(lambda: "Which city sold most? @sales" in _datalist_values(page), "the completions", timeout=30)
    assert "Which city sold most? @sales_total" in _datalist_values(page)
    page.wait_text("DataFrame 3x2", timeout=30)  # the line of names with their types and shapes
    box.press_sequentially("es ", delay=30)
    page.wait_for(lambda: page.output_buttons("@sales").count() > 0, "the @sales chip", timeout=30)
    page.click("@sales")
    page.wait_text("sent for @sales", timeout=30)
    preview = str(page.eval("() => document.querySelector('.nbagent-chat pre.nbagent-attachment').innerText"))
    assert "DataFrame: 3 rows x 2 columns" in preview and "Paris" in preview and "null counts:" in preview
    target = ARTIFACTS / "chat_view_attachment.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(target))
    box.press("Enter")
    page.wait_text("RECEIVED: Which city sold most? @sales", timeout=60)
    answer = page.output_text(0)
    assert "[attached @sales (DataFrame 3x2)]" in answer and "describe():" in answer
    page.wait_for(lambda: page.output_buttons("@sales").count() == 0, "the chip gone after sending", timeout=30)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
