"""A paused run survives the kernel: restart it from JupyterLab, then approve in a fresh view.

After a restart, ``agent.chat(thread=...)`` shows the pending calls with working buttons (from the
durable store). The run pauses in one kernel process; the kernel is restarted through
the front end (menu command + its confirmation dialog); a new process re-defines the same agent
over the same SQLite file, and the Approve button of the reloaded view runs the tool exactly once.
Screenshots of failures go to tests/browser/artifacts (page_factory).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

from .harness import KNOWN_CONSOLE_NOISE, NotebookPage

TIMEOUT = 120.0  # seconds per wait: a 2-core machine shared by many workers

SETUP = '''\
import os
from nbagent import Agent, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.store.sqlite import SQLiteStore

MARKER = {marker!r}
DB = {db!r}

@tool(requires_approval=True)
def refund(order_id: str) -> str:
    """Refund an order."""
    with open(MARKER, "a", encoding="utf-8") as f:
        f.write(f"refund {{order_id}}\\n")
    return f"refunded {{order_id}}"

def answer(messages, request):
    last = messages[-1]
    if last.kind == "user":
        return tool_call("refund", order_id="42")
    return "The refund went through: " + last.content

agent = Agent(FunctionModel(answer), tools=[refund], store=SQLiteStore(DB))
print("kernel pid", os.getpid())
'''
RUN = """\
result = await agent.run("please refund order 42", thread="restart-demo")
print("status", result.status, [(p.name, p.args) for p in result.pending])
"""
VIEW = 'agent.chat(thread="restart-demo")'

ANSWER = "The refund went through: refunded 42"

# Fire the menu command without awaiting it (its confirmation dialog would block an await);
# its promise settles when the person has answered the dialog and the kernel has restarted.
_JS_RESTART = """
(id) => {
  window.__nbagentRestart = 'pending';
  window.jupyterapp.commands.execute(id).then(
    (r) => { window.__nbagentRestart = 'done:' + r; },
    (e) => { window.__nbagentRestart = 'error:' + e; });
}
"""


def _rows_text(page: NotebookPage) -> str:
    return str(
        page.eval("() => Array.from(document.querySelectorAll('.nbagent-tool-row')).map(e => e.innerText).join('\\n')")
    )


def _restart_kernel(page: NotebookPage, command: str = "kernelmenu:restart") -> tuple[float, int]:
    """Restart the notebook's kernel through the front end, accepting its confirmation dialog;
    returns (seconds taken, dialogs accepted)."""
    t0 = time.monotonic()
    clicks = [0]
    page.eval(_JS_RESTART, command)
    accept = page.page.locator(".jp-Dialog .jp-mod-accept")

    def settled() -> str | None:
        state = page.eval("() => window.__nbagentRestart")
        if state != "pending":
            return str(state)
        if accept.count():
            accept.first.click()
            clicks[0] += 1
        return None

    state = page.wait_for(settled, f"{command} to finish (dialog accepted)", TIMEOUT, interval=0.2)
    assert state == "done:true", f"{command} ended with {state!r}"
    page.wait_kernel_idle(TIMEOUT)
    return time.monotonic() - t0, clicks[0]


def test_paused_run_survives_a_kernel_restart(jupyter_lab, browser_root, make_notebook, page_factory):
    tag = uuid.uuid4().hex[:8]
    marker = Path(browser_root) / f"restart-{tag}-refunds.txt"
    db = Path(browser_root) / f"restart-{tag}.db"
    nb = make_notebook([SETUP.format(marker=str(marker), db=str(db)), RUN, VIEW])
    page = page_factory(jupyter_lab, nb, timeout=TIMEOUT)
    timings: dict[str, float] = {}

    # (1) the agent runs to a pause in the first kernel process; nothing refunded yet
    t0 = time.monotonic()
    page.run_cell(0)
    first_pid = int(page.wait_regex(r"kernel pid (\d+)", TIMEOUT, cell=0).group(1))
    page.wait_idle(TIMEOUT)
    page.run_cell(1)
    paused = page.wait_text("status paused", TIMEOUT, cell=1)
    assert "refund" in paused and "'order_id': '42'" in paused, paused
    page.wait_idle(TIMEOUT)
    assert not marker.exists(), "the tool ran before anyone approved it"
    assert db.exists(), "the SQLite store was not written in the notebook's folder"
    timings["pause"] = time.monotonic() - t0

    # (2) restart through JupyterLab: a new kernel process
    timings["restart"], dialogs = _restart_kernel(page)
    t0 = time.monotonic()
    page.run_cell(0)  # the same definitions, in the new process
    m = page.wait_regex(rf"kernel pid (?!{first_pid}\b)(\d+)", TIMEOUT, cell=0)
    assert int(m.group(1)) != first_pid
    page.wait_idle(TIMEOUT)

    # (3) a fresh view of the thread shows the stored pending call, with its arguments and buttons
    page.run_cell(2)
    page.wait_for(lambda: "needs approval" in _rows_text(page), "the pending refund row", TIMEOUT)
    rows = _rows_text(page)
    assert "refund" in rows and re.search(r'"order_id":\s*"42"', rows), rows
    for label in ("Approve", "Deny", "Edit"):  # the buttons render a moment after the row's text
        buttons = page.output_buttons(label)
        page.wait_for(lambda b=buttons: b.filter(visible=True).count() >= 1, f"a {label} button", TIMEOUT)
    page.wait_text("waiting for you: 1 tool call", TIMEOUT, cell=2)
    timings["view"] = time.monotonic() - t0

    # Approve runs the tool in the new process, once, and the model's answer appears in the view
    t0 = time.monotonic()
    page.click("Approve", timeout=TIMEOUT)
    page.wait_text(ANSWER, TIMEOUT, cell=2)
    timings["approve"] = time.monotonic() - t0
    page.wait_for(lambda: "done" in _rows_text(page), "the refund row marked done", TIMEOUT)
    assert marker.read_text(encoding="utf-8").splitlines() == ["refund 42"]
    out = page.output_text(2)
    assert "Traceback" not in out and "Error" not in out, out
    assert page.output_buttons("Approve").filter(visible=True).count() == 0, "Approve still offered"
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
    print(
        "restart test timings (s):", {k: round(v, 2) for k, v in timings.items()}, "restart dialogs accepted:", dialogs
    )
