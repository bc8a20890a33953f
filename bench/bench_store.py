"""Store benchmark: per-step cost of nbagent's SQLite store vs history length, and side by side
with LangGraph's SQLite checkpointer on the same 50-step tool loop.

Run in the peers venv (LangGraph must not enter the project's venv)::

    python3.11 -m venv bench/.venv-peers
    bench/.venv-peers/bin/pip install -e . langgraph langgraph-checkpoint-sqlite
    bench/.venv-peers/bin/python bench/bench_store.py [--quick]

Part 1 appends what the run loop appends for one step with one tool call (the model's answer +
usage row + meta, the ledger's ``started`` entry, the tool result + ledger ``finished``: three
transactions) to threads that already hold 10 / 100 / 1,000 / 10,000 messages.

Part 2 runs a 50-step loop (49 tool calls, then an answer) with an instant fake model, once per
framework with its SQLite checkpointer and once without persistence (nbagent: `MemoryStore`;
LangGraph: no checkpointer); "store µs / step" is the difference. Both write to a file in a
temporary folder; LangGraph is measured as it ships
(``synchronous=FULL``: an fsync per commit) and with ``synchronous=NORMAL`` like nbagent.
Without LangGraph installed, part 2 reports nbagent only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nbagent import Agent, tool
from nbagent.events import args_hash
from nbagent.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from nbagent.models import FunctionModel, tool_call
from nbagent.store import LedgerEntry, MemoryStore, SQLiteStore
from nbagent.usage import ModelCallUsage

STEPS = 50


# ---------------------------------------------------------------------- part 1
def meta(step: int) -> dict[str, Any]:
    return {
        "status": "running",
        "run_id": "run_bench",
        "thread_step": step,
        "pending": [],
        "decisions": {},
        "always_allowed": [],
        "state": None,
        "stop_reason": None,
        "error": None,
        "output": None,
        "truncated": False,
    }


def usage_row(thread: str, step: int) -> ModelCallUsage:
    return ModelCallUsage(
        "run_bench",
        thread,
        step,
        time.time(),
        "function",
        "bench",
        input_tokens=1200 + step,
        output_tokens=40,
        latency_s=0.4,
        finish_reason="tool_calls",
        tool_calls=1,
    )


async def prefill(store: SQLiteStore, thread: str, messages: int) -> tuple[int, int]:
    """A thread of `messages` messages (prompt, then answer/result pairs) in a few big appends."""
    batch: list[Any] = [UserMessage("Look up the orders of customer 42 and refund the late ones.")]
    version, step = 0, 0
    while len(batch) < messages:
        step += 1
        call = ToolCall.of("lookup", {"order": step})
        batch.append(AssistantMessage("Checking the next order.", [call], finish_reason="tool_calls"))
        batch.append(ToolResultMessage(call.id, "lookup", '{"status": "shipped", "days_late": 3}' * 3))
    batch = batch[:messages]
    for i in range(0, len(batch), 2000):
        version = await store.append(
            thread,
            version=version,
            step=step,
            messages=batch[i : i + 2000],
            usage=[usage_row(thread, s) for s in range(1, step + 1)] if i == 0 else [],
        )
    return version, step


async def one_step(store: Any, thread: str, version: int, step: int) -> int:
    """What the loop appends for one model answer with one tool call."""
    call = ToolCall.of("lookup", {"order": step})
    answer = AssistantMessage("Checking the next order.", [call], finish_reason="tool_calls", model="bench")
    version = await store.append(
        thread,
        version=version,
        step=step,
        messages=[answer],
        usage=[usage_row(thread, step)],
        meta=meta(step),
    )
    h = args_hash(call.args)
    version = await store.append(
        thread,
        version=version,
        step=step,
        ledger=[LedgerEntry(call.id, "lookup", h, "started")],
        meta=meta(step),
    )
    result = ToolResultMessage(call.id, "lookup", '{"status": "shipped", "days_late": 3}', duration_s=0.01)
    return await store.append(
        thread,
        version=version,
        step=step,
        messages=[result],
        ledger=[LedgerEntry(call.id, "lookup", h, "finished")],
    )


async def per_step_vs_length(
    folder: Path, sizes: list[int], threads: int, steps: int
) -> list[tuple[int, float]]:
    store = SQLiteStore(folder / "part1.db")
    heads: dict[int, list[tuple[str, int, int]]] = {}
    for size in sizes:
        heads[size] = []
        for k in range(threads):
            name = f"len{size}-{k}"
            version, step = await prefill(store, name, size)
            heads[size].append((name, version, step))
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    for k in range(threads):  # interleave sizes so machine noise hits them alike
        for size in sizes:
            name, version, step = heads[size][k]
            gc.collect()
            start = time.perf_counter()
            for i in range(steps):
                version = await one_step(store, name, version, step + 1 + i)
            samples[size].append((time.perf_counter() - start) / steps)
    await store.close()
    # The best batch: the machine's noise only ever adds time (as `timeit` advises).
    return [(size, min(samples[size])) for size in sizes]


# ---------------------------------------------------------------------- part 2
@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return '{"status": "shipped"}'


def nbagent_model(messages: list[Any], info: Any) -> Any:
    answers = sum(m.kind == "assistant" for m in messages)
    if answers < STEPS - 1:
        return tool_call("lookup", order=answers)
    return "done"


async def nbagent_loop(store_factory: Any, runs: int) -> list[float]:
    times = []
    for k in range(runs):
        store = store_factory(k)
        agent = Agent(FunctionModel(nbagent_model), tools=[lookup], store=store, max_steps=STEPS + 5)
        gc.collect()
        start = time.perf_counter()
        result = await agent.run("Check every order.", thread=f"loop-{k}")
        times.append((time.perf_counter() - start) / STEPS)
        assert result.status == "completed" and result.steps == STEPS, (result.status, result.steps)
        await store.close()
    return times


def langgraph_loop(saver_factory: Any, runs: int) -> list[float]:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool as lc_tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @lc_tool
    def lookup_lc(order: int) -> str:
        """Look an order up."""
        return '{"status": "shipped"}'

    def model(state: MessagesState) -> dict[str, Any]:
        answers = sum(isinstance(m, AIMessage) for m in state["messages"])
        if answers < STEPS - 1:
            call = {
                "name": "lookup_lc",
                "args": {"order": answers},
                "id": f"call_{answers}",
                "type": "tool_call",
            }
            return {"messages": [AIMessage("", tool_calls=[call])]}
        return {"messages": [AIMessage("done")]}

    times = []
    for k in range(runs):
        saver, close = saver_factory(k)
        graph = StateGraph(MessagesState)
        graph.add_node("agent", model)
        graph.add_node("tools", ToolNode([lookup_lc]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        app = graph.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"loop-{k}"}, "recursion_limit": 4 * STEPS}
        gc.collect()
        start = time.perf_counter()
        out = app.invoke({"messages": [HumanMessage("Check every order.")]}, config)
        times.append((time.perf_counter() - start) / STEPS)
        assert out["messages"][-1].content == "done" and len(out["messages"]) == 2 * STEPS
        close()
    del END
    return times


def langgraph_savers(folder: Path) -> dict[str, Any]:
    try:
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        return {}

    def sqlite_saver(synchronous: str | None) -> Any:
        def make(k: int) -> Any:
            conn = sqlite3.connect(folder / f"lg-{synchronous}-{k}.db", check_same_thread=False)
            if synchronous:
                conn.execute(f"PRAGMA synchronous = {synchronous}")
            return SqliteSaver(conn), conn.close

        return make

    return {
        "none": lambda k: (None, lambda: None),
        "memory": lambda k: (InMemorySaver(), lambda: None),
        "sqlite (as shipped)": sqlite_saver(None),
        "sqlite (synchronous=NORMAL)": sqlite_saver("NORMAL"),
    }


def median_us(times: list[float]) -> float:
    """The best run, in µs (noise from other processes only ever adds time)."""
    return min(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()
    threads, steps, runs = (3, 20, 3) if args.quick else (9, 40, 9)
    sizes = [10, 100, 1_000, 10_000]
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}")
    with tempfile.TemporaryDirectory(prefix="nbagent-bench-") as tmp:
        folder = Path(tmp)

        print("\n1. nbagent SQLiteStore: store cost of one loop step (3 appends) vs thread length")
        rows = asyncio.run(per_step_vs_length(folder, sizes, threads, steps))
        base = rows[0][1]
        print(f"{'messages':>10} | {'µs / step':>10} | {'vs 10 messages':>14}")
        for size, t in rows:
            print(f"{size:>10,} | {t * 1e6:>10.0f} | {t / base:>13.2f}x")

        print(f"\n2. the same {STEPS}-step tool loop (instant fake model), µs per step (best of {runs} runs)")
        nb_mem = median_us(asyncio.run(nbagent_loop(lambda k: MemoryStore(), runs)))
        nb_sql = median_us(asyncio.run(nbagent_loop(lambda k: SQLiteStore(folder / f"nb-{k}.db"), runs)))
        table = [("nbagent", "memory", nb_mem, None), ("nbagent", "sqlite", nb_sql, nb_sql - nb_mem)]
        savers = langgraph_savers(folder)
        lg: dict[str, float] = {}
        for name, factory in savers.items():
            lg[name] = median_us(langgraph_loop(factory, runs))
        for name, value in lg.items():
            table.append(
                ("langgraph", name, value, None if name in ("none", "memory") else value - lg["none"])
            )
        print(f"{'framework':>10} | {'checkpointer':<28} | {'µs / step':>10} | {'store µs / step':>15}")
        for fw, name, total, store in table:
            extra = "" if store is None else f"{store:>15.0f}"
            print(f"{fw:>10} | {name:<28} | {total:>10.0f} | {extra:>15}")
        if lg:
            for name in ("sqlite (as shipped)", "sqlite (synchronous=NORMAL)"):
                print(
                    f"nbagent sqlite / langgraph {name}: whole step {nb_sql / lg[name]:.2f}x, "
                    f"store part {(nb_sql - nb_mem) / (lg[name] - lg['none']):.2f}x"
                )
        else:
            print("(LangGraph is not installed in this venv: run in bench/.venv-peers for the comparison)")


if __name__ == "__main__":
    main()
