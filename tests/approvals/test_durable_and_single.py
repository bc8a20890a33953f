"""Class 6: approvals lost on restart, reload or in another process (openai-agents PR #4264;
ag-ui #1732).

What nbagent guarantees: a pending call lives in the store, not in a process; a new kernel (a new
process over the same store) lists it and shows it with live buttons that run it exactly once;
two kernels that approve the same call at the same moment cannot both run it: one runs it, the
other is refused. The real-browser counterpart (JupyterLab's own kernel restart, then Approve in
the reloaded view) is tests/browser/test_restart.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent.store import SQLiteStore

from .kit import Ledger, click, once, tool_call

ROOT = Path(__file__).resolve().parents[2]
KERNEL = Path(__file__).with_name("kernel.py")


async def kernel(*args: str) -> str:
    """Run tests/approvals/kernel.py in a new process (a second kernel); its last line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(sys.executable, str(KERNEL), *args, env=env, cwd=str(ROOT),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0 and out.strip(), err.decode()[-3000:]
    return out.decode().strip().splitlines()[-1]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store two processes share: a SQLite file, or a schema of the private PostgreSQL cluster."""
    if request.param == "postgres":
        monkeypatch.setenv("NBAGENT_TEST_SCHEMA", request.getfixturevalue("pg_schema"))
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "threads.db")


@pytest.mark.timeout(240)
async def test_openai_agents_4264_two_kernels_cannot_both_approve_one_call(store_spec: str, tmp_path: Path) -> None:
    """Two processes approve the same waiting call after both have read it as waiting: the tool
    runs once, one process completes the run and the other is refused with `ConflictError`.

    Catches: a store that lets the second writer through (checked by hand with the version check
    of ``SQLiteStore``'s thread update removed: both processes run the refund).
    """
    runs = tmp_path / "runs.txt"
    paused = await kernel("pause", store_spec, "race", str(runs))
    call_id = paused.split()[1]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    outs = await asyncio.gather(*(kernel("approve", store_spec, "race", str(runs), call_id, str(barrier), name)
                                  for name in ("kernel-a", "kernel-b")))
    assert sorted(outs) == ["ended completed", "refused ConflictError"]
    assert Ledger(runs).runs == ["refund 42 10"]


async def test_ag_ui_1732_a_waiting_call_survives_a_restart_with_live_buttons(tmp_path: Path) -> None:
    """A run pauses in another process (which then ends); a new kernel lists the waiting call and
    its view shows it with buttons that work: Approve runs it once. A view opened again after
    that shows no buttons.

    Catches: a pending call kept only in the process that paused (checked by hand with the view's
    load not showing the stored pending calls: no row, no button).
    """
    db = tmp_path / "threads.db"
    ledger = Ledger(tmp_path / "runs.txt")
    paused = await kernel("pause", str(db), "t", str(ledger.path))
    call_id = paused.split()[1]

    agent = ledger.agent(once(tool_call("refund", order_id="42", amount=10.0)), store=SQLiteStore(db))
    assert [p.id for p in await agent.pending("t")] == [call_id]
    view = agent.chat(thread="t")
    await view.wait_loaded()
    row = view.rows[call_id]
    assert row.status == "needs approval" and not row.buttons["Approve"].disabled
    await click(row.buttons["Approve"])
    done: Any = await view.wait()
    assert done.status == "completed" and ledger.runs == ["refund 42 10"]

    reopened = agent.chat(thread="t")
    await reopened.wait_loaded()
    assert reopened.rows == {} and "refunded 10 on 42" in reopened.history.value
