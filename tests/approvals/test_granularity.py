"""Class 8: no granularity (NeoGraph #90; vscode #289019).

What nbagent guarantees: approval at every grain, each visible and revocable: per call (each
call of a ``requires_approval=True`` tool waits), per argument (``requires_approval=callable``:
only the calls its function picks wait), per tool (``always_allow``: later calls of the tool run
without asking) and per thread (an always-allow holds on its thread only). The always-allowed
tools are visible (`RunResult.always_allowed`, the summary, the view's list) and revocable
(`Agent.revoke`, the ✕ in the view): after a revoke the tool's next call waits again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nbagent import ConflictError
from nbagent.display.html import render_result_html
from nbagent.models import FunctionModel
from nbagent.store import MemoryStore

from .kit import Ledger, click, once, tool_call


def refund(n: int) -> object:
    return tool_call("refund", order_id=str(n), amount=float(n))


def refunds_asked() -> FunctionModel:
    """A model that refunds the orders numbered in the user's message, then says it is done."""

    def answer(messages: list, request: object) -> object:
        last = messages[-1]
        if last.kind == "user":
            return [refund(int(w)) for w in last.content.split() if w.isdigit()]
        return "done"

    return FunctionModel(answer)


async def test_neograph_90_every_grain_of_approval_is_visible_and_revocable(tmp_path: Path) -> None:
    """Per call, per argument, per tool and per thread, then a revoke in code.

    Catches: an always-allow that cannot be taken back, or that leaks to other threads (checked
    by hand with `Threads.revoke` not writing the thread, and with ``run_state`` in
    ``nbagent/_run/prepare.py`` starting every thread with ``refund`` always allowed: the revoked
    thread's, or the other thread's, refund runs unasked).
    """
    ledger = Ledger(tmp_path / "runs.txt")
    store = MemoryStore()
    agent = ledger.agent(refunds_asked(), store=store)

    # per call: each call of the tool waits, each decided on its own
    paused = await agent.run("refund 1 and 2", thread="t")
    assert [p.args["order_id"] for p in paused.pending] == ["1", "2"]

    # per tool: always allow approves the waiting calls and every later one, and shows
    done = await agent.resume(paused, always_allow=["refund"])
    assert sorted(ledger.runs) == ["refund 1 1", "refund 2 2"]
    assert done.always_allowed == ["refund"]
    assert "always allowed on this thread" in render_result_html(done)
    later = await agent.run("refund 3", thread="t")
    assert later.status == "completed" and later.always_allowed == ["refund"]

    # per thread: another thread of the same agent still asks
    other = await agent.run("refund 4", thread="other")
    assert other.status == "paused" and other.always_allowed == []

    # revocable: the next call of the tool waits again
    assert await agent.revoke("t", "refund") == []
    revoked = await agent.run("refund 5", thread="t")
    assert revoked.status == "paused" and revoked.always_allowed == []
    assert sorted(ledger.runs) == ["refund 1 1", "refund 2 2", "refund 3 3"]  # calls 4 and 5 did not run

    # per argument: the policy picks which calls wait (above 100)
    agent2 = ledger.agent(once(tool_call("transfer", to="ada", amount=50.0),
                               tool_call("transfer", to="bob", amount=500.0)), store=store)
    split = await agent2.run("pay ada and bob", thread="pay")
    assert [p.args["to"] for p in split.pending] == ["bob"] and "transfer ada 50" in ledger.runs


async def test_neograph_90_the_view_lists_always_allowed_tools_and_its_x_revokes(tmp_path: Path) -> None:
    """The view's line under the status lists the thread's always-allowed tools; ✕ revokes:
    the line empties and the next call waits for the person. While a run goes on the ✕ is off.

    Catches: a view that hides an always-allow or cannot undo it (checked by hand with the
    controller's revoke not calling `Agent.revoke`: the next refund runs unasked)."""
    ledger = Ledger(tmp_path / "runs.txt")
    agent = ledger.agent(refunds_asked(), store=MemoryStore())
    view = agent.chat(thread="t")
    view.ask("refund 1")
    await view.wait()
    [row] = view.rows.values()
    await click(row.buttons["Always allow"])
    await view.wait()
    allowed = view.always_allowed
    assert allowed.tools == ["refund"] and allowed.layout.display != "none"
    assert "always allowed on this thread" in allowed.children[0].value

    # a second view of the thread (e.g. a new kernel) shows the same
    again = agent.chat(thread="t")
    await again.wait_loaded()
    assert again.always_allowed.tools == ["refund"]

    again.always_allowed.running(True)  # while a run goes on, nothing to click
    assert again.always_allowed.buttons["refund"].disabled
    again.always_allowed.running(False)

    await click(allowed.buttons["refund"])
    await view.wait()
    assert allowed.tools == [] and allowed.layout.display == "none"
    assert "no longer always allowed" in view.status_line.value
    await again.wait()
    assert again.always_allowed.tools == []  # the other view of this kernel follows
    view.ask("refund 2")
    paused = await view.wait()
    assert paused is not None and paused.status == "paused" and ledger.runs == ["refund 1 1"]


async def test_revoke_refuses_a_thread_whose_run_goes_on(tmp_path: Path) -> None:
    """A run keeps its own copy of the always-allowed tools until it ends: a revoke meanwhile is
    refused (`ConflictError`), never silently lost."""
    import asyncio

    gate = asyncio.Event()
    ledger = Ledger(tmp_path / "runs.txt")
    from nbagent import Agent, tool
    from nbagent.models import FunctionModel

    @tool
    async def wait() -> str:
        """Wait for the test."""
        await gate.wait()
        return "waited"

    def answer(messages: list, request: object) -> object:
        return tool_call("wait") if messages[-1].kind == "user" else "done"

    agent = Agent(FunctionModel(answer), tools=[*ledger.tools, wait], store=MemoryStore())
    handle = agent.start("go", thread="t")
    while (stored := await agent.store.load("t")) is None or not any(m.kind == "assistant" for m in stored.messages):
        await asyncio.sleep(0.01)
    with pytest.raises(ConflictError, match="being run right now"):
        await agent.revoke("t", "refund")
    gate.set()
    await handle
