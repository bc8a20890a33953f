"""What a reviewer sees before approving, in a real browser (JupyterLab, headless Chromium): the
conformance suite's view promises (tests/approvals/, docs/approvals.md "What nbagent guarantees")
where only a browser shows them.

- Long arguments: 27,000 characters of code are all in the waiting row, in a scroll box; past
  100,000 the row says how much it leaves out and Approve is off until Edit was opened.
- A bidi payload (Trojan Source): the row shows ``\\u202e`` where the override was, flagged
  "hidden characters"; no override character reaches the page.
- An edit's diff: typing in Edit shows the removed and the added line before Approve edited.
- Revoke in the view: "Always allow refund" lists the tool under the status line; its ✕ revokes
  it and the next refund waits again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))
TIMEOUT = 90

SETUP = '''\
from nbagent import Agent, tool
from nbagent.models import FunctionModel, tool_call
from nbagent.notebook import python_tool
from nbagent.store.memory import MemoryStore

LONG = "x = 1  # filler line\\n" * 1300 + "print('THE-TAIL-LINE')"
HUGE = "y = 2  # filler line\\n" * 5200 + "print('THE-HUGE-TAIL')"
BIDI = "for order 42\\u202e // approved \\u2066ok\\u2069"
ran = []

@tool(requires_approval=True)
def refund(order: int, note: str = "") -> str:
    """Refund an order."""
    ran.append(order)
    return f"refunded {order}"

def model(messages, info):  # what the message's first word asks for, then the tool's first line
    last = messages[-1]
    if last.kind == "tool-result":
        return "RESULT: " + last.content.splitlines()[0] + " ENDOFANSWER"
    word, *rest = last.content.split()
    if word in ("long", "huge"):
        return tool_call("python", code=LONG if word == "long" else HUGE)
    if word == "bidi":
        return tool_call("refund", order=42, note=BIDI)
    return tool_call("refund", order=int(rest[0]))

agent = Agent(FunctionModel(model), tools=[python_tool(timeout=10), refund], store=MemoryStore())
view = agent.chat(thread="approvals")
view
'''
CELLS = [SETUP, 'print("refunds ran:", ran)']

ROWS_JS = "() => Array.from(document.querySelectorAll('.nbagent-chat .nbagent-tool-row')).map(e => e.innerText)"
CODE_BOX_JS = """() => {
  const boxes = Array.from(document.querySelectorAll('.nbagent-chat .nbagent-tool-row pre.nbagent-code'));
  const box = boxes[boxes.length - 1];
  if (!box) return null;
  return {text: box.textContent, scrolls: box.scrollHeight > box.clientHeight + 10,
          overflow: getComputedStyle(box).overflowY};
}"""


def _rows(page: Any) -> list[str]:
    return list(page.eval(ROWS_JS))


def _waiting(page: Any, n: int) -> str:
    """Wait until `n` calls have waited for approval in all; the last waiting row's text."""
    page.wait_for(lambda: sum("needs approval" in r for r in _rows(page)) >= 1 and len(_rows(page)) >= n,
                  f"call {n} waiting for approval", timeout=TIMEOUT)
    return [r for r in _rows(page) if "needs approval" in r][-1]


def _visible(page: Any, selector: str) -> Any:
    loc = page.page.locator(selector)
    page.wait_for(lambda: any(loc.nth(i).is_visible() for i in range(loc.count())), selector, timeout=TIMEOUT)
    return [loc.nth(i) for i in range(loc.count()) if loc.nth(i).is_visible()][-1]


def _button(page: Any, label: str) -> Any:
    buttons = page.output_buttons(label)
    page.wait_for(lambda: any(buttons.nth(i).is_visible() for i in range(buttons.count())), label, timeout=TIMEOUT)
    return [buttons.nth(i) for i in range(buttons.count()) if buttons.nth(i).is_visible()][-1]


def _open(jupyter_lab: Any, make_notebook: Any, page_factory: Any) -> Any:
    page = page_factory(jupyter_lab, make_notebook(CELLS))
    page.run_cell(0)
    page.wait_idle(timeout=TIMEOUT)
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")
    return page


def test_long_arguments_are_shown_whole_or_approve_waits_for_edit(jupyter_lab, make_notebook, page_factory):
    page = _open(jupyter_lab, make_notebook, page_factory)

    # 27,000 characters: all of it in the row (past the old 20,000 cut), in a scroll box
    page.type_text("long code")
    row = _waiting(page, 1)
    assert "not shown" not in row and "left out" not in row
    box = page.eval(CODE_BOX_JS)
    assert box is not None, "no code block in the waiting row"
    assert box["text"].rstrip().endswith("print('THE-TAIL-LINE')"), box["text"][-200:]
    assert box["scrolls"] and box["overflow"] == "auto", box
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "approvals_long_arguments.png"))
    page.click("Approve")
    page.wait_text("RESULT: THE-TAIL-LINE ENDOFANSWER", timeout=TIMEOUT, cell=0)  # the code ran, to its last line

    # past 100,000: the row says so, and Approve is off until Edit was opened
    page.type_text("huge code")
    row = _waiting(page, 2)
    assert "characters are left out above" in row and "until you open Edit" in row, row[-400:]
    assert not _button(page, "Approve").is_enabled()
    assert not _button(page, "Always allow python").is_enabled()
    page.click("Edit")
    area = _visible(page, ".nbagent-chat textarea")
    page.wait_for(lambda: "THE-HUGE-TAIL" in area.input_value(), "the editor holding every character", timeout=TIMEOUT)
    page.wait_for(lambda: _button(page, "Approve").is_enabled(), "Approve, once Edit was opened", timeout=TIMEOUT)
    page.click("Approve")
    page.wait_text("RESULT: THE-HUGE-TAIL ENDOFANSWER", timeout=TIMEOUT, cell=0)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []


def test_bidi_payload_edit_diff_and_revoke_in_the_view(jupyter_lab, make_notebook, page_factory):
    page = _open(jupyter_lab, make_notebook, page_factory)

    # a bidi payload: escaped and flagged, no override character on the page
    page.type_text("bidi refund")
    row = _waiting(page, 1)
    assert "\\u202e" in row and "\\u2066" in row, row
    assert "\u202e" not in page.output_text(0) and "\u2066" not in page.output_text(0)
    label = _visible(page, ".nbagent-chat .nbagent-hidden-chars")
    assert label.inner_text().strip() == "hidden characters"
    assert "RIGHT-TO-LEFT OVERRIDE" in (label.get_attribute("title") or "")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "approvals_hidden_characters.png"))

    # an edit's diff, before Approve edited
    page.click("Edit")
    area = _visible(page, ".nbagent-chat textarea")
    assert '"order": 42' in area.input_value()
    area.fill(area.input_value().replace('"order": 42', '"order": 43'))
    diff = _visible(page, ".nbagent-chat .nbagent-edit-diff")
    page.wait_for(lambda: '+  "order": 43' in diff.inner_text(), "the diff of the edit", timeout=TIMEOUT)
    assert '-  "order": 42' in diff.inner_text() and "what the edit changes" in diff.inner_text()
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "approvals_edit_diff.png"))
    page.click("Approve edited")
    page.wait_text("RESULT: refunded 43", timeout=TIMEOUT, cell=0)

    # always allow, listed under the status line; its ✕ revokes it
    page.type_text("refund 7")
    _waiting(page, 2)
    page.click("Always allow refund")
    page.wait_text("RESULT: refunded 7", timeout=TIMEOUT, cell=0)
    allowed = _visible(page, ".nbagent-chat .nbagent-always-allowed")
    assert "always allowed on this thread" in allowed.inner_text()
    page.type_text("refund 8")
    page.wait_text("RESULT: refunded 8", timeout=TIMEOUT, cell=0)  # no question asked
    page.page.locator(".nbagent-chat").first.screenshot(path=str(ARTIFACTS / "approvals_always_allowed.png"))
    page.click("refund ✕")
    page.wait_text("no longer always allowed", timeout=TIMEOUT, cell=0)
    page.wait_for(lambda: not allowed.is_visible(), "the always-allowed line to go", timeout=TIMEOUT)
    page.type_text("refund 9")
    row = _waiting(page, 4)
    assert "needs approval" in row
    page.run_cell(1)
    page.wait_text("refunds ran: [43, 7, 8]", timeout=TIMEOUT, cell=1)
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
