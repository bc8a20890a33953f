"""The ``%%agent`` / ``%agent`` magics in a real browser (JupyterLab, headless Chromium): the chat
view appears in the magic cell's output, ``{df}``, ``{Out[n]}`` and ``{Err}`` reach the model as
text, follow-up cells continue the agent's thread (same thread id in the header) and ``--new``
starts another. The cell returns while the view shows: a run waits until a later cell releases
its model, so the kernel stays free for other cells.

The cells run strictly in order in a fresh kernel, so cell ``k`` has execution count ``k + 1``
(checked against the page's prompt before ``{Out[n]}`` is used)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))
TIMEOUT = 60

SETUP = '''\
import asyncio
import pandas as pd
from nbagent import Agent
from nbagent.models import FunctionModel
from nbagent.store.memory import MemoryStore

release = asyncio.Event()
df = pd.DataFrame({"city": ["Paris", "Lyon", "Oslo"], "amount": [10.5, 3.0, 7.25]})

async def echo(messages, info):  # the last user message, and how many user messages the thread holds
    users = [m for m in messages if m.kind == "user"]
    if users[-1].content.startswith("slowly"):
        await release.wait()  # until another cell says so
    return f"ANSWER[{len(users)}] " + users[-1].content + " END"

bot = Agent(FunctionModel(echo), store=MemoryStore(), name="magic-bot")
%load_ext nbagent
'''

CELLS = [
    SETUP,                                       # 0, In[1]
    "%%agent --agent bot\nLook at {df}",         # 1, In[2]
    "6 * 7",                                     # 2, In[3]
    "%agent --agent bot The value is {Out[3]}",  # 3, In[4]
    "1 / 0",                                     # 4, In[5]
    "%agent --agent bot fix {Err}",              # 5, In[6]
    "%agent --agent bot and it's a follow-up",   # 6, In[7]
    "%agent --agent bot --new fresh start",      # 7, In[8]
    "%agent --agent bot --thread side slowly, please",  # 8, In[9]
    'release.set(); print("kernel free:", 6 * 7)',       # 9, In[10]
]

EXEC_COUNT_JS = "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.executionCount"
HEADER_JS = """(i) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i].node;
  const h = c.querySelector('.nbagent-header'); return h ? h.innerText : null; }"""
THREAD_JS = """(i) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i].node;
  const t = c.querySelector('.nbagent-header .nbagent-thread code'); return t ? t.innerText : null; }"""


def _run(page: Any, index: int) -> None:
    """Run one cell and wait until the kernel is idle again (the magic returns at once)."""
    page.run_cell(index)
    page.wait_idle(timeout=TIMEOUT)
    assert page.eval(EXEC_COUNT_JS, index) == index + 1, "cells run in order in a fresh kernel"


def _answer(page: Any, index: int, start: str) -> str:
    """The answer (``ANSWER[n] <start>... END``) in cell ``index`` once it has arrived: a view on
    a continued thread also shows the thread's earlier messages."""
    pattern = r"ANSWER\[\d+\] " + re.escape(start) + r"[\s\S]*?END"
    return str(page.wait_regex(pattern, timeout=TIMEOUT, cell=index).group(0))


def _view(page: Any, index: int) -> str:
    """Wait for the chat view in cell ``index`` (its Send button and header); its thread id."""
    page.wait_for(lambda: page.eval(HEADER_JS, index), f"the view's header in cell {index}", timeout=TIMEOUT)
    send = page.page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea button").filter(
        has_text=re.compile(r"^\s*Send\s*$"))
    send.first.wait_for(state="visible", timeout=TIMEOUT * 1000)
    return str(page.eval(THREAD_JS, index))


def test_magics_interpolate_and_continue_the_thread(jupyter_lab, make_notebook, page_factory):
    page = page_factory(jupyter_lab, make_notebook(CELLS))
    _run(page, 0)

    # %%agent with {df}: the view in the cell's output, the DataFrame's summary as the prompt
    _run(page, 1)  # the cell returned (kernel idle) while the view shows the run
    thread = _view(page, 1)
    header = page.eval(HEADER_JS, 1)
    assert "magic-bot" in header and thread and thread in header, header
    first = _answer(page, 1, "Look at")
    assert first.startswith("ANSWER[1] Look at"), first
    assert "DataFrame: 3 rows x 2 columns" in first and "head(5):" in first and "Paris" in first, first
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".jp-Notebook .jp-Cell").nth(1).screenshot(path=str(ARTIFACTS / "magic_agent_df.png"))

    # {Out[3]}: the value of cell 3 (6 * 7)
    _run(page, 2)
    page.wait_text("42", timeout=TIMEOUT, cell=2)
    _run(page, 3)
    assert _view(page, 3) == thread
    assert _answer(page, 3, "The value") == "ANSWER[2] The value is 42 END"

    # {Err}: the last exception's traceback
    page.run_cell(4)
    page.wait_idle(timeout=TIMEOUT)
    page.wait_text("ZeroDivisionError", timeout=TIMEOUT, cell=4)
    _run(page, 5)
    assert _view(page, 5) == thread
    fix = _answer(page, 5, "fix")
    assert fix.startswith("ANSWER[3] fix") and "ZeroDivisionError" in fix, fix

    # a follow-up cell continues the thread; --new starts another one
    _run(page, 6)
    assert _view(page, 6) == thread
    assert _answer(page, 6, "and it") == "ANSWER[4] and it's a follow-up END"
    _run(page, 7)
    fresh = _view(page, 7)
    assert fresh and fresh != thread
    assert _answer(page, 7, "fresh") == "ANSWER[1] fresh start END"

    # the cell returns while its run goes on: the model waits until another cell releases it
    _run(page, 8)
    assert _view(page, 8) not in (thread, fresh)
    page.wait_text("slowly, please", timeout=TIMEOUT, cell=8)  # the user's message, in the view
    assert "ANSWER" not in page.output_text(8)
    _run(page, 9)
    page.wait_text("kernel free: 42", timeout=TIMEOUT, cell=9)
    assert _answer(page, 8, "slowly") == "ANSWER[1] slowly, please END"
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []


CUT_CELLS = [
    '''\
from nbagent import Agent
from nbagent.messages import AssistantMessage
from nbagent.models import FunctionModel
from nbagent.store.memory import MemoryStore

def cut_off(messages, info):  # an answer that reached max_tokens: it ends mid-sentence
    return AssistantMessage(text="Totals:\\nEast 27\\nNorth 51\\nSo the best region is", finish_reason="length")

short = Agent(FunctionModel(cut_off), store=MemoryStore(), name="short")
%load_ext nbagent''',
    "%agent --agent short Which region sold the most.",
]
ANSWER_JS = """(i) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i].node;
  const a = c.querySelector('.nbagent-chat .nbagent-stream.nbagent-answer');  // the live view's, not the saved copy's
  // the kernel's Markdown (it ends with a newline), not the streaming preview built in the browser
  return a && a.innerHTML.endsWith('\\n') ? a.innerText : null; }"""
CUT_MARK_JS = """(i) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i].node;
  const m = c.querySelector('.nbagent-footer .nbagent-truncated');
  return m ? [m.innerText, getComputedStyle(m).color] : null; }"""


def test_an_answer_keeps_its_line_breaks_and_the_footer_says_it_was_cut_off(jupyter_lab, make_notebook,
                                                                            page_factory):
    """Notebook 08's two marks that only a browser shows: the answer's single newlines stay line
    breaks once the Markdown is rendered (as in the user's bubble), and an answer cut at
    ``max_tokens`` is marked in the footer, in the error colour."""
    page = page_factory(jupyter_lab, make_notebook(CUT_CELLS))
    _run(page, 0)
    _run(page, 1)
    _view(page, 1)
    mark = page.wait_for(lambda: page.eval(CUT_MARK_JS, 1), "the footer's cut-off mark", timeout=TIMEOUT)
    assert mark[0] == "answer cut off at the output token limit" and mark[1] != "rgb(0, 0, 0)", mark
    answer = page.wait_for(lambda: page.eval(ANSWER_JS, 1), "the rendered answer", timeout=TIMEOUT)
    assert answer.splitlines()[:4] == ["Totals:", "East 27", "North 51", "So the best region is"], answer
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".jp-Notebook .jp-Cell").nth(1).screenshot(path=str(ARTIFACTS / "magic_cut_off.png"))
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
