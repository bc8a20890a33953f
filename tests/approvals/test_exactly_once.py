"""Class 2: resume re-runs side effects or the wrong thing (langgraph #7780, #4796, #2870;
openai-agents PR #4414; adk-go PR #1183).

What nbagent guarantees: an approved call runs exactly once, across resumes and restarts: a
duplicate resume (the same decision again, later or at the same moment) is refused and runs
nothing; a new process resumes a thread without running again what ran; a call whose kernel died
inside it is reported "interrupted", never silently run again; sibling calls that ran before the
pause never run again; and what runs is the call that was approved (the decision is bound to the
call id and its arguments: tests/test_core_approvals.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from nbagent import ConflictError, NotResumableError
from nbagent.store import MemoryStore, SQLiteStore

from .kit import Ledger, once, results, tool_call
from .test_durable_and_single import KERNEL, ROOT, kernel

REFUND = tool_call("refund", order_id="42", amount=10.0)
LOOKUP = tool_call("lookup", order_id="42")


async def _duplicate_resume(ledger: Ledger, tmp_path: Path) -> list[str]:
    agent = ledger.agent(once(REFUND, LOOKUP), store=MemoryStore())
    paused = await agent.run("refund 42", thread="t")
    assert ledger.runs == ["lookup 42"]  # the sibling that needs no approval ran before the pause
    await agent.resume(paused, approve=[paused.pending[0]])
    with pytest.raises(NotResumableError):
        await agent.resume(paused, approve=[paused.pending[0]])
    return ["lookup 42", "refund 42 10"]


async def _two_resumes_at_once(ledger: Ledger, tmp_path: Path) -> list[str]:
    agent = ledger.agent(once(REFUND, LOOKUP), store=MemoryStore())
    paused = await agent.run("refund 42", thread="t")
    both = await asyncio.gather(*(agent.resume(paused, approve=[paused.pending[0]]) for _ in range(2)),
                                return_exceptions=True)
    assert sorted(type(r).__name__ for r in both) == ["ConflictError", "RunResult"]
    assert any(isinstance(r, ConflictError) for r in both)
    return ["lookup 42", "refund 42 10"]


async def _restart(ledger: Ledger, tmp_path: Path) -> list[str]:
    db = tmp_path / "threads.db"
    paused = await ledger.agent(once(REFUND, LOOKUP), store=SQLiteStore(db)).run("refund 42", thread="t")
    done = await ledger.agent(once(REFUND, LOOKUP), store=SQLiteStore(db)).resume(
        thread="t", approve=[paused.pending[0].id])
    assert [r.decision for r in results(done) if r.name == "refund"] == ["approved"]
    with pytest.raises(NotResumableError):  # a third kernel, the same click
        await ledger.agent(once(REFUND, LOOKUP), store=SQLiteStore(db)).resume(
            thread="t", approve=[paused.pending[0].id])
    return ["lookup 42", "refund 42 10"]


async def _kernel_died_inside_the_tool(ledger: Ledger, tmp_path: Path) -> list[str]:
    db = tmp_path / "threads.db"
    paused = await kernel("pause", str(db), "t", str(ledger.path))  # (its model asks for the refund only)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(sys.executable, str(KERNEL), "hang", str(db), "t", str(ledger.path),
                                                paused.split()[1], env=env, cwd=str(ROOT),
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while "refund 42 10" not in ledger.runs and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)  # the kernel dies inside the approved tool
    await proc.wait()
    done = await ledger.agent(once(REFUND), store=SQLiteStore(db)).resume(thread="t")
    [refund] = [r for r in results(done) if r.name == "refund"]
    assert refund.status == "interrupted" and "not known whether it completed" in refund.content
    return ["refund 42 10"]


PATHS: dict[str, Callable[[Ledger, Path], Awaitable[list[str]]]] = {
    "duplicate-resume": _duplicate_resume,
    "two-resumes-at-once": _two_resumes_at_once,
    "restart": _restart,
    "kernel-died-inside-the-tool": _kernel_died_inside_the_tool,
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", list(PATHS))
async def test_langgraph_7780_an_approved_call_runs_exactly_once(path: str, tmp_path: Path) -> None:
    """The approved refund runs once (and its sibling lookup once), whatever way the thread is
    continued again; each path returns the runs it expects.

    Catches: a resume that runs the call again. Checked by hand: with the ledger's "started"
    check of ``nbagent/_run/plan.py`` removed, the killed kernel's refund runs twice; with
    `MemoryStore`'s version check and `refuse_live` (``nbagent/_run/prepare.py``) both removed,
    two resumes at once both run it (either one alone refuses the second). The duplicate
    resume and the restart hold by construction (the call has its result, so no resume reaches
    it; a decision naming it is refused): they fail if a second run of it ever happens.
    """
    ledger = Ledger(tmp_path / "runs.txt")
    expected = await PATHS[path](ledger, tmp_path)
    assert sorted(ledger.runs) == expected
