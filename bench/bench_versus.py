"""nbagent's core against an older commit of itself, side by side: run.py's S1 and S2 with MemoryStore.

    bench/.venv-peers/bin/python bench/bench_versus.py                  # against ab31faa (before wave 3)
    bench/.venv-peers/bin/python bench/bench_versus.py --quick          # a smoke run
    bench/.venv-peers/bin/python bench/bench_versus.py --commit main --rounds 12 --json out.json

The question (issue #46): does the core cost what it cost before wave 3 (sub-agents, guards,
approvals proven, the context gauge...), with every feature of this checkout on? The older commit
is checked out with ``git worktree add --detach`` into a temporary directory (removed at the end).
Each arm runs in its own long-lived worker process (this script with ``--worker``) whose
``sys.path`` puts its tree's ``nbagent`` first; both run this checkout's scenario code (bench/run.py's
S1 and S2, bench/peers_adapter.py's nbagent adapter with ``store=MemoryStore()``) against their
tree's package, so the old commit is measured on today's scenario, not on its own copy of it.
When the OpenAI Agents SDK is installed (the peers venv), a third worker runs the same scenarios
through it (run.py's ``openai_agents``, tracing on, as by default), so the ratio to the SDK comes
from the same run.

The workers are driven in rounds: each round, in a shuffled order, each worker times a block of
runs (process CPU time per run; the machine is shared, so CPU time, not wall time). The figure is
the median over all runs, with the spread of the rounds' medians beside it. Python calls per run
(cProfile's count of calls, Python functions and C functions alike, as run.py counts them) come
from one more pass in each worker: a count the machine's load does not move.

Goal (#46): this checkout at most 1.1x the old commit in CPU and Python calls, for S1 and S2.
Results: a markdown report on stdout and in bench/results/versus-<utc>.md, JSON beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
GOAL = 1.1
SCENARIOS = ("S1", "S2")
BLOCK = {"S1": 100, "S2": 5}  # runs per worker per round
CALL_RUNS = {"S1": 10, "S2": 1}


# ---------------------------------------------------------------------------------------------
# The worker: one process per arm, commands on stdin, one JSON line per answer on stdout.
# ---------------------------------------------------------------------------------------------
def load_harness() -> Any:
    """This checkout's bench/run.py (the scenarios, the framework builders, the call counter)."""
    spec = importlib.util.spec_from_file_location("nbagent_bench_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def worker(framework: str, tree: str | None) -> None:
    """Serve ``time S1 100`` / ``calls S2 1`` commands for one arm until stdin closes."""
    if tree:
        sys.path.insert(0, tree)
        import nbagent

        where = Path(nbagent.__file__).resolve().parent.parent
        assert where == Path(tree).resolve(), f"nbagent imported from {where}, not {tree}"
    harness = load_harness()
    loop = asyncio.new_event_loop()
    runners = {}
    for key in SCENARIOS:
        sc = harness.SCENARIOS[key]
        script = harness.Script(sc)
        fn = harness.FRAMEWORKS[framework].build(sc, script)
        for _ in range(sc.warmup):
            harness.check(sc, script, loop.run_until_complete(fn()), framework)
        runners[key] = (sc, script, fn)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        what, key, n = line.split()
        sc, script, fn = runners[key]
        if what == "calls":
            answer: Any = loop.run_until_complete(harness.count_python_calls(fn, int(n)))
        else:
            answer = []
            gc.collect()
            for _ in range(int(n)):
                c0 = time.process_time_ns()
                out = loop.run_until_complete(fn())
                answer.append((time.process_time_ns() - c0) / 1e3)
                harness.check(sc, script, out, framework)
        print(json.dumps(answer), flush=True)
    loop.close()


class Arm:
    """One worker process and what it measured."""

    def __init__(self, name: str, framework: str, tree: Path | None) -> None:
        self.name = name
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", framework]
        if tree is not None:
            cmd += ["--tree", str(tree)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.cpu: dict[str, list[float]] = {k: [] for k in SCENARIOS}
        self.rounds: dict[str, list[float]] = {k: [] for k in SCENARIOS}
        self.calls: dict[str, float] = {}
        self.ask_ready()

    def ask_ready(self) -> None:
        """Wait for the warm-up; a worker that cannot start is an error worth its traceback."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the worker exited (exit {self.proc.wait()})")

    def ask(self, what: str, key: str, n: int) -> Any:
        """Send one command, return its answer."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{what} {key} {n}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the worker exited (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        """End the worker (it exits when its stdin closes)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def old_tree(commit: str, into: Path) -> Path:
    """A detached worktree of `commit` under `into`."""
    path = into / f"nbagent-{commit}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), commit], check=True)
    return path


def has_openai_agents() -> bool:
    """Is the OpenAI Agents SDK importable here (the peers venv)?"""
    return importlib.util.find_spec("agents") is not None


def measure(arms: list[Arm], rounds: int, seed: int) -> None:
    """Interleave the arms' blocks in a shuffled order each round, then count calls once each."""
    rng = random.Random(seed)
    for r in range(rounds):
        for key in SCENARIOS:
            order = list(arms)
            rng.shuffle(order)
            for arm in order:
                times = arm.ask("time", key, BLOCK[key])
                arm.cpu[key] += times
                arm.rounds[key].append(statistics.median(times))
        print(f"  round {r + 1}/{rounds} done", flush=True)
    for arm in arms:
        for key in SCENARIOS:
            arm.calls[key] = arm.ask("calls", key, CALL_RUNS[key])


def report(arms: list[Arm], commit: str, head: str, rounds: int) -> tuple[str, dict[str, Any]]:
    """The markdown table and the JSON of one run."""
    by = {a.name: a for a in arms}
    new, old, sdk = by["this"], by["old"], by.get("openai_agents")
    lines = [
        f"# nbagent {head} against {commit}: run.py's S1 and S2 with MemoryStore",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.python_version()}, "
        f"{platform.machine()}, {rounds} rounds (S1 {BLOCK['S1']} runs a round, S2 {BLOCK['S2']}); "
        "CPU per run: median over all runs [range of the rounds' medians].",
        "",
        f"| | {commit} | {head} | new / old (goal <= {GOAL}x) |"
        + (" OpenAI Agents SDK | new / SDK | old / SDK |" if sdk else ""),
        "|---|---|---|---|" + ("---|---|---|" if sdk else ""),
    ]
    data: dict[str, Any] = {"commit": commit, "head": head, "rounds": rounds, "arms": {}}

    def cell(arm: Arm, key: str) -> str:
        rs = arm.rounds[key]
        return f"{statistics.median(arm.cpu[key]):,.0f} µs [{min(rs):,.0f}-{max(rs):,.0f}]"

    for key in SCENARIOS:
        med = {a.name: statistics.median(a.cpu[key]) for a in arms}
        row = f"| {key} CPU | {cell(old, key)} | {cell(new, key)} | **{med['this'] / med['old']:.2f}x** |"
        if sdk:
            peer = med["openai_agents"]
            row += f" {cell(sdk, key)} | {med['this'] / peer:.3f}x | {med['old'] / peer:.3f}x |"
        lines.append(row)
        row = (
            f"| {key} Python calls | {old.calls[key]:,.0f} | {new.calls[key]:,.0f} | "
            f"**{new.calls[key] / old.calls[key]:.2f}x** |"
        )
        if sdk:
            peer = sdk.calls[key]
            row += f" {peer:,.0f} | {new.calls[key] / peer:.3f}x | {old.calls[key] / peer:.3f}x |"
        lines.append(row)
    for a in arms:
        data["arms"][a.name] = {
            k: {"cpu_us_median": statistics.median(a.cpu[k]), "round_medians": a.rounds[k], "py_calls": a.calls[k]}
            for k in SCENARIOS
        }
    return "\n".join(lines) + "\n", data


def git_head() -> str:
    """This checkout's short commit, with a + when its tree has changes."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "nbagent"], capture_output=True, text=True)
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    """Check out the old commit, run both arms (and the SDK's) interleaved, print the report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commit", default="ab31faa", help="the older commit (default ab31faa, before wave 3)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="2 rounds")
    p.add_argument("--no-peer", action="store_true", help="leave out the OpenAI Agents SDK")
    p.add_argument("--seed", type=int, default=46)
    p.add_argument("--json", type=Path)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--tree", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.tree)
        return 0
    rounds = 2 if args.quick else args.rounds
    head = git_head()
    arms: list[Arm] = []
    with tempfile.TemporaryDirectory(prefix="nbagent-versus-") as tmp:
        tree = old_tree(args.commit, Path(tmp))
        try:
            arms.append(Arm("old", "nbagent_mem", tree))
            arms.append(Arm("this", "nbagent_mem", ROOT))
            if not args.no_peer and has_openai_agents():
                arms.append(Arm("openai_agents", "openai_agents", None))
            print(f"arms: {', '.join(a.name for a in arms)}; {rounds} rounds", flush=True)
            measure(arms, rounds, args.seed)
        finally:
            for arm in arms:
                arm.close()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    text, data = report(arms, args.commit, head, rounds)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (RESULTS / f"versus-{stamp}.md").write_text(text)
    (args.json or RESULTS / f"versus-{stamp}.json").write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
