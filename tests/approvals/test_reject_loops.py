"""Class 4: reject loops, the model retries forever (deepagents #2946; langchain PR #37859;
openai-agents PR #2660).

What nbagent guarantees: the deny result says the tool was **not run** and **not to call it
again**, with the reviewer's reason; the identical call (same tool, same arguments) again in the
same turn is denied without asking, its result repeating the reason, and it is shown as such
(decision ``repeat-denied``, the row's status "denied (repeat)"). A different call, or the same
call after the person's next message, is asked again.
"""

from __future__ import annotations

from pathlib import Path

from nbagent import tool_calls_frame
from nbagent.display.html import render_result_html
from nbagent.store import MemoryStore

from .kit import Ledger, deny_in_view, results, stubborn, tool_call

REFUND = tool_call("refund", order_id="42", amount=10.0)


async def test_deepagents_2946_a_denied_call_repeated_in_a_loop_is_denied_without_asking(tmp_path: Path) -> None:
    """A model stuck on one call asks three times; the person is asked once.

    Catches: a repeat of the denied call that pauses for the person again (checked by hand
    with the repeat check of ``nbagent/_run/plan.py`` removed: the run pauses a second time),
    and a denial text that names neither the not-run tool nor the retry (checked by hand with
    the old "denied by the user: <reason>" text: the content assertions fail).
    """
    ledger = Ledger(tmp_path / "runs.txt")
    agent = ledger.agent(stubborn(REFUND, times=3), store=MemoryStore())
    paused = await agent.run("refund 42", thread="t")
    done = await agent.resume(paused, deny={paused.pending[0].id: "the customer already got a voucher"})

    assert done.status == "completed" and done.pending == [] and ledger.runs == []
    first, *repeats = results(done)
    assert first.decision == "denied"
    assert first.content.startswith("denied by the user: the customer already got a voucher\n")
    assert "refund was not run" in first.content and "Do not call it again" in first.content
    assert [r.decision for r in repeats] == ["repeat-denied", "repeat-denied"]
    for r in repeats:
        assert r.status == "denied" and r.is_error
        assert r.content.startswith("denied again without asking")
        assert "the customer already got a voucher" in r.content and "refund was not run" in r.content
        assert (r.decided_by, r.decided_at) == (first.decided_by, first.decided_at)
    assert list(tool_calls_frame(done)["decision"]) == ["denied", "repeat-denied", "repeat-denied"]
    assert render_result_html(done).count("denied (repeat)") == 2

    # A new message from the person: the same call is asked again (the denial was for that turn).
    again = await agent.run("refund 42 after all", thread="t")
    assert again.status == "paused" and [p.args for p in again.pending] == [{"order_id": "42", "amount": 10.0}]


async def test_deepagents_2946_other_arguments_are_asked_again(tmp_path: Path) -> None:
    """Only the identical call is denied without asking: the same tool with other arguments
    waits for the person (a model that follows the reason is not blocked)."""
    ledger = Ledger(tmp_path / "runs.txt")
    calls = iter([[REFUND], [tool_call("refund", order_id="42", amount=5.0)], "done"])
    from nbagent.models import FunctionModel

    agent = ledger.agent(FunctionModel(lambda messages, request: next(calls)), store=MemoryStore())
    paused = await agent.run("refund 42", thread="t")
    second = await agent.resume(paused, deny={paused.pending[0].id: "too much"})
    assert second.status == "paused" and second.pending[0].args["amount"] == 5.0
    done = await agent.resume(second, approve=[second.pending[0]])
    assert ledger.runs == ["refund 42 5"] and done.status == "completed"


async def test_deepagents_2946_the_view_shows_a_repeat_as_denied_repeat(tmp_path: Path) -> None:
    """In the view the repeat is a row of its own marked "denied (repeat)", with the reason;
    nothing waits for a second decision."""
    ledger = Ledger(tmp_path / "runs.txt")
    view = ledger.agent(stubborn(REFUND, times=2), store=MemoryStore()).chat(thread="t")
    view.ask("refund 42")
    await view.wait()
    done = await deny_in_view(view, "no refunds on Sundays")
    assert done is not None and done.status == "completed" and ledger.runs == []
    first, repeat = view.rows.values()
    assert (first.status, repeat.status) == ("denied", "denied (repeat)")
    assert "denied (repeat)" in repeat.html.value and "no refunds on Sundays" in repeat.html.value
    assert not any(r.status == "needs approval" for r in view.rows.values())
