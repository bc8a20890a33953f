"""kill -9 inside a tree of agents, and the resume from a new process (langgraph #4796: a restart
re-ran the child from scratch).

The child process is this file run as a script (``python tests/test_subagents_faults.py MODE DB
KILL``): a boss whose sub-agent ``researcher`` sends a message (a tool that must never run twice:
it appends to a marker file each time it runs) and may delete a file (a tool a person approves),
on a `SQLiteStore`. It kills itself with SIGKILL at the chosen moment: inside the child's tool
(``in-tool``), after the tool's result was committed and before the child's next model call
(``after-tool``), after the child's answer was committed and before the parent recorded it
(``after-child``), or, on a resume that carries an approval, after the top stored the decision
and before the child ran the approved call (``before-approved-run``). The test resumes the thread
in a new process and checks what a user would: it completes, the child's thread is continued
(never a fresh child), and no tool started twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from nbagent import Agent, tool  # noqa: E402
from nbagent.messages import Message  # noqa: E402
from nbagent.models import FunctionModel, tool_call  # noqa: E402
from nbagent.store import LedgerEntry, SQLiteStore  # noqa: E402
from nbagent.usage import ModelCallUsage  # noqa: E402

pytestmark = pytest.mark.slow


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _KillingStore(SQLiteStore):
    """A store that dies (SIGKILL) just before the append the test names."""

    def __init__(self, path: str, kill: str) -> None:
        super().__init__(path)
        self.kill = kill

    async def append(self, thread: str, *, version: int, step: int, messages: Sequence[Message] = (),
                     usage: Sequence[ModelCallUsage] = (), ledger: Sequence[LedgerEntry] = (),
                     meta: Any = None) -> int:
        if self.kill == "after-child" and thread == "t" and any(
                m.kind == "tool-result" and m.call_id == "c1" for m in messages):
            _die()
        if self.kill == "before-approved-run" and thread == "t/c1" and any(
                e.status == "started" and e.tool == "delete_file" for e in ledger):
            _die()
        return await super().append(thread, version=version, step=step, messages=messages, usage=usage,
                                    ledger=ledger, meta=meta)


def _tree(db: str, kill: str, markers: Path, gated: bool) -> Agent:
    def mark(name: str) -> None:
        with open(markers, "a") as f:
            f.write(name + "\n")

    @tool
    def send(to: str) -> str:
        """Send a message (must never run twice)."""
        mark("send")
        if kill == "in-tool":
            _die()
        return f"sent to {to}"

    @tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        mark("delete_file")
        return f"deleted {path}"

    def research(messages: list[Any], info: Any) -> Any:
        last = messages[-1]
        if last.kind == "user":
            calls = [tool_call("send", to="ann", id="s1")]
            return [*calls, tool_call("delete_file", path="/tmp/x", id="d1")] if gated else calls
        if kill == "after-tool":
            _die()
        return "researched: " + "; ".join(m.content for m in messages if m.kind == "tool-result")

    def boss_model(messages: list[Any], info: Any) -> Any:
        last = messages[-1]
        return tool_call("researcher", task="go", id="c1") if last.kind == "user" else f"boss: {last.content}"

    researcher = Agent(FunctionModel(research), tools=[send, delete_file], name="researcher")
    return Agent(FunctionModel(boss_model), agents=[researcher], name="boss", store=_KillingStore(db, kill))


async def _child(mode: str, db: str, kill: str, markers: str) -> None:
    boss = _tree(db, kill, Path(markers), gated=mode != "run")
    if mode in ("run", "pause"):
        result = await boss.run("go", thread="t")
    elif mode == "approve":
        [p] = await boss.pending("t")
        result = await boss.resume(thread="t", approve=[p.id])
    else:
        result = await boss.resume(thread="t")
    print(json.dumps({"status": result.status, "output": result.output,
                      "pending": [p.id for p in result.pending]}), flush=True)
    await boss.store.close()


def _spawn(tmp: Path, mode: str, kill: str = "none") -> tuple[int, dict[str, Any] | None]:
    proc = subprocess.run(
        [sys.executable, __file__, mode, str(tmp / "t.db"), kill, str(tmp / "markers")],
        capture_output=True, text=True, timeout=120, cwd=tmp)
    out = proc.stdout.strip().splitlines()
    return proc.returncode, (json.loads(out[-1]) if out and out[-1].startswith("{") else None)


def _runs(tmp: Path) -> list[str]:
    path = tmp / "markers"
    return path.read_text().split() if path.exists() else []


async def _load(tmp: Path, thread: str) -> Any:
    store = SQLiteStore(tmp / "t.db")
    try:
        return await store.load(thread)
    finally:
        await store.close()


@pytest.mark.parametrize("kill", ["in-tool", "after-tool", "after-child"])
async def test_langgraph4796_kill_9_inside_a_child_and_resume_continues_its_own_step(
        tmp_path: Path, kill: str) -> None:
    code, _ = _spawn(tmp_path, "run", kill)
    assert code == -signal.SIGKILL
    assert _runs(tmp_path) == ["send"]
    code, out = _spawn(tmp_path, "resume")
    assert code == 0 and out is not None and out["status"] == "completed", out
    assert _runs(tmp_path) == ["send"]  # the child's tool never started again
    child = await _load(tmp_path, "t/c1")
    assert [m.kind for m in child.messages].count("user") == 1  # its own thread, continued
    [sent] = [m for m in child.messages if m.kind == "tool-result"]
    if kill == "in-tool":  # started, not known to have finished: the model is told so
        assert sent.status == "interrupted" and child.ledger["s1"].status == "interrupted"
        assert "interrupted" in out["output"]
    else:
        assert sent.content == "sent to ann" and child.ledger["s1"].status == "finished"
        assert out["output"] == "boss: researched: sent to ann"
    answers = [m for m in child.messages if m.kind == "assistant"]
    assert len(answers) == 2  # the tool call and the answer: no step made twice
    assert len(child.usage) == 2
    top = await _load(tmp_path, "t")
    assert top.ledger["c1"].status == "finished" and top.meta.status == "completed"


async def test_pr4414_restart_between_approval_and_run(tmp_path: Path) -> None:
    """The approval was stored with the top thread; the process died before the child ran the
    approved call. A resume from a new process, with no decision given again, runs it once."""
    code, out = _spawn(tmp_path, "pause")
    assert code == 0 and out is not None and out["status"] == "paused" and out["pending"] == ["c1/d1"]
    code, _ = _spawn(tmp_path, "approve", "before-approved-run")
    assert code == -signal.SIGKILL and _runs(tmp_path) == ["send"]
    top = await _load(tmp_path, "t")
    assert list(top.meta.decisions) == ["c1/d1"]
    code, out = _spawn(tmp_path, "resume")
    assert code == 0 and out is not None and out["status"] == "completed", out
    assert _runs(tmp_path) == ["send", "delete_file"]
    assert "deleted /tmp/x" in out["output"]
    top = await _load(tmp_path, "t")
    assert top.meta.decisions == {} and top.meta.pending == []
    code, out = _spawn(tmp_path, "resume")  # once more: nothing to resume, nothing runs
    assert code != 0 and _runs(tmp_path) == ["send", "delete_file"]


if __name__ == "__main__":
    asyncio.run(_child(*sys.argv[1:5]))
