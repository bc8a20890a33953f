"""Benchmark `nbagent.models.replay`: what replaying a recorded run adds per step, and whether
matching stays flat as the recording grows.

    .venv/bin/python bench/bench_replay.py                 # 10-step run, 10 and 1,000 recorded calls
    .venv/bin/python bench/bench_replay.py --runs 60 --json out.json

The loop is run.py's S1/S2 loop on `MemoryStore` (an instant model calling one ``async def``
tool, then answering), here 10 steps long: nine tool calls, then the answer. Times are CPU time
of the thread running the loop (the run uses no other thread), so the machine's other work
counts less.

1. **Per step** (target: <= 1 ms on top of the loop). The same 10-step run, interleaved: with
   the instant `ScriptedModel` (the S1 memory-store loop), and with `replay(...)` answering
   from a recording of that run. The added cost is the median of the replayed run minus the
   median of the scripted one, over 10 steps.
2. **Flat matching** (target: <= 1.2x). The replayed run's median per step when the recording
   holds 10 recorded calls (that run only) and when it holds 1,000 (99 other 10-step runs
   too). Matching is by content: each request is hashed and looked up, so the recording's
   size should not matter. Loading the recording (`replay(...)` itself) is done before the
   run, and reported apart; a full garbage collection runs before every timed run (else the
   garbage of loading 1,000 recorded calls is collected inside the next run, which is the
   loading's cost, not matching's).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's nbagent

from nbagent import Agent, tool
from nbagent.models import ScriptedModel, record, replay, tool_call
from nbagent.store import MemoryStore

STEPS = 10
PER_STEP_TARGET_MS = 1.0
FLAT_TARGET = 1.2


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


def script() -> ScriptedModel:
    """Nine tool calls, then the answer: a 10-step run."""
    return ScriptedModel([*(tool_call("get_weather", city=f"City{i}") for i in range(STEPS - 1)), "It is sunny."])


async def recorded_store(runs: int) -> MemoryStore:
    """A store holding `runs` recorded 10-step runs; the first is thread ``t0``, prompt ``Weather? 0``."""
    store = MemoryStore()
    for i in range(runs):
        await Agent(record(script()), tools=[get_weather], store=store).run(f"Weather? {i}", thread=f"t{i}")
    return store


async def timed(agent: Agent, prompt: str) -> float:
    gc.collect()  # the garbage of building the replay model is not collected inside the timed run
    start = time.thread_time()  # CPU time: the machine's other work does not count
    result = await agent.run(prompt)
    elapsed = time.thread_time() - start
    assert result.status == "completed" and result.steps == STEPS, (result.status, result.error)
    return elapsed


async def measure(runs: int) -> dict[str, Any]:
    small, large = await recorded_store(1), await recorded_store(100)
    assert len(await small.recordings()) == STEPS and len(await large.recordings()) == 100 * STEPS
    loaded: dict[str, list[float]] = {"10": [], "1000": []}
    times: dict[str, list[float]] = {"scripted": [], "replay 10": [], "replay 1000": []}
    for i in range(runs + 5):  # the first 5 of each warm up
        base = Agent(script(), tools=[get_weather], store=MemoryStore())
        samples = {"scripted": await timed(base, "Weather? 0")}
        pair = [("10", small), ("1000", large)]
        for label, source in (pair if i % 2 else pair[::-1]):  # alternate which goes first
            start = time.perf_counter()
            model = replay(source)
            loaded[label].append(time.perf_counter() - start)
            samples[f"replay {label}"] = await timed(Agent(model, tools=[get_weather], store=MemoryStore()),
                                                     "Weather? 0")
            assert model.replayed == STEPS and not model.live
        if i >= 5:
            for key, value in samples.items():
                times[key].append(value)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "runs": runs, "steps": STEPS, "times": times, "medians_s": med,
        "load_median_s": {k: statistics.median(v) for k, v in loaded.items()},
        "scripted_per_step_ms": med["scripted"] / STEPS * 1000,
        "replay_per_step_ms": med["replay 10"] / STEPS * 1000,
        "added_per_step_ms": (med["replay 10"] - med["scripted"]) / STEPS * 1000,
        "flat_ratio": med["replay 1000"] / med["replay 10"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()
    out = asyncio.run(measure(args.runs))
    med, load = out["medians_s"], out["load_median_s"]
    print(f"| {STEPS}-step run, MemoryStore, median CPU of {args.runs} | ms per run | ms per step |")
    print("|---|---:|---:|")
    for name, value in med.items():
        print(f"| {name} | {value * 1000:.2f} | {value * 1000 / STEPS:.3f} |")
    added, flat = out["added_per_step_ms"], out["flat_ratio"]
    print(f"\nreplay adds {added:.3f} ms per step to the S1 memory-store loop "
          f"({'meets' if added <= PER_STEP_TARGET_MS else 'misses'} the <= {PER_STEP_TARGET_MS} ms target)")
    print(f"matching at 1,000 recorded calls vs 10: {flat:.2f}x "
          f"({'meets' if flat <= FLAT_TARGET else 'misses'} the <= {FLAT_TARGET}x target)")
    print(f"loading the recording (replay(store)): {load['10'] * 1000:.2f} ms for 10 calls, "
          f"{load['1000'] * 1000:.2f} ms for 1,000")
    if args.json:
        Path(args.json).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
