"""Class 3: parallel calls, one shown and one decision for all (agent-framework #6910; supabase
PR #47008; langchainjs PR #9949).

What nbagent guarantees: N calls of one answer that need approval are N pending calls and N rows,
each with its own Approve / Deny / Edit, plus Approve all / Deny all; mixed decisions run as
chosen, each result stamped with its own decision; a sibling that needs no approval runs once,
before the pause.
"""

from __future__ import annotations

from pathlib import Path

from nbagent import Decisions
from nbagent.store import MemoryStore

from .kit import Ledger, click, once, results, tool_call

CALLS = [tool_call("refund", order_id=str(n), amount=float(n)) for n in (1, 2, 3)]


async def test_agent_framework_6910_each_parallel_call_gets_its_own_row_and_decision(tmp_path: Path) -> None:
    """Three refunds and a lookup in one answer: three rows with buttons of their own and
    Approve all / Deny all; approve one, deny one, edit one: each runs as decided.

    Catches: calls folded into one decision (checked by hand with ``nbagent/_run/plan.py``
    taking the first stored decision for every call: refund 2 runs) and one shown call for
    several (checked by hand with the planner keeping only the first pending call: two rows go
    missing). Both also fail the test below.
    """
    ledger = Ledger(tmp_path / "runs.txt")
    agent = ledger.agent(once(*CALLS, tool_call("lookup", order_id="9")), store=MemoryStore())
    view = agent.chat(thread="t")
    view.ask("refund 1, 2 and 3")
    paused = await view.wait()
    assert paused is not None and len(paused.pending) == 3
    assert ledger.runs == ["lookup 9"]  # the sibling that needs no approval ran, once
    rows = [view.rows[p.id] for p in paused.pending]
    assert [r.status for r in rows] == ["needs approval"] * 3
    assert all({"Approve", "Deny", "Edit"} <= set(r.buttons) for r in rows)
    assert len({id(r.buttons["Approve"]) for r in rows}) == 3  # three buttons, not one
    assert view.buttons["Approve all"].layout.display != "none"
    assert view.buttons["Deny all"].layout.display != "none"

    first, second, third = rows
    await click(first.buttons["Approve"])
    assert (second.status, third.status) == ("needs approval", "needs approval")  # still theirs to decide
    await click(second.buttons["Deny"])
    second.deny_reason.value = "not order 2"
    await click(second.buttons["Confirm deny"])
    await click(third.buttons["Edit"])
    third.edit_area.value = third.edit_area.value.replace("3.0", "0.5")
    await click(third.buttons["Approve edited"])
    done = await view.wait()

    assert done is not None and done.status == "completed"
    assert sorted(ledger.runs) == ["lookup 9", "refund 1 1", "refund 3 0.5"]
    decided = {r.call_id: (r.decision, r.status) for r in results(done)}
    assert [decided[p.id] for p in paused.pending] == [("approved", "done"), ("denied", "denied"),
                                                        ("edited", "done")]
    assert [r.status for r in rows] == ["done", "denied", "done"]


async def test_agent_framework_6910_mixed_decisions_in_code_run_as_chosen(tmp_path: Path) -> None:
    """The same in code: one `Decisions` value with a decision per call."""
    ledger = Ledger(tmp_path / "runs.txt")
    agent = ledger.agent(once(*CALLS), store=MemoryStore())
    paused = await agent.run("refund 1, 2 and 3", thread="t")
    one, two, three = paused.pending
    done = await agent.resume(paused, decisions=Decisions().deny(one, "no").approve(two).edit(
        three, {"order_id": "3", "amount": 0.25}))
    assert sorted(ledger.runs) == ["refund 2 2", "refund 3 0.25"]
    decided = {r.call_id: r.decision for r in results(done)}  # (two ran concurrently: in either order)
    assert [decided[p.id] for p in paused.pending] == ["denied", "approved", "edited"]
