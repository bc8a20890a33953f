"""SQLiteStore hardening: concurrent opens, forks, lock waits and damaged rows.

Each test here was written to fail on a defect first: a healthy file reported as corrupt while
another process writes, concurrent first opens of a new file, forked children deadlocking on the
store's lock, the event loop frozen while SQLite waits for another process's lock, and damaged
rows surfacing as raw ``JSONDecodeError`` / ``KeyError`` (or being written over).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nbagent.exceptions import StoreCorruptError
from nbagent.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]


def python(code: str, *args: object, **kwargs: object) -> subprocess.Popen[str]:
    """`code` run by this interpreter in a new process, with the worktree's nbagent."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], cwd=ROOT, text=True, **kwargs  # type: ignore[call-overload]
    )


# ---------------------------------------------------------------------- opening while another process writes
_BIG_WRITER = """
import asyncio, sys, time
from nbagent.store import SQLiteStore
from nbagent.messages import UserMessage
async def main(path, seconds, size):
    s = SQLiteStore(path)
    v = await s.append("w", version=0, step=0, messages=[UserMessage("start")])
    print("ready", flush=True)
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        i += 1
        v = await s.append("w", version=v, step=i, messages=[UserMessage(str(i) * size)])
    await s.close()
asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
"""


@pytest.mark.slow
async def test_opening_while_another_process_writes_never_reports_corruption(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    writer = python(_BIG_WRITER, path, 4, 20_000, stdout=subprocess.PIPE)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    opens, failures = 0, []
    while writer.poll() is None:
        store = SQLiteStore(path)
        try:
            await store.threads()
        except StoreCorruptError as exc:
            failures.append(str(exc))
        finally:
            await store.close()
        opens += 1
    assert writer.wait() == 0
    writer.stdout.close()
    assert failures == [], f"{len(failures)} of {opens} opens failed, first: {failures[0]}"
    store = SQLiteStore(path)
    loaded = await store.load("w")
    assert loaded is not None and len(loaded.messages) > 10
    await store.close()
