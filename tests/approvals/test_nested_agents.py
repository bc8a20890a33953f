"""Class 7: approvals inside nested agents are invisible (openai-agents-js #243; agent-framework
#4963).

What nbagent guarantees: a call that needs a person anywhere in a tree of agents (`Agent.as_tool`)
pauses the top run and waits in the top cell, labelled with its path (``boss → researcher →
delete_file``), with its own Approve / Deny / Edit; the decision made there reaches the call's
owner: a denied deep call never runs and its reason reaches the sub-agent's model, an approved
one runs exactly once. A sub-agent built with no store and no approval policy of its own still
pauses the top run (its tool's own ``requires_approval`` holds, whatever the sub-agent's setup).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, NotResumableError
from nbagent.models import FunctionModel
from nbagent.store import MemoryStore

from .kit import Ledger, click, deny_in_view, tool_call


def _delegate(to: str) -> FunctionModel:
    def answer(messages: list[Any], info: Any) -> Any:
        last = messages[-1]
        return tool_call(to, task=last.content) if last.kind == "user" else f"{to} said: {last.content}"
    return FunctionModel(answer)


def _tree(ledger: Ledger, depth: int) -> tuple[Agent, list[str]]:
    """boss -> (depth - 1 managers) -> clerk, whose ``refund`` needs approval; what the clerk's
    model read back from its tools, in order."""
    seen: list[str] = []

    def clerk(messages: list[Any], info: Any) -> Any:
        if messages[-1].kind == "user":
            return tool_call("refund", order_id="42", amount=10.0)
        seen.append(messages[-1].content)
        return "clerk: " + messages[-1].content.split("\n")[0]

    agent = Agent(FunctionModel(clerk), tools=ledger.tools, name="clerk")  # no store, no policy of its own
    for level in range(1, depth):
        agent = Agent(_delegate(agent.name or ""), agents=[agent], name=f"manager{level}")
    return Agent(_delegate(agent.name or ""), agents=[agent], name="boss", store=MemoryStore()), seen


@pytest.mark.parametrize("depth", [1, 2])
async def test_openai_agents_js_243_a_deep_call_waits_in_the_top_cell_with_its_path(tmp_path: Path, depth: int) -> None:
    """Catches: a child's pending call not bubbling up (the top run completing, or the call
    running without a decision), and a view that does not show it. Checked by hand against a
    copy whose agent call answered a paused sub-agent with text instead of lifting its calls up:
    the top run completed and no row waited."""
    ledger = Ledger(tmp_path / "runs.txt")
    boss, _ = _tree(ledger, depth)
    view = boss.chat(thread="t")
    view.ask("refund order 42")
    paused = await view.wait()
    assert paused is not None and paused.status == "paused" and ledger.runs == []
    [pending] = paused.pending
    path = ("boss", *(f"manager{i}" for i in range(1, depth)), "clerk")
    assert pending.path == path and pending.name == "refund"
    [row] = [r for r in view.rows.values() if r.status == "needs approval"]
    assert " → ".join([*path[1:], "refund"]) in row.html.value  # labelled with its path in the top cell
    assert {"Approve", "Deny", "Edit"} <= set(row.buttons) and not row.buttons["Approve"].disabled
    await click(row.buttons["Approve"])
    done = await view.wait()
    assert done is not None and done.status == "completed"
    assert ledger.runs == ["refund 42 10"]  # exactly once
    with pytest.raises(NotResumableError):  # deciding it again changes nothing
        await boss.resume(paused, approve=[pending])
    assert ledger.runs == ["refund 42 10"]


async def test_agent_framework_4963_a_deep_call_denied_in_the_top_cell_never_runs(tmp_path: Path) -> None:
    """Catches: a decision made at the top that does not reach the call's owner (the deep call run
    anyway, or its reason lost). Checked by hand against a copy that dropped the decisions routed
    to an agent call: the sub-agent's call waited again instead of being denied."""
    ledger = Ledger(tmp_path / "runs.txt")
    boss, clerk_saw = _tree(ledger, 2)
    view = boss.chat(thread="t")
    view.ask("refund order 42")
    await view.wait()
    done = await deny_in_view(view, "refunds go through finance")
    assert done is not None and done.status == "completed" and ledger.runs == []
    assert clerk_saw and clerk_saw[0].startswith("denied by the user: refunds go through finance")
    assert "refund was not run" in clerk_saw[0]
