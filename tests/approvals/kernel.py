"""A second kernel, as a process: ``python tests/approvals/kernel.py MODE STORE THREAD ...``.

- ``pause STORE THREAD RUNS``: run "refund 42" on THREAD until it pauses; print ``paused <call id>``.
- ``approve STORE THREAD RUNS CALL_ID BARRIER NAME``: approve CALL_ID, as a person in another
  kernel would, but only once every kernel of the race has read the thread (each writes
  ``BARRIER/NAME`` after its first read and waits for the others'); print ``ended <status>`` or
  ``refused <error class>``.
- ``hang STORE THREAD RUNS CALL_ID``: approve CALL_ID with a refund that, once it has written its
  line, never returns (the parent kills this process there: a kernel that died inside the tool).

STORE is a SQLite file or a PostgreSQL URL (schema in ``NBAGENT_TEST_SCHEMA``). Every real run
of the refund tool appends a line to the file RUNS (`kit.Ledger`), whichever process ran it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # the child: make `nbagent` and `tests` importable
    sys.path.insert(0, str(ROOT))

from nbagent.store import PostgresStore, SQLiteStore, Store  # noqa: E402
from tests.approvals.kit import Ledger, once, tool_call  # noqa: E402

RACERS = 2


def open_store(spec: str, barrier: Path | None = None, name: str = "") -> Store:
    """The store of `spec`; with `barrier`, its first read waits until every racer has read."""
    base: Any = PostgresStore if spec.startswith("postgresql://") else SQLiteStore

    class Racing(base):  # type: ignore[misc, valid-type]
        read = False

        async def load(self, thread: str) -> Any:
            loaded = await super().load(thread)
            if barrier is not None and not self.read:
                self.read = True
                (barrier / name).touch()
                deadline = time.monotonic() + 60
                while len(list(barrier.iterdir())) < RACERS and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            return loaded

    if spec.startswith("postgresql://"):
        return Racing(spec, schema=os.environ["NBAGENT_TEST_SCHEMA"])  # type: ignore[no-any-return]
    return Racing(spec)  # type: ignore[no-any-return]


async def main(mode: str, spec: str, thread: str, runs: str, *rest: str) -> None:
    barrier = Path(rest[1]) if mode == "approve" else None
    store = open_store(spec, barrier, rest[2] if mode == "approve" else "")
    ledger = Ledger(Path(runs))
    if mode == "hang":
        write = ledger._write
        ledger._write = lambda line: (write(line), time.sleep(600))  # type: ignore[method-assign]
    agent = ledger.agent(once(tool_call("refund", order_id="42", amount=10.0)), store=store)
    try:
        if mode == "pause":
            result = await agent.run("refund 42", thread=thread)
            print("paused", result.pending[0].id, flush=True)
            return
        try:
            result = await agent.resume(thread=thread, approve=[rest[0]])
        except Exception as exc:
            print("refused", type(exc).__name__, flush=True)
        else:
            print("ended", result.status, flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
