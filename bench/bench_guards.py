"""Benchmark the guards (`nbagent.guards`, issue #45): what three allow-all guards add to a tool
round trip, and what holding a streamed answer costs per delta.

    .venv/bin/python bench/bench_guards.py                # 3,000 round trips of each, 12 streams of 10,000 deltas
    .venv/bin/python bench/bench_guards.py --runs 100 --json out.json

1. **Round trip** (target: <= 1.1x). run.py's S1 on `MemoryStore`: an instant scripted model asks
   for ``get_weather``, an ``async def`` tool, then answers. The same run with no guards, and with
   three guards that allow everything: one on the prompt (``Guard.input``), one on the call's
   arguments (``Guard.tool_args``), one on the answer (``Guard.output``). Each guard is asked
   once per run. Measured twice: plain ``def`` checks and ``async def`` checks. Each agent is made
   once and run again and again (as run.py's adapter does). In each round every kind runs once,
   in a shuffled order; the garbage collector is off while a run is timed (collected between
   rounds); the figure is the median CPU time of the thread running the loop (the run uses no
   other thread), so the machine's other work counts less.
2. **Held stream** (target: no CPU per delta beyond a list append). run.py's S5: one answer of
   10,000 text deltas from an instant streaming model, consumed through ``agent.stream`` event by
   event: with no guard (every delta becomes a ``text-delta`` event), and with an output guard
   that allows it (the deltas are held: one list append each; then one ``text-delta`` with the
   whole text). CPU per delta of the whole run, and two floors: the model's stream read alone
   (its items consumed in a bare loop, no agent), and 10,000 appends to a list.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's nbagent

from nbagent import Agent, tool
from nbagent.guards import Guard
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import MemoryStore

ROUND_TRIP_TARGET = 1.1
DELTAS = 10_000


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny, 22 C in {city}"


def allow(value: Any) -> None:
    return None


async def allow_async(value: Any) -> None:
    return None


def three(check: Callable[[Any], Any]) -> list[Guard]:
    return [Guard.input(check, name="in"), Guard.tool_args(check, name="args"), Guard.output(check, name="out")]


KINDS: dict[str, list[Guard]] = {"none": [], "3 sync": three(allow), "3 async": three(allow_async)}


def round_trip_agent(guards: list[Guard]) -> Agent:
    """One agent per kind, made once and run again and again (as run.py's adapter does): a new
    thread per run."""
    model = ScriptedModel([tool_call("get_weather", city="Paris"), "It is sunny."])
    return Agent(model, tools=[get_weather], guards=guards, store=MemoryStore())


async def timed_round_trip(agent: Agent) -> float:
    agent.model.reset()  # type: ignore[attr-defined]
    start = time.thread_time()
    result = await agent.run("Weather in Paris?")
    elapsed = time.thread_time() - start
    assert result.status == "completed" and result.steps == 2, (result.status, result.error)
    assert len(result.guard_checks) == len(agent.guards)
    return elapsed


def streaming_model() -> FunctionModel:
    words = [f"w{i} " for i in range(DELTAS)]

    async def stream(messages: list[Any], request: Any) -> Any:
        for word in words:
            yield word

    return FunctionModel(stream_function=stream)


async def timed_stream(guards: list[Guard]) -> float:
    agent = Agent(streaming_model(), guards=guards, store=MemoryStore())
    gc.collect()
    start = time.thread_time()
    n = 0
    text = ""
    async for event in agent.stream("Talk."):
        n += 1
        if event.kind == "text-delta":
            text = event.snapshot  # type: ignore[union-attr]
    elapsed = time.thread_time() - start
    assert len(text) > DELTAS and n >= 4
    return elapsed


async def stream_floor() -> float:
    """The model's stream alone: its items consumed in a bare loop (what any agent pays)."""
    from nbagent.messages import UserMessage
    from nbagent.models.base import ModelRequest

    model = streaming_model()
    request = ModelRequest([UserMessage("Talk.")], [], {}, 1)
    best = float("inf")
    for _ in range(5):
        gc.collect()
        start = time.thread_time()
        async for _item in model.request_stream(request):
            pass
        best = min(best, time.thread_time() - start)
    return best


def append_floor() -> float:
    words = [f"w{i} " for i in range(DELTAS)]
    best = float("inf")
    for _ in range(20):
        parts: list[str] = []
        start = time.thread_time()
        for word in words:
            parts.append(word)
        best = min(best, time.thread_time() - start)
    return best


async def measure(runs: int, streams: int) -> dict[str, Any]:
    trips: dict[str, list[float]] = {k: [] for k in KINDS}
    agents = list({name: round_trip_agent(guards) for name, guards in KINDS.items()}.items())
    shuffle = random.Random(45).shuffle
    gc.disable()
    try:
        for i in range(runs + 100):  # the first 100 rounds warm up
            shuffle(agents)
            for name, agent in agents:
                value = await timed_round_trip(agent)
                if i >= 100:
                    trips[name].append(value)
            if i % 50 == 0:
                gc.collect()
    finally:
        gc.enable()
    held: dict[str, list[float]] = {"none": [], "output guard": []}
    for i in range(streams + 2):
        pair = [("none", []), ("output guard", [Guard.output(allow)])]
        for name, guards in (pair if i % 2 else pair[::-1]):
            value = await timed_stream(guards)
            if i >= 2:
                held[name].append(value)
    trip_med = {k: statistics.median(v) for k, v in trips.items()}
    held_med = {k: statistics.median(v) for k, v in held.items()}
    return {
        "runs": runs, "streams": streams, "round_trip_s": trips, "stream_s": held,
        "round_trip_median_us": {k: v * 1e6 for k, v in trip_med.items()},
        "round_trip_ratio": {k: v / trip_med["none"] for k, v in trip_med.items()},
        "per_delta_us": {k: v / DELTAS * 1e6 for k, v in held_med.items()},
        "append_per_delta_us": append_floor() / DELTAS * 1e6,
        "model_per_delta_us": await stream_floor() / DELTAS * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--streams", type=int, default=12)
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()
    out = asyncio.run(measure(args.runs, args.streams))
    med, ratio = out["round_trip_median_us"], out["round_trip_ratio"]
    print(f"| S1 round trip, MemoryStore, median CPU of {args.runs} | µs | x no guards |")
    print("|---|---:|---:|")
    for name in KINDS:
        print(f"| {name} | {med[name]:,.0f} | {ratio[name]:.3f} |")
    worst = max(ratio[k] for k in KINDS if k != "none")
    print(f"\nthree allow-all guards: {worst:.3f}x the round trip without guards "
          f"({'meets' if worst <= ROUND_TRIP_TARGET else 'misses'} the <= {ROUND_TRIP_TARGET}x target)")
    per = out["per_delta_us"]
    print(f"\n| S5 {DELTAS:,} deltas, median CPU of {args.streams} | µs per delta |")
    print("|---|---:|")
    print(f"| no guard (a text-delta event each) | {per['none']:.2f} |")
    print(f"| output guard (held: one list append each) | {per['output guard']:.2f} |")
    print(f"| floor: the model's stream read alone | {out['model_per_delta_us']:.2f} |")
    print(f"| floor: a list append | {out['append_per_delta_us']:.3f} |")
    above = per["output guard"] - out["model_per_delta_us"]
    print(f"\nheld, a delta costs {above:.2f} µs above the model's own stream (a list append is "
          f"{out['append_per_delta_us']:.3f} µs; the rest is the run's per-answer work spread over the deltas); "
          f"shown, {per['none'] - out['model_per_delta_us']:.2f} µs")
    if args.json:
        Path(args.json).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
