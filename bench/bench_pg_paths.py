"""The two ways `PostgresStore` sends the calls every run makes, side by side in one process.

    .venv/bin/python bench/bench_pg_paths.py [--quick] [--rounds N]

A load, an append and a run's start go through psycopg's own execute (the default) or, with
``PostgresStore(url, direct=True)``, to libpq directly (``nbagent/store/postgres/_libpq.py``);
``direct=True, prepare_threshold=0`` also prepares them on the server. This measures what that
choice is worth, on one private PostgreSQL cluster (tests/pgcluster.py: ``initdb`` + ``pg_ctl``
on a temporary folder and a free 127.0.0.1 port, as the ``postgres`` user when run as root),
started and stopped here, with one schema per store. The arms:

* ``plain``: ``PostgresStore(url)``, psycopg's execute;
* ``direct``: ``PostgresStore(url, direct=True)``;
* ``direct+prepared``: ``PostgresStore(url, direct=True, prepare_threshold=0)``;
* ``memory``: ``MemoryStore()``, for scale: the agent's own work, without a store.

What is timed, for each arm (the same instant ``FunctionModel`` and ``def`` tool as
bench_postgres.py and bench/run.py's S1/S2):

1. one call of each kind through the store's API (a load of a 10-message thread, an append of one
   message, a run's start on a new thread): wall time and the CPU time of the loop's thread, per
   call, in batches of 20;
2. S1, a tool round trip on a new thread (prompt, tool call, tool, answer: four calls to the
   server), wall and process CPU per run, blocks of 10 runs after one ``gc.collect()``;
3. S2, a 50-step tool loop (two calls to the server a step), wall and process CPU per step.

A round runs each measurement once for every arm, the arms in a new random order each round (a
busy spell of the machine hits all of them alike); the report gives each figure's median over
every sample and, in brackets, the lowest and highest of the round medians. Everything runs
twice: with the server's defaults (every commit waits for the disk's fsync, which is what a user
of a local server gets) and with ``synchronous_commit=off`` (left: the client's own work and
the round trips, where the two ways differ).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nbagent import Agent, tool  # noqa: E402
from nbagent.messages import AssistantMessage, UserMessage  # noqa: E402
from nbagent.models import FunctionModel, tool_call  # noqa: E402
from nbagent.store import MemoryStore, PostgresStore, Store  # noqa: E402
from tests.pgcluster import bench_cluster  # noqa: E402

BATCH = 20
"""Calls per timed batch (part 1)."""
BLOCK = 10
"""Round trips per block, after one collection (part 2), as bench/run.py's S1."""
LOOP = 50
"""Steps of the S2 loop (part 3)."""
ARMS = ("plain", "direct", "direct+prepared", "memory")


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return '{"status": "shipped"}'


class Arm:
    """One store and an agent on it."""

    def __init__(self, name: str, url: str, tag: str) -> None:
        self.name = name
        self.store: Store
        if name == "memory":
            self.store = MemoryStore()
        else:
            options: dict[str, Any] = {"direct": name != "plain"}
            if name == "direct+prepared":
                options["prepare_threshold"] = 0
            schema = f"paths_{tag}_{name.replace('+', '_')}"
            self.store = PostgresStore(url, schema=schema, **options)
        self.want, self.runs, self.version = 1, 0, 0

        def model(messages: list[Any], info: Any) -> Any:
            done = 0
            for m in reversed(messages):
                if m.kind == "user":
                    break
                done += m.kind == "tool-result"
            return tool_call("lookup", order=done) if done < self.want else "done"

        self.agent = Agent(FunctionModel(model), tools=[lookup], store=self.store, max_steps=10_000)

    async def run(self, steps: int, thread: str | None = None) -> None:
        self.want, self.runs = steps, self.runs + 1
        result = await self.agent.run("Check the orders.", thread=thread or f"run-{self.runs}")
        assert result.status == "completed", result.error

    async def prepare(self) -> None:
        await self.run(4, "load-10")  # prompt + 4 x (answer, result) + answer = 10 messages
        await self.store.append("appends", version=0, step=0, messages=[UserMessage("start")])
        self.version = 1

    async def load(self) -> None:
        assert await self.store.load("load-10") is not None

    async def append(self) -> None:
        self.version = await self.store.append("appends", version=self.version, step=self.version,
                                               messages=[AssistantMessage("x" * 200)])

    async def begin(self) -> None:
        self.runs += 1
        assert await self.store.create_or_load(f"begin-{self.runs}", messages=[UserMessage("hi")]) == 1


async def per_call(call: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """Wall and loop-thread CPU seconds per call, over one batch."""
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(BATCH):
        await call()
    return (time.perf_counter() - start) / BATCH, (time.thread_time() - cpu) / BATCH


async def round_trips(arm: Arm) -> list[tuple[float, float]]:
    gc.collect()
    out = []
    for _ in range(BLOCK):
        start, cpu = time.perf_counter(), time.process_time()
        await arm.run(1)
        out.append((time.perf_counter() - start, time.process_time() - cpu))
    return out


async def loop_steps(arm: Arm) -> tuple[float, float]:
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    await arm.run(LOOP)
    return (time.perf_counter() - start) / LOOP, (time.process_time() - cpu) / LOOP


async def measure(url: str, tag: str, rounds: int) -> dict[str, dict[str, list[list[float]]]]:
    """samples[arm][figure] = one list of samples per round."""
    arms = [Arm(name, url, tag) for name in ARMS]
    for arm in arms:
        await arm.prepare()
        await arm.run(3)  # warm: connections open, statements prepared where asked
    samples: dict[str, dict[str, list[list[float]]]] = {arm.name: {} for arm in arms}

    def add(k: int, arm: Arm, figure: str, values: list[float]) -> None:
        samples[arm.name].setdefault(figure, [[] for _ in range(rounds)])[k].extend(values)

    for k in range(rounds):
        order = random.sample(arms, len(arms))
        for arm in order:
            if arm.name != "memory":
                for kind in ("load", "append", "begin"):
                    wall, cpu = await per_call(getattr(arm, kind))
                    add(k, arm, f"{kind} wall", [wall])
                    add(k, arm, f"{kind} cpu", [cpu])
        for arm in order:
            got = await round_trips(arm)
            add(k, arm, "S1 wall", [w for w, _ in got])
            add(k, arm, "S1 cpu", [c for _, c in got])
        for arm in order:
            wall, cpu = await loop_steps(arm)
            add(k, arm, "S2 wall", [wall])
            add(k, arm, "S2 cpu", [cpu])
    for arm in arms:
        await arm.store.close()
    return samples


def summary(rounds: list[list[float]]) -> tuple[float, float, float]:
    """The median of every sample, and the lowest and highest round median."""
    medians = [statistics.median(r) for r in rounds if r]
    return statistics.median([x for r in rounds for x in r]), min(medians), max(medians)


FIGURES = ("load", "append", "begin", "S1", "S2")
LABELS = {"load": "load (10 msgs)", "append": "append (1 msg)", "begin": "run's start", "S1": "S1 round trip",
          "S2": "S2 per step"}


def report(samples: dict[str, dict[str, list[list[float]]]]) -> None:
    def cell(arm: str, figure: str) -> str:
        if figure not in samples[arm]:
            return "-"
        mid, low, high = summary(samples[arm][figure])
        return f"{mid * 1e3:.3f} ({low * 1e3:.3f} to {high * 1e3:.3f})"

    print("| ms (median, round medians' range) | " + " | ".join(ARMS) + " |")
    print("|---|" + "---:|" * len(ARMS))
    for figure in FIGURES:
        for what in ("wall", "cpu"):
            print(f"| {LABELS[figure]}, {what} | " + " | ".join(cell(arm, f"{figure} {what}") for arm in ARMS) + " |")
    print()
    for figure in FIGURES:
        for what in ("wall", "cpu"):
            plain = summary(samples["plain"][f"{figure} {what}"])[0]
            direct = summary(samples["direct"][f"{figure} {what}"])[0]
            prepared = summary(samples["direct+prepared"][f"{figure} {what}"])[0]
            print(f"{LABELS[figure]}, {what}: direct saves {(plain - direct) * 1e3:.3f} ms "
                  f"({(plain - direct) / plain:+.1%} of plain), direct+prepared {(plain - prepared) * 1e3:.3f} ms "
                  f"({(plain - prepared) / plain:+.1%})")
    step = summary(samples["plain"]["S2 wall"])[0] - summary(samples["direct"]["S2 wall"])[0]
    print(f"a durable step with a model answering in 0.2 s: direct saves {step * 1e3:.3f} ms, "
          f"{step / (0.2 + summary(samples['plain']['S2 wall'])[0]):.3%} of it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rounds = 4 if args.quick else args.rounds
    import psycopg

    with bench_cluster() as cluster:
        if cluster is None:
            return
        print(f"python {sys.version.split()[0]}, psycopg {psycopg.__version__} ({psycopg.pq.__impl__}), "
              f"PostgreSQL from {cluster.bin}, {rounds} rounds, load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores")
        for tag, title in (("a", "A. server defaults (each commit waits for the disk's fsync)"),
                           ("b", "B. synchronous_commit=off (the client's work and the round trips)")):
            if tag == "b":
                os.environ["PGOPTIONS"] = "-c synchronous_commit=off"  # libpq passes it to every connection
            print(f"\n{title}\n")
            report(asyncio.run(measure(cluster.url(), tag, rounds)))
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
