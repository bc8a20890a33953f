"""PostgreSQL benchmark: nbagent's PostgresStore vs LangGraph with AsyncPostgresSaver, one server.

Run in the peers venv (LangGraph must not enter the project's venv; `make bench` runs it)::

    bench/.venv-peers/bin/python bench/bench_postgres.py [--quick]

Starts its own private PostgreSQL cluster (tests/pgcluster.py: ``initdb`` + ``pg_ctl`` on a
temporary folder and a free 127.0.0.1 port, as the ``postgres`` user when run as root; default
server settings, fsync on) and stops it at the end. Both frameworks get the same instant fake
model and the same tool and persist every step to that server; everything is measured twice,
with the server's defaults (each commit waits for the disk) and with ``synchronous_commit=off``
(what remains is the frameworks' own work and round trips). The two frameworks' runs are
interleaved (one nbagent run, then one LangGraph run, and so on), so a busy spell of the machine
hits both alike:

1. per tool round trip: prompt -> tool call -> tool -> answer, a new thread per run (wall time),
   timed as bench/run.py times S1 (blocks of 10 runs back to back after one ``gc.collect()`` per
   block; the median run), and after a pause (a ``gc.collect()`` before every run, as a run that
   follows a notebook cell's pause);
2. per durable step: a 50-step tool loop, time per step;
3. flat: the time per step inside a run of 20 more steps (first to last tool result; the run's
   start, which reads the thread once, is left out) on a thread that already holds 10 messages
   vs one that holds 1,000 (the goal: at most 1.2x).

nbagent runs ``Agent(FunctionModel, store=PostgresStore(url))`` (two commits per tool step: the
answer with the "started" ledger entry, then the result), three times: with the store's default
(psycopg's execute, no statement prepared on the server, which PgBouncer's transaction mode
needs), with ``direct=True`` (the calls every run makes sent to libpq directly) and with
``direct=True, prepare_threshold=0`` (also prepared on the server, the setting LangGraph's docs
give its connection); bench_pg_paths.py compares the first two more closely. LangGraph: a `StateGraph` with a
`ToolNode` compiled with ``AsyncPostgresSaver`` (``ainvoke``, a psycopg ``AsyncConnection`` as its
docs show) with ``durability="sync"``, so that both commit each step before the next starts
(LangGraph's default, ``"async"``, overlaps the write with the next step). Without LangGraph
installed only nbagent is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nbagent import Agent, tool  # noqa: E402
from nbagent.models import FunctionModel, tool_call  # noqa: E402
from nbagent.store import PostgresStore  # noqa: E402
from tests.pgcluster import bench_cluster  # noqa: E402

LOOP = 50
BLOCK = 10
"""Round trips per block (one collection before each block), as bench/run.py's blocks."""


def steps_wanted(messages: list[Any], human: type | str) -> int:
    """Tool results since the last prompt (so one model serves every scenario)."""
    done = 0
    for m in reversed(messages):
        if (m.kind == "user") if human == "user" else isinstance(m, human):  # type: ignore[arg-type]
            break
        if (m.kind == "tool-result") if human == "user" else getattr(m, "type", "") == "tool":
            done += 1
    return done


# ---------------------------------------------------------------------- nbagent
@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return '{"status": "shipped"}'


class NbagentRunner:
    def __init__(self, url: str, tag: str, direct: bool = False, prepare_threshold: int | None = None) -> None:
        self.store = PostgresStore(url, schema=f"bench_nbagent_{tag.lower()}", direct=direct,
                                   prepare_threshold=prepare_threshold)
        self.want = 1

        def model(messages: list[Any], info: Any) -> Any:
            done = steps_wanted(messages, "user")
            return tool_call("lookup", order=done) if done < self.want else "done"

        self.agent = Agent(FunctionModel(model), tools=[lookup], store=self.store, max_steps=10_000)

    async def run(self, thread: str, steps: int, prompt: str = "Check the orders.") -> None:
        self.want = steps
        result = await self.agent.run(prompt, thread=thread)
        assert result.status == "completed", result.error

    async def inner_steps(self, thread: str, steps: int, prompt: str) -> float:
        """Seconds per step between the first and the last tool result of a run (the run's start,
        which reads the thread, is left out)."""
        self.want = steps
        marks = []
        async for event in self.agent.stream(prompt, thread=thread):
            if event.kind == "tool-call-finished":
                marks.append(time.perf_counter())
        return (marks[-1] - marks[0]) / (len(marks) - 1)

    async def close(self) -> None:
        await self.store.close()


# ---------------------------------------------------------------------- LangGraph
class LangGraphRunner:
    def __init__(self, url: str) -> None:
        self.url = url
        self.want = 1
        self.durability = "sync"
        """Each step's checkpoint committed before the next step starts: nbagent's guarantee.
        (LangGraph's default, "async", writes it while the next step already runs.)"""

    async def open(self) -> None:
        from langchain_core.messages import AIMessage, HumanMessage
        from langchain_core.tools import tool as lc_tool
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition
        from psycopg import AsyncConnection
        from psycopg.rows import dict_row

        self.human = HumanMessage

        @lc_tool
        def lookup_lc(order: int) -> str:
            """Look an order up."""
            return '{"status": "shipped"}'

        def model(state: MessagesState) -> dict[str, Any]:
            done = steps_wanted(state["messages"], HumanMessage)
            if done < self.want:
                call = {"name": "lookup_lc", "args": {"order": done}, "id": f"call_{time.perf_counter_ns()}",
                        "type": "tool_call"}
                return {"messages": [AIMessage("", tool_calls=[call])]}
            return {"messages": [AIMessage("done")]}

        self.conn = await AsyncConnection.connect(self.url, autocommit=True, prepare_threshold=0,
                                                  row_factory=dict_row)
        saver = AsyncPostgresSaver(self.conn)  # type: ignore[arg-type]
        await saver.setup()
        graph = StateGraph(MessagesState)
        graph.add_node("agent", model)
        graph.add_node("tools", ToolNode([lookup_lc]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        self.app = graph.compile(checkpointer=saver)

    async def run(self, thread: str, steps: int, prompt: str = "Check the orders.") -> None:
        self.want = steps
        config = {"configurable": {"thread_id": thread}, "recursion_limit": 4 * steps + 10}
        out = await self.app.ainvoke({"messages": [self.human(prompt)]}, config, durability=self.durability)
        assert out["messages"][-1].content == "done"

    async def inner_steps(self, thread: str, steps: int, prompt: str) -> float:
        """Seconds per step between the first and the last tool update of a run."""
        self.want = steps
        config = {"configurable": {"thread_id": thread}, "recursion_limit": 4 * steps + 10}
        marks = []
        async for update in self.app.astream({"messages": [self.human(prompt)]}, config, stream_mode="updates",
                                             durability=self.durability):
            if "tools" in update:
                marks.append(time.perf_counter())
        return (marks[-1] - marks[0]) / (len(marks) - 1)

    async def close(self) -> None:
        await self.conn.close()


# ---------------------------------------------------------------------- measuring
async def timed(runner: Any, thread: str, steps: int, prompt: str = "Check the orders.") -> float:
    gc.collect()
    start = time.perf_counter()
    await runner.run(thread, steps, prompt)
    return time.perf_counter() - start


async def measure(runners: dict[str, tuple[Any, str]], runs: int, loops: int) -> dict[str, dict[str, float]]:
    """Every measurement of every framework, interleaved (one framework's run, then the other's),
    so that a busy spell of the machine hits both alike instead of skewing their ratio."""
    for runner, name in runners.values():
        await runner.run(f"{name}-warm", 3)
    samples: dict[str, dict[str, list[float]]] = {key: {} for key in runners}

    def add(key: str, what: str, value: float) -> None:
        samples[key].setdefault(what, []).append(value)

    # The round trip as bench/run.py times S1: blocks of runs back to back after one collection
    # per block, each run timed, the median of them all.
    for k in range(runs // BLOCK):
        for key, (runner, name) in runners.items():
            gc.collect()
            for j in range(BLOCK):
                start = time.perf_counter()
                await runner.run(f"{name}-rt-{k}-{j}", 1)
                add(key, "round_trip", time.perf_counter() - start)
    # After a pause: a collection before every run (as after a notebook cell's pause, or a model
    # call's wait: on this machine whatever follows a pause of a few ms runs 2-4x slower).
    for k in range(runs // 2):
        for key, (runner, name) in runners.items():
            add(key, "after_pause", await timed(runner, f"{name}-ap-{k}", 1))
    for k in range(loops):
        for key, (runner, name) in runners.items():
            add(key, "per_step", await timed(runner, f"{name}-loop-{k}", LOOP) / LOOP)
    # Flat: 20 more steps on a thread of 10 messages vs one of 1,000 (prefilled by the framework).
    for runner, name in runners.values():
        await runner.run(f"{name}-short", 4)  # prompt + 4 x (answer, result) + answer = 10 messages
        await runner.run(f"{name}-long", 499)  # prompt + 499 x 2 + answer = 1,000 messages
    for k in range(2 * loops):  # short and long interleaved too (twice as many: sub-ms steps are noisy)
        for key, (runner, name) in runners.items():
            gc.collect()
            add(key, "short", await runner.inner_steps(f"{name}-short", 20, f"more {k}"))
            gc.collect()
            add(key, "long", await runner.inner_steps(f"{name}-long", 20, f"more {k}"))
    return {
        key: {
            "round_trip": statistics.median(got["round_trip"]),
            "after_pause": statistics.median(got["after_pause"]),
            "per_step": statistics.median(got["per_step"]),
            "step_at_10": min(got["short"]),
            "step_at_1000": min(got["long"]),
        }
        for key, got in samples.items()
    }


DIRECT = "nbagent (direct=True)"
"""nbagent with the calls every run makes sent to libpq directly (the default: psycopg's execute)."""
PREPARED = "nbagent (direct, prepare_threshold=0)"
"""nbagent with statements prepared on the server, as LangGraph's connection is set up (its
docs: ``prepare_threshold=0``); the default prepares none (PgBouncer's transaction mode)."""


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


async def main_async(url: str, quick: bool, label: str) -> None:
    runs, loops = (20, 2) if quick else (120, 8)
    print(f"\n{label}")
    nb = NbagentRunner(url, label[0])
    nbd = NbagentRunner(url, label[0] + "d", direct=True)
    nbp = NbagentRunner(url, label[0] + "p", direct=True, prepare_threshold=0)
    runners: dict[str, tuple[Any, str]] = {"nbagent PostgresStore": (nb, "nb"), DIRECT: (nbd, "nbd"),
                                           PREPARED: (nbp, "nbp")}
    try:
        lg = LangGraphRunner(url)
        await lg.open()
    except ImportError:
        lg = None
        print("(LangGraph or langgraph-checkpoint-postgres is not installed: run in bench/.venv-peers)")
    if lg is not None:
        runners["LangGraph AsyncPostgresSaver"] = (lg, f"lg{label[0]}")
    results = await measure(runners, runs, loops)
    for runner in (nb, nbd, nbp):
        await runner.close()
    if lg is not None:
        await lg.close()
    print(f"{'framework':<36} | {'round trip':>11} | {'after a pause':>13} | {'per step (50)':>13} | "
          f"{'step @10 msgs':>13} | {'step @1,000':>12} | {'1,000 / 10':>10}")
    for name, r in results.items():
        print(f"{name:<36} | {ms(r['round_trip']):>11} | {ms(r['after_pause']):>13} | {ms(r['per_step']):>13} | "
              f"{ms(r['step_at_10']):>13} | "
              f"{ms(r['step_at_1000']):>12} | {r['step_at_1000'] / r['step_at_10']:>9.2f}x")
    lgr = results.get("LangGraph AsyncPostgresSaver")
    for name in ("nbagent PostgresStore", DIRECT, PREPARED):
        nbr = results[name]
        if lgr is not None:
            print(f"{name} / LangGraph: round trip {nbr['round_trip'] / lgr['round_trip']:.2f}x "
                  f"(after a pause {nbr['after_pause'] / lgr['after_pause']:.2f}x), "
                  f"per step {nbr['per_step'] / lgr['per_step']:.2f}x (goal <= 0.3x); ", end="")
        print(f"flat 10 -> 1,000 messages: {nbr['step_at_1000'] / nbr['step_at_10']:.2f}x (goal <= 1.2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()
    with bench_cluster() as cluster:
        if cluster is None:
            return
        print(f"python {sys.version.split()[0]}, PostgreSQL from {cluster.bin}, "
              f"private cluster on 127.0.0.1:{cluster.port}")
        asyncio.run(main_async(cluster.url(), args.quick,
                               "A. server defaults (every commit waits for its WAL fsync: this disk's cost)"))
        # libpq passes PGOPTIONS to every new connection: both frameworks' commits stop waiting
        # for the disk (a server crash could lose the last commits, never corrupt), so what is
        # left is each framework's own work and its round trips.
        os.environ["PGOPTIONS"] = "-c synchronous_commit=off"
        asyncio.run(main_async(cluster.url(), args.quick,
                               "B. synchronous_commit=off (the frameworks' own cost, without the disk)"))


if __name__ == "__main__":
    main()
