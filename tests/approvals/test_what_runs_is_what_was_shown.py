"""Class 5: the approver sees something other than what runs (pydantic-ai #6968; langgraph #8026;
claude-code #69115).

What nbagent guarantees: a waiting call's row (and the static summary) shows every argument that
will run, or Approve stays off until the person opened the editor that holds them all, and the
row says so; characters a reader cannot see are shown escaped and the row is flagged; an edit is
shown as a diff of what it changes before it is approved, and the audit (the stored result, the
model's call, `tool_calls_frame`) keeps both the model's and the edited arguments. The decision
stays bound to the arguments shown (`ArgumentsMismatchError` otherwise: tests/test_core_approvals.py).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, tool_calls_frame
from nbagent.display.html import WHOLE_CHARS, render_result_html
from nbagent.notebook import python_tool
from nbagent.store import MemoryStore

from .kit import Ledger, click, once, results, settle, tool_call

TAIL = "print('the last line, where the harm would hide')"
BIDI = "\u202e"


def text_of(markup: str) -> str:
    """What a person reads in some HTML (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _code(chars: int) -> str:
    """Python code of about `chars` characters whose last line is `TAIL`."""
    body = "x = 1  # filler\n" * (chars // 16)
    return body + TAIL


async def _waiting_view(code: str, namespace: dict[str, Any]) -> Any:
    agent = Agent(once(tool_call("python", code=code)), tools=[python_tool(namespace=namespace)], store=MemoryStore())
    view = agent.chat(thread="t")
    view.ask("run it")
    await view.wait()
    [row] = view.rows.values()
    return view, row


async def test_pydantic_ai_6968_long_arguments_are_shown_whole_or_approve_waits_for_the_editor() -> None:
    """Arguments past the old 20,000-character cut are shown whole; past `WHOLE_CHARS` the row
    says how much it leaves out and Approve, Always allow and Approve all keep away from the call
    until its editor (which holds all of it) was opened.

    Catches: a row or summary that cuts a waiting call's arguments and still offers Approve
    (checked by hand with ``WHOLE_CHARS`` set back to 20,000 and with the row's guard removed:
    the tail is missing and Approve is enabled).
    """
    namespace: dict[str, Any] = {}
    view, row = await _waiting_view(_code(25_000), namespace)
    assert TAIL in text_of(row.html.value)  # the tail, past 20,000 characters, is shown
    assert "not shown" not in text_of(row.html.value) and not row.unshown
    assert not row.buttons["Approve"].disabled
    assert TAIL in text_of(render_result_html(view.result))  # and in the static summary

    view, row = await _waiting_view(_code(WHOLE_CHARS + 5_000), namespace)
    assert row.unshown > 0
    notice = "".join(getattr(w, "value", "") for w in row.actions.children)
    assert f"{row.unshown:,} characters are left out" in notice
    assert row.buttons["Approve"].disabled and row.buttons["Always allow"].disabled
    row.buttons["Approve"].click()  # a click that raced the disabled state is refused too
    await settle()
    assert view.result.status == "paused" and "ran" not in namespace
    summary = render_result_html(view.result)
    assert "characters of these arguments are not shown here" in summary and "result.pending[0].args" in summary

    await click(row.buttons["Edit"])  # the editor holds every character: now it may be approved
    assert json.loads(row.edit_area.value)["code"].endswith(TAIL)
    assert not row.buttons["Approve"].disabled
    await click(row.buttons["Edit"])  # closed again, unchanged: Approve runs the call as read
    await click(row.buttons["Approve"])
    done = await view.wait()
    assert done.status == "completed" and namespace["x"] == 1


async def test_pydantic_ai_6968_approve_all_leaves_out_calls_too_long_to_show(tmp_path: Path) -> None:
    """Approve all never approves a call whose arguments its row could not show whole.

    Catches: Approve all deciding every waiting call (checked by hand without the check in
    ``ChatController.decide_all``: the long call runs)."""
    ledger = Ledger(tmp_path / "runs.txt")
    long_id = "x" * (WHOLE_CHARS + 10)
    agent = ledger.agent(once(tool_call("refund", order_id="1", amount=5.0),
                              tool_call("refund", order_id=long_id, amount=6.0)), store=MemoryStore())
    view = agent.chat(thread="t")
    view.ask("refund both")
    await view.wait()
    await click(view.buttons["Approve all"])
    await view.wait()
    assert ledger.runs == ["refund 1 5"]
    assert "Approve all left out 1 call" in view.status_line.value
    [left] = [r for r in view.rows.values() if r.status == "needs approval"]
    assert left.unshown > 0 and left.buttons["Approve"].disabled


async def test_claude_code_69115_invisible_characters_are_shown_escaped_and_the_row_is_flagged() -> None:
    """A bidi override (Trojan Source) and zero-width characters reach no row or summary raw:
    they read as ``\\u202e`` and the row carries a "hidden characters" label naming them; the
    editor holds the same value, escaped; what runs is exactly what the model sent.

    Catches: arguments shown with their invisible characters raw (checked by hand with
    ``pretty_args`` and ``code_html`` not calling `reveal`: the raw U+202E reaches the row)."""
    namespace: dict[str, Any] = {}
    code = f"access = 'user'\nif access != 'none{BIDI} \u2066# admin\u2069 \u2066':\n    granted = True\u200b"
    view, row = await _waiting_view(code, namespace)
    html = row.html.value
    summary = render_result_html(view.result)
    for shown in (html, summary):
        assert BIDI not in shown and "\u2066" not in shown and "\u200b" not in shown
        assert "\\u202e" in shown and "\\u2066" in shown and "\\u200b" in shown
        assert "nbagent-hidden-chars" in shown and "U+202E RIGHT-TO-LEFT OVERRIDE" in shown
    assert json.loads(row.edit_area.value) == {"code": code}  # the editor: the same value, escaped
    assert BIDI not in row.edit_area.value
    await click(row.buttons["Approve"])
    done = await view.wait()
    [ran] = results(done)
    assert ran.decision == "approved" and ran.edited_args is None  # ran as the model sent it


async def test_langgraph_8026_an_edit_is_shown_as_a_diff_and_the_audit_keeps_both(tmp_path: Path) -> None:
    """Typing in Edit shows what changes (removed and added lines) before Approve edited; the
    stored result, the model's call and `tool_calls_frame` keep the original and the edited
    arguments; the row and the summary show the diff after it ran.

    Catches: an edit approved with no view of what it changes, or an audit that keeps one side
    only (checked by hand with the diff line removed from ``ToolRow._edit_controls`` and with
    ``original_args`` left empty: both fail)."""
    ledger = Ledger(tmp_path / "runs.txt")
    store = MemoryStore()
    view = ledger.agent(once(tool_call("refund", order_id="42", amount=90.0)), store=store).chat(thread="t")
    view.ask("refund 42")
    await view.wait()
    [row] = view.rows.values()
    await click(row.buttons["Edit"])
    assert row.edit_diff.value == ""  # nothing changed yet
    row.edit_area.value = row.edit_area.value.replace("90.0", "9.0")
    diff = row.edit_diff.value
    assert "what the edit changes" in diff
    assert '-  &quot;amount&quot;: 90.0' in diff and '+  &quot;amount&quot;: 9.0' in diff
    await click(row.buttons["Approve edited"])
    done = await view.wait()
    assert ledger.runs == ["refund 42 9"]

    [ran] = results(done)
    [call] = [c for m in done.messages if m.kind == "assistant" for c in m.tool_calls]
    assert (call.args, ran.edited_args, ran.decision) == ({"order_id": "42", "amount": 90.0},
                                                          {"order_id": "42", "amount": 9.0}, "edited")
    frame = tool_calls_frame(done)
    assert frame.loc[0, "args"] == {"order_id": "42", "amount": 9.0}
    assert frame.loc[0, "original_args"] == {"order_id": "42", "amount": 90.0}
    stored = tool_calls_frame(store)
    assert (stored.loc[0, "args"], stored.loc[0, "original_args"]) == (frame.loc[0, "args"],
                                                                       frame.loc[0, "original_args"])
    for shown in (row.html.value, render_result_html(done)):
        assert "nbagent-edited" in shown and "what the edit changes" in shown


@pytest.mark.parametrize("chars", [0, 10])
def test_the_limit_is_the_one_the_row_uses(chars: int) -> None:
    """`WHOLE_CHARS` is what the row shows whole: a call at the limit has nothing left out."""
    from nbagent.display.html import unshown_chars

    args = {"code": "x" * (WHOLE_CHARS + chars)}
    assert unshown_chars(args) == chars


def test_langgraph_8026_an_edit_deep_in_a_long_argument_shows_in_the_diff() -> None:
    """The diff compares the whole arguments: a change at the end of 180,000 characters of code
    (one JSON line) is shown, around where it is, never "no change".

    Catches: a diff of the first characters only (checked by hand with `diff_html` comparing the
    first 20,000 characters: it says "no change")."""
    from nbagent.display.html import diff_html, pretty_args

    code = "x = 1\n" * 30_000
    shown = text_of(diff_html(pretty_args({"code": code}), pretty_args({"code": code + "import os"})))
    assert "import os" in shown and "no change" not in shown
