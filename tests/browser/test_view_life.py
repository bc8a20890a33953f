"""The chat view stays true in a real browser, in JupyterLab 4
and Notebook 7: one notebook, one pass each.

- A resume from code in a later cell updates the view above it: the row shows the result, the
  buttons go, the answer and the footer follow.
- A running tool's time ticks in the browser; Stop during a blocking tool says it is still
  running, and the row changes when the function really ends.
- The footer counts this turn across its resumes and the thread.
- Enter in the Deny reason box denies; a waiting call whose tool is not registered offers no
  Approve and says why.
- After a kernel restart: one notice per view instead of a broken-link icon per widget, and the
  saved notebook holds a readable copy of the conversation.

Screenshots (light and dark theme) go to tests/browser/artifacts.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE, NotebookPage
from .test_restart import TIMEOUT, _restart_kernel

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))

SETUP = '''\
import threading
from nbagent import Agent, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.store.memory import MemoryStore

RELEASE = threading.Event()

@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"

@tool
def book(city: str) -> str:
    """Book a table (a blocking function: its thread cannot be interrupted)."""
    RELEASE.wait(120)
    return f"booked in {city}"

def answer(messages, request):
    last = messages[-1]
    if last.kind == "user":
        if last.content.startswith("refund"):
            return tool_call("refund", order=42)
        if last.content.startswith("book"):
            return tool_call("book", city="Rome")
        return "You said: " + last.content
    return "The tool said: " + last.content

agent = Agent(FunctionModel(answer), tools=[refund, book], store=MemoryStore())
view = agent.chat(thread="life")
view
'''
FROM_CODE = '''\
waiting = await agent.pending("life")
result = await agent.resume(thread="life", approve=waiting, decided_by="ada")
print("resumed from code:", result.status)
'''
RELEASE_CELL = 'RELEASE.set(); print("released")'
MISSING = '''\
paused = await agent.run("refund order 7", thread="gone")
bare = Agent(FunctionModel(answer), store=agent.store)  # refund is not registered here
bare.chat(thread="gone")
'''

# text of cell `i`'s chat views, rows, buttons; computed styles
_CELL = "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].node"
_ROWS = f"(i) => Array.from(({_CELL})(i).querySelectorAll('.nbagent-tool-row')).map(e => e.innerText).join('\\n')"
_VISIBLE_BUTTONS = (f"([i, label]) => Array.from(({_CELL})(i).querySelectorAll('.nbagent-chat button'))"
                    ".filter(b => b.innerText.trim() === label && b.offsetParent !== null && !b.disabled).length")
_TICK = "() => { const t = document.querySelector('.nbagent-chat .nbagent-tick'); return t ? t.textContent : null; }"
_RESTART_STATE = f"""(i) => {{
  const cell = ({_CELL})(i);
  const chat = cell.querySelector('.nbagent-chat');
  const off = Array.from(chat.querySelectorAll('.jupyter-widgets-disconnected'));
  if (chat.classList.contains('jupyter-widgets-disconnected')) off.push(chat);
  const icons = off.filter(e => {{
    const c = getComputedStyle(e, '::before').content; return c && c !== 'none' && c !== 'normal'; }});
  const notices = Array.from(cell.querySelectorAll('.nbagent-restart-notice')).filter(e => e.offsetParent !== null);
  return {{disconnected: off.length, icons: icons.length, notices: notices.map(e => e.innerText)}};
}}"""
_COPY_HIDDEN = f"""(i) => Array.from(({_CELL})(i).querySelectorAll('.jp-OutputArea-child'))
  .filter(c => c.querySelector('.nbagent-transcript')).map(c => getComputedStyle(c).display)"""


def _seconds(tick: str | None) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?) (ms|s)", (tick or "").strip())
    assert m, f"not a time: {tick!r}"
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def _shot(page: NotebookPage, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / name))


def test_the_view_stays_true_to_its_thread(jupyter_app, browser_root, make_notebook, page_factory):
    app = jupyter_app.app
    nb = make_notebook([SETUP, FROM_CODE, RELEASE_CELL, MISSING])
    page = page_factory(jupyter_app, nb, timeout=TIMEOUT)
    page.run_cell(0)
    page.wait_idle(TIMEOUT)
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button", TIMEOUT)

    # a resume from code in a later cell updates the view above it
    page.type_text("refund order 42")
    page.wait_for(lambda: page.eval(_VISIBLE_BUTTONS, [0, "Approve"]) == 1, "the Approve button", TIMEOUT)
    page.run_cell(1)
    page.wait_text("resumed from code: completed", TIMEOUT, cell=1)
    page.wait_text("The tool said: refunded 42", TIMEOUT, cell=0)
    page.wait_for(lambda: "done" in page.eval(_ROWS, 0), "the row marked done", TIMEOUT)
    assert page.eval(_VISIBLE_BUTTONS, [0, "Approve"]) == 0, "Approve still offered for a decided call"
    page.wait_text("last turn: 2 model calls", TIMEOUT, cell=0)  # the prompt's run and the resume

    # a running tool's time ticks; Stop says the truth; the row changes when it ends
    page.type_text("book a table")
    page.wait_for(lambda: page.eval(_TICK) is not None, "a running call's time", TIMEOUT)
    page.wait_text("this turn (running): 1 model call", TIMEOUT, cell=0)
    first = _seconds(page.eval(_TICK))
    page.wait_for(lambda: _seconds(page.eval(_TICK)) >= first + 1.0, "the time ticking", TIMEOUT)
    _shot(page, f"view_life_running_{app}.png")
    page.click("Stop", timeout=TIMEOUT)
    page.wait_text("stop was requested but book cannot be interrupted", TIMEOUT, cell=0)
    assert "\tstill running\t" in page.eval(_ROWS, 0)  # the status cell (it used to say "interrupted")
    assert page.eval(_TICK) is not None, "a still running tool's time stops"
    _shot(page, f"view_life_still_running_{app}.png")
    page.run_cell(2)
    page.wait_for(lambda: "done after stop" in page.eval(_ROWS, 0), "the row of the late outcome", TIMEOUT)
    assert "booked in Rome" in page.eval(_ROWS, 0)
    page.wait_text("book finished after the stop", TIMEOUT, cell=0)
    assert page.eval(_TICK) is None

    # Enter in the Deny reason box denies, with the reason
    page.type_text("refund again")
    page.wait_for(lambda: page.eval(_VISIBLE_BUTTONS, [0, "Deny"]) == 1, "the Deny button", TIMEOUT)
    page.click("Deny", timeout=TIMEOUT)
    reason = page.page.locator(".nbagent-chat input[placeholder='reason for the model (optional)']")
    page.wait_for(lambda: any(reason.nth(i).is_visible() for i in range(reason.count())), "the reason box")
    box = [reason.nth(i) for i in range(reason.count()) if reason.nth(i).is_visible()][-1]
    box.fill("not now")
    box.press("Enter")
    page.wait_text("The tool said: denied by the user: not now", TIMEOUT, cell=0)

    # a waiting call whose tool is not registered offers no Approve, and says why
    page.run_cell(3)
    page.wait_text("not a tool of this agent in this kernel", TIMEOUT, cell=3)
    page.wait_for(lambda: page.eval(_VISIBLE_BUTTONS, [3, "Deny"]) == 1, "Deny of the unregistered tool", TIMEOUT)
    assert page.eval(_VISIBLE_BUTTONS, [3, "Approve"]) == 0
    page.wait_idle(TIMEOUT)

    # the copy saved with the notebook is not shown while the live view is on the page
    assert page.eval(_COPY_HIDDEN, 0) == ["none"]
    _restart_kernel(page)
    state = page.wait_for(lambda: (s := page.eval(_RESTART_STATE, 0))["disconnected"] > 5 and s,
                          "the view marked disconnected", TIMEOUT)
    assert state["icons"] == 0, state
    assert state["notices"] == ["kernel restarted: run this cell again to continue thread 'life'"], state
    assert page.eval(_RESTART_STATE, 3)["notices"] == [
        "kernel restarted: run this cell again to continue thread 'gone'"]
    _shot(page, f"view_life_restarted_{app}.png")
    page.command("apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for(lambda: page.eval("() => document.body.dataset.jpThemeLight") == "false", "the dark theme")
    time.sleep(0.5)
    _shot(page, f"view_life_restarted_dark_{app}.png")
    page.command("apputils:change-theme", {"theme": "JupyterLab Light"})

    # ... and what the saved notebook holds where no widget runs (GitHub, nbviewer)
    page.command("docmanager:save")
    path = Path(browser_root) / nb

    def saved_outputs() -> list[dict] | None:
        try:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        except ValueError:  # caught while the server writes it
            return None
        outputs = cells[0].get("outputs", [])
        return outputs if len(outputs) >= 2 else None

    outputs = page.wait_for(saved_outputs, "the saved notebook", TIMEOUT)
    live, copy = outputs[0]["data"], outputs[1]["data"]
    plain = "".join(live["text/plain"])
    assert plain.startswith("nbagent chat view of thread 'life'") and "ChatView(" not in plain
    html, text = "".join(copy["text/html"]), "".join(copy["text/plain"])
    assert 'class="nbagent-transcript mathjax_ignore"' in html and "<script" not in html
    for said in ("you: refund order 42", "The tool said: refunded 42", "you: book a table",
                 "The tool said: denied by the user: not now"):
        assert said in text, (said, text)
    assert "The tool said: refunded 42" in html
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab" if app == "lab" else "notebook"]) == []
