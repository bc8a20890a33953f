"""What a durable step can cost at least: the floor of one SQLite commit inside an agent run.

Issue 2 asks for S2 (per step of a 50-step tool loop) at 0.05x of the best peer, and the best
peers persist nothing. nbagent's default store commits twice per tool step (the answer with the
"started" ledger entries before the tool runs: exactly-once tools; the result before the next
model call: nothing lost). This bench measures how low any SQLite-backed design could go:

* ``tight``: one single-row INSERT commit (autocommit, WAL, synchronous=NORMAL, a ~500-byte row,
  the fastest shape a commit can have) in a tight loop: the textbook figure;
* ``in-run``: the S2 loop with ``MemoryStore`` plus that same single-row INSERT per append (what a
  hypothetical one-row-per-append store would cost), against ``MemoryStore`` alone and against the
  real default ``SQLiteStore``: the figure that counts, because between two commits the agent's own
  work evicts SQLite's code and pages from the CPU caches.

Run: ``.venv/bin/python bench/bench_commit_floor.py`` (about a minute; ``--quick``: 20 runs).
Prints CPU medians.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nbagent import Agent, Tool, ToolCall
from nbagent.models import FunctionModel
from nbagent.store import MemoryStore, SQLiteStore
from nbagent.store.meta import meta_record

STEPS = 50
RUNS = 20 if "--quick" in sys.argv else int(os.environ.get("BENCH_RUNS", "150"))
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def tight_floor(path: Path, n: int = 20_000) -> float:
    """CPU µs per single-row INSERT commit in a tight loop."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE log (thread TEXT, seq INTEGER, data TEXT, PRIMARY KEY (thread, seq)) WITHOUT ROWID")
    row = "x" * 490
    t = time.process_time()
    for i in range(n):
        conn.execute("INSERT INTO log VALUES (?, ?, ?)", (f"run_{i // 50:016d}", i, row))
    conn.close()
    return (time.process_time() - t) / n * 1e6


class OneRowStore(MemoryStore):
    """MemoryStore that also commits each append as one JSON row: the cheapest durable append."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute(
            "CREATE TABLE log (thread TEXT, seq INTEGER, data TEXT, PRIMARY KEY (thread, seq)) WITHOUT ROWID"
        )

    async def append(self, thread: str, *, version: int, step: int, messages: Any = (), usage: Any = (),
                     ledger: Any = (), meta: Any = None) -> int:
        record: dict[str, Any] = {"step": step, "messages": [m.to_dict() for m in messages]}
        if usage:
            record["usage"] = [[r.run_id, r.step, r.time, r.model, r.input_tokens, r.output_tokens] for r in usage]
        if ledger:
            record["ledger"] = [e.to_dict() for e in ledger]
        if meta is not None:
            record["meta"] = meta_record(meta)  # a ThreadMeta (or a dict) as its JSON record
        self.conn.execute("INSERT INTO log VALUES (?, ?, ?)", (thread, version + 1, _encode(record)))
        return await super().append(thread, version=version, step=step, messages=messages, usage=usage,
                                    ledger=ledger, meta=meta)


def s2_agent(store: Any) -> Agent:
    state = {"i": 0}

    async def answer(messages: Any, request: Any) -> Any:
        state["i"] += 1
        if state["i"] <= STEPS:
            return ToolCall(f"call_{state['i']}", "get_weather", '{"city": "Paris"}')
        state["i"] = 0
        return "It is sunny."

    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return f"Sunny in {city}"

    return Agent(FunctionModel(answer, model_name="scripted"), tools=[Tool.from_function(get_weather)],
                 max_steps=1000, store=store)


async def per_step(agents: dict[str, Agent]) -> dict[str, float]:
    """CPU µs per step (median of runs), the variants interleaved so machine noise hits all alike."""
    cpu: dict[str, list[float]] = {name: [] for name in agents}
    for agent in agents.values():
        for _ in range(10):
            await agent.run("What is the weather in Paris?")
    for _ in range(RUNS):
        for name, agent in agents.items():
            t = time.process_time()
            await agent.run("What is the weather in Paris?")
            cpu[name].append((time.process_time() - t) / (STEPS + 1) * 1e6)
    return {name: statistics.median(xs) for name, xs in cpu.items()}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tight = tight_floor(folder / "tight.db")
        agents = {
            "MemoryStore": s2_agent(MemoryStore()),
            "MemoryStore + 1-row INSERT per append": s2_agent(OneRowStore(folder / "onerow.db")),
            "SQLiteStore (the default)": s2_agent(SQLiteStore(folder / "threads.db")),
        }
        results = asyncio.run(per_step(agents))
    base = results["MemoryStore"]
    print(f"single-row INSERT commit, tight loop: {tight:.1f} µs CPU")
    print(f"S2 per step (CPU median of {RUNS} runs, {STEPS + 1} model calls each; 2 appends per step):")
    for name, value in results.items():
        extra = ""
        if name != "MemoryStore":
            extra = f"   (+{value - base:.0f} µs per step, {(value - base) / 2:.0f} per commit)"
        print(f"  {name:<40} {value:7.1f} µs{extra}")


if __name__ == "__main__":
    main()
