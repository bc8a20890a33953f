"""Does a step cost more as the thread grows? A 1,000-step tool loop, a step at 10 vs a step at 1,000.

    .venv/bin/python bench/bench_growth.py              # 5 runs of each arm, ~2 minutes on 2 busy cores
    .venv/bin/python bench/bench_growth.py --quick      # 1 run of each arm
    .venv/bin/python bench/bench_growth.py --runs 9 --steps 1000 --json out.json
    .venv/bin/python bench/bench_growth.py --source /tmp/main-copy   # another checkout (e.g. main)

The loop (issue #46): an instant `FunctionModel` calls one ``async def`` tool 1,000 times, then
answers; the tool returns 200 characters. One run is one thread of 2,002 messages. A step is
the time from one model call to the next (the answer committed, the tool run, its result
committed, the next request built and sized), measured in the model's function as process CPU
time (all threads; the machine is shared, so CPU time, not wall time). "At 10" is the median of
steps 6-15, "at 1,000" the median of steps 991-1,000; the figure is their ratio (goal: at most
1.5x), the median over runs.

Arms, interleaved in a shuffled order each round: the two stores (`MemoryStore()` and the
default SQLite store in a scratch folder), each with the context bookkeeping's running sums
(the default) and with its plain path (``NBAGENT_CONTEXT_CACHE=0``: every request walks the
whole thread, as before issue #46; the switch is read when a run starts, so the arms share a
process). Beside the times, the Python calls of a step (function calls and calls into C, from
``sys.setprofile``) at 10 and at 1,000 steps, from one more run of each arm: a count the
machine's load does not move.

Results: a markdown report on stdout and in bench/results/growth-<utc>.md, JSON beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
Agent = Tool = ToolCall = FunctionModel = MemoryStore = _view = None  # set by `use`


def use(source: Path) -> None:
    """Import nbagent from the checkout `source` (this one by default; ``--source`` measures
    another, e.g. main before issue #46, where there is no switch and only the plain arms run)."""
    global Agent, Tool, ToolCall, FunctionModel, MemoryStore, _view
    sys.path.insert(0, str(source))
    import nbagent
    from nbagent import Agent, Tool, ToolCall
    from nbagent.models import FunctionModel
    from nbagent.store import MemoryStore

    assert Path(nbagent.__file__).resolve().parent.parent == source.resolve(), nbagent.__file__
    try:
        from nbagent.context import _view
    except ImportError:
        _view = None

GOAL = 1.5
RESULT = ("It is sunny in Paris, 21 degrees, light wind from the west. " * 4)[:200]
EARLY = slice(5, 15)  # steps 6-15
LATE = 10  # the last 10 steps


class Stamps:
    """The model's function: a tool call until `steps` were made, then the answer; it notes the
    CPU time (and, when counting, the profiler's count) at each call."""

    def __init__(self, steps: int, counter: Callable[[], int] | None = None) -> None:
        self.steps, self.counter = steps, counter
        self.cpu: list[int] = []
        self.calls: list[int] = []

    def __call__(self, messages: Any, request: Any) -> Any:
        self.cpu.append(time.process_time_ns())
        if self.counter is not None:
            self.calls.append(self.counter())
        if len(self.cpu) <= self.steps:
            return ToolCall(f"call_{len(self.cpu)}", "get_weather", '{"city": "Paris"}')
        return "It is sunny."


async def get_weather(city: str) -> str:
    """The weather in a city."""
    return RESULT


async def one_run(store: str, cached: bool, steps: int, counter: Callable[[], int] | None = None) -> Stamps:
    """One thread of `steps` tool steps on `store` ("memory" or "sqlite"), `cached` or not."""
    stamps = Stamps(steps, counter)
    old = _view.CACHED if _view is not None else False
    if _view is not None:
        _view.CACHED = cached
    try:
        options: dict[str, Any] = {"store": MemoryStore()} if store == "memory" else {}
        agent = Agent(FunctionModel(stamps), tools=[Tool.from_function(get_weather)], max_steps=steps + 10, **options)
        result = await agent.run("What is the weather in Paris?")
    finally:
        if _view is not None:
            _view.CACHED = old
    assert result.status == "completed" and result.output == "It is sunny.", (result.status, result.error)
    assert len(result.messages) == 2 * steps + 2
    return stamps


def per_step(values: list[int]) -> tuple[float, float]:
    """(step at 10, step at the end): medians of the steps' differences."""
    steps = [b - a for a, b in itertools.pairwise(values)]
    return statistics.median(steps[EARLY]), statistics.median(steps[-LATE:])


async def count_calls(store: str, cached: bool, steps: int) -> tuple[float, float]:
    """Python calls of a step at 10 and at the end (one run under ``sys.setprofile``)."""
    n = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event == "call" or event == "c_call":
            n += 1

    sys.setprofile(profile)
    try:
        stamps = await one_run(store, cached, steps, lambda: n)
    finally:
        sys.setprofile(None)
    return per_step(stamps.calls)


ARMS = [("memory", True), ("sqlite", True), ("memory", False), ("sqlite", False)]


def arm_name(store: str, cached: bool) -> str:
    if _view is None:  # a checkout before issue #46: one path
        return "MemoryStore" if store == "memory" else "SQLite (default)"
    return f"{'MemoryStore' if store == 'memory' else 'SQLite (default)'}, {'running sums' if cached else 'plain path'}"


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, then `args.runs` rounds of every arm in a shuffled order, then the call counts."""
    arms = [a for a in ARMS if (args.plain or a[1]) and (_view is not None or not a[1])]
    times: dict[tuple[str, bool], list[tuple[float, float]]] = {a: [] for a in arms}
    for store, cached in arms:  # imports, the SQLite file, first-call caches
        await one_run(store, cached, 20)
    rng = random.Random(args.seed)
    for round_ in range(args.runs):
        order = list(arms)
        rng.shuffle(order)
        for store, cached in order:
            gc.collect()
            stamps = await one_run(store, cached, args.steps)
            times[(store, cached)].append(per_step(stamps.cpu))
        print(f"  round {round_ + 1}/{args.runs} done", flush=True)
    out: dict[str, Any] = {}
    for arm in arms:
        early = [e / 1e3 for e, _ in times[arm]]
        late = [v / 1e3 for _, v in times[arm]]
        ratios = [b / a for a, b in zip(early, late, strict=True)]
        calls = await count_calls(*arm, args.steps) if args.calls else None
        out[arm_name(*arm)] = {"store": arm[0], "cached": arm[1], "early_us": early, "late_us": late,
                               "ratios": ratios, "calls_per_step": calls}
    return out


def report(results: dict[str, Any]) -> str:
    """The markdown report."""
    meta = results["meta"]
    lines = [f"## bench_growth.py ({meta['date_utc']}, load {meta['load']}, {meta['steps']:,} steps, "
             f"{meta['runs']} runs of each arm, nbagent from {meta['source']})", "",
             "| arm | CPU a step at 10 | at 1,000 | at 1,000 / at 10 (median of runs, range) | goal "
             "| Python calls a step at 10 / at 1,000 |", "|---|---:|---:|---:|---|---:|"]
    for name, r in results["arms"].items():
        ratio = statistics.median(r["ratios"])
        goal = (f"<= {GOAL}x " + ("yes" if ratio <= GOAL else "NO")) if r["cached"] else "-"
        calls = r["calls_per_step"]
        early, late = statistics.median(r["early_us"]), statistics.median(r["late_us"])
        lines.append(f"| {name} | {early:,.0f} µs | {late:,.0f} µs "
                     f"| {ratio:.2f}x ({min(r['ratios']):.2f}-{max(r['ratios']):.2f}) | {goal} "
                     f"| {f'{calls[0]:,.0f} / {calls[1]:,.0f}' if calls else '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run in a scratch folder (the default store lives in ./.nbagent/), print and write the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one run of each arm")
    ap.add_argument("--runs", type=int, default=None, help="runs of each arm (default 5, --quick 1)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--no-plain", dest="plain", action="store_false", help="leave out the plain path's arms")
    ap.add_argument("--no-calls", dest="calls", action="store_false", help="do not count the Python calls")
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--source", type=Path, default=BENCH.parent,
                    help="the checkout whose nbagent is measured (default: this one)")
    ap.add_argument("--json", default=None, help="result file (default bench/results/growth-<utc>.json)")
    args = ap.parse_args(argv)
    args.runs = args.runs or (1 if args.quick else 5)
    use(args.source)
    os.environ.pop("NBAGENT_STORE", None)
    scratch = tempfile.mkdtemp(prefix="nbagent-growth-")
    cwd = os.getcwd()
    os.chdir(scratch)
    t0 = time.perf_counter()
    try:
        arms = asyncio.run(amain(args))
    finally:
        os.chdir(cwd)
        shutil.rmtree(scratch, ignore_errors=True)
    results = {"meta": {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "python": platform.python_version(), "platform": platform.platform(terse=True),
                        "cpus": os.cpu_count(), "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                        "steps": args.steps, "runs": args.runs, "source": str(args.source),
                        "seconds": round(time.perf_counter() - t0, 1),
                        "argv": sys.argv[1:]}, "arms": arms}
    text = report(results)
    print()
    print(text)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.json) if args.json else BENCH / "results" / f"growth-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    out.with_suffix(".md").write_text(text)
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
