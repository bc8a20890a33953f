"""Exactly-once across processes with an MCP tool: calls go through the same ledger as Python tools.

Three processes share one SQLite store and the real test server (tests/mcp_servers/kitchen.py):
the first pauses on two destructive calls; the second approves them and is killed while the
second call runs (the first has its result stored); the third resumes: it reconnects to a new
server process, runs neither call again (the finished one keeps its result, the interrupted one
is answered "interrupted"), and completes. The server's log counts what really ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nbagent.store import SQLiteStore

HERE = Path(__file__).parent
SCRIPT = HERE / "mcp_servers" / "resume_agent.py"
ROOT = HERE.parent


def _run(store: Path, env: dict[str, str], step: str) -> dict:
    out = subprocess.run([sys.executable, str(SCRIPT), str(store), "t-mcp", step], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ledger(store: Path) -> dict[str, str]:
    """The thread's ledger as another process sees it: tool name -> status."""
    loaded = asyncio.run(SQLiteStore(store).load("t-mcp"))
    return {entry.tool: entry.status for entry in loaded.ledger.values()} if loaded else {}


@pytest.mark.slow
def test_resume_after_a_killed_process_runs_no_call_twice(tmp_path: Path) -> None:
    store, log, pids = tmp_path / "threads.db", tmp_path / "log.txt", tmp_path / "pids.txt"
    env = {**os.environ, "KITCHEN_LOG": str(log), "KITCHEN_PIDS": str(pids), "PYTHONPATH": str(ROOT)}
    try:
        first = _run(store, env, "run")
        assert first["status"] == "paused" and first["results"] == []
        assert not log.exists()

        second = subprocess.Popen([sys.executable, str(SCRIPT), str(store), "t-mcp", "approve"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 90
        # both are recorded "started" before either runs; in order: write_note, then slow_write
        while _ledger(store) != {"write_note": "finished", "slow_write": "started"}:
            assert second.poll() is None, second.communicate()
            assert time.monotonic() < deadline, f"the approved calls did not run: {_ledger(store)}"
            time.sleep(0.2)
        time.sleep(0.5)  # slow_write is on the server now (it sleeps 20 s)
        second.send_signal(signal.SIGKILL)
        second.communicate(timeout=10)  # reaps it and closes its pipes

        third = _run(store, env, "continue")
        assert third["status"] == "completed"
        by_tool = {name: (status, content) for name, status, content in third["results"]}
        assert by_tool["write_note"] == ("done", "wrote 'once'")
        assert by_tool["slow_write"][0] == "interrupted"
        assert third["output"].startswith("done: wrote 'once' | interrupted")
        assert log.read_text().splitlines().count("once") == 1  # never run again
        assert "late" not in log.read_text().splitlines()  # the interrupted call was not run again
    finally:
        for pid in (pids.read_text().split() if pids.exists() else []):
            try:
                os.kill(int(pid), signal.SIGKILL)  # the killed process's server, still sleeping
            except ProcessLookupError:
                pass
