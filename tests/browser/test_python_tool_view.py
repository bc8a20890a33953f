"""`nbagent.notebook.python_tool` in a real browser (JupyterLab, headless Chromium): the approval
row shows the model's code as a code block (text, never live HTML) with Approve / Deny / Edit;
Approve runs it in the user's kernel namespace (a later cell sees its variable), Deny with a
reason answers the model and runs nothing, and Edit changes the code that runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))
TIMEOUT = 60

SETUP = '''\
from nbagent import Agent
from nbagent.models import FunctionModel, tool_call
from nbagent.notebook import python_tool
from nbagent.store.memory import MemoryStore

CODE = {
    "first": 'label = "<b>bold</b>"\\nx = 6 * 7\\nprint("x is", x)\\nx',
    "second": 'denied_var = 1\\nprint("denied " + "code ran")',
    "third": 'edited_var = 1',
}

def model(messages, info):  # asks to run CODE[first word], then answers with the tool's result
    last = messages[-1]
    if last.kind == "tool-result":
        return "RESULT: " + last.content + " ENDOFANSWER"
    return tool_call("python", code=CODE[last.content.split()[0]])

agent = Agent(FunctionModel(model), tools=[python_tool(timeout=10)], store=MemoryStore())
view = agent.chat(thread="py")
view
'''

CELLS = [
    SETUP,
    'print("x in the kernel:", x, label)',
    'print("denied_var set:", "denied_var" in globals())',
    'print("edited_var in the kernel:", edited_var)',
]

CODE_BLOCK_JS = """() => Array.from(document.querySelectorAll('.nbagent-chat .nbagent-tool-row pre.nbagent-code'))
  .map(p => p.textContent)"""
LIVE_BOLD_JS = """() => Array.from(document.querySelectorAll('.nbagent-chat b, .nbagent-chat strong'))
  .filter(e => e.textContent === 'bold').length"""


def _rows(page: Any) -> str:
    return str(page.eval("() => Array.from(document.querySelectorAll('.nbagent-chat .nbagent-tool-row'))"
                         ".map(e => e.innerText).join('\\n')"))


def _waits(page: Any, n: int) -> None:
    """Wait until the view shows the ``n``-th call waiting, with its buttons."""
    page.wait_for(lambda: _rows(page).count("needs approval") >= 1 and len(page.eval(CODE_BLOCK_JS)) >= n,
                  f"python call {n} waiting for approval", timeout=TIMEOUT)
    for label in ("Approve", "Deny", "Edit"):
        page.wait_for(lambda label=label: any(
            b.is_visible() for b in page.output_buttons(label).all()), f"the {label} button", timeout=TIMEOUT)


def _visible(page: Any, selector: str) -> Any:
    loc = page.page.locator(selector)
    page.wait_for(lambda: any(loc.nth(i).is_visible() for i in range(loc.count())), selector, timeout=TIMEOUT)
    return [loc.nth(i) for i in range(loc.count()) if loc.nth(i).is_visible()][-1]


def test_python_tool_approve_deny_edit(jupyter_lab, make_notebook, page_factory):
    page = page_factory(jupyter_lab, make_notebook(CELLS))
    page.run_cell(0)
    page.wait_idle(timeout=TIMEOUT)
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")

    # the row waits, showing the code as a code block: the HTML in it is text
    page.type_text("first run some code")
    _waits(page, 1)
    code = page.eval(CODE_BLOCK_JS)[0]
    assert 'label = "<b>bold</b>"' in code and 'print("x is", x)' in code, code
    assert page.eval(LIVE_BOLD_JS) == 0, "the code's <b> became an element"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "python_tool_pending.png"))

    # Approve: the code runs in the user's namespace, its print and value go back to the model
    page.click("Approve")
    answer = page.wait_text("ENDOFANSWER", timeout=TIMEOUT, cell=0)
    assert "x is 42" in answer and "42" in answer.split("x is 42", 1)[1], answer
    page.run_cell(1)
    page.wait_text("x in the kernel: 42 <b>bold</b>", timeout=TIMEOUT, cell=1)

    # Deny with a reason: the model hears the reason and the code never ran
    page.type_text("second run more code")
    _waits(page, 2)
    page.click("Deny")
    _visible(page, ".nbagent-chat input[placeholder='reason for the model (optional)']").fill("not this one")
    page.click("Confirm deny")
    page.wait_text("denied by the user: not this one", timeout=TIMEOUT, cell=0)
    page.run_cell(2)
    page.wait_text("denied_var set: False", timeout=TIMEOUT, cell=2)
    assert "denied code ran" not in page.output_text(0)  # (the code shows "denied " + "code ran")

    # Edit: the arguments' JSON, changed; the edited code is what runs
    page.type_text("third and the last")
    _waits(page, 3)
    page.click("Edit")
    area = _visible(page, ".nbagent-chat textarea")
    assert json.loads(area.input_value()) == {"code": "edited_var = 1"}
    area.fill(json.dumps({"code": 'edited_var = 99\nprint("edited " + "code ran")'}))
    page.click("Approve edited")
    page.wait_text("edited code ran", timeout=TIMEOUT, cell=0)
    page.wait_for(lambda: page.output_text(0).count("ENDOFANSWER") >= 3, "the third answer", timeout=TIMEOUT)
    page.run_cell(3)
    page.wait_text("edited_var in the kernel: 99", timeout=TIMEOUT, cell=3)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
