"""Benchmark ``agent.map(..., batch_api=True)`` against a live ``agent.map`` of the same rows.

    .venv/bin/python bench/bench_batch_api.py                # 1,000 two-step rows; memory at 2, 4, 8 steps
    .venv/bin/python bench/bench_batch_api.py --quick        # 200 rows; memory at 2 and 4 steps

Each row is a two-step conversation: the model calls a tool (``lookup(row)``), the tool answers,
the model answers in text. Live, the model is the scripted OpenAI-compatible server of the tests
(``tests/wire/scripted_server.py``, instant answers) and the map runs at concurrency 32; through
the batch API, it is the loopback batch server (``tests/wire/batch_server.py``, every batch ended
at its first retrieve), one batch per round. Both servers run in processes of their own; each
map gets a fresh SQLite store, and a small warm-up map runs first (imports, connections).

Reported: nbagent's own CPU (this process: user + system; the servers left out) per row and
round, i.e. per model step of a row: building the request (live: sending it through the SDK; batch:
its JSONL line), applying the answer as a step, running the tool, committing. Goal: the batch
path <= 2x the live path. Then memory: rows of 2, 4 and 8 steps (2, 4, 8 rounds) through the
batch path, the peak Python memory of the map (tracemalloc) per row and per round, beside the
same rows mapped live: the rounds keep nothing from one round to the next (the record in the
store drops what was taken), so what grows with the rounds is the conversation itself, as it does
live. Results: a markdown table on stdout and JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOAL = 2.0
STEPS_VAR = "NBAGENT_BENCH_STEPS"


def responder(request: Any) -> Any:
    """The batch server's answers (``--responder bench.bench_batch_api:responder``): the row's
    tool until the conversation holds ``$NBAGENT_BENCH_STEPS - 1`` tool results, then the answer."""
    from tests.wire.batch_answers import Text, ToolCall

    steps = int(os.environ.get(STEPS_VAR, "2"))
    if request.step < steps - 1:
        return ToolCall("lookup", {"row": f"{request.prompt} #{request.step}"})
    return Text(f"answer to {request.prompt}")


def lookup(row: str) -> str:
    """Look the row up.

    Args:
        row: the row's question.
    """
    return f"found {row}"


def start(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"{args[0]} did not start: {line!r}")
    return proc, int(line.split()[1])


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


def make_agent(base_url: str, store: Path) -> Any:
    from nbagent import Agent
    from nbagent.models.openai import OpenAIModel

    model = OpenAIModel("gpt-4o-mini", base_url=base_url, api_key="sk-bench")
    return Agent(model, tools=[lookup], store=str(store), max_steps=50)


def timed(agent: Any, rows: list[str], prefix: str, batch: bool, memory: bool = False,
          concurrency: int = 32) -> dict[str, Any]:
    options: dict[str, Any] = {"thread_prefix": prefix, "progress": False}
    if batch:
        options.update(batch_api=True, poll_s=0.01)
    else:
        options.update(concurrency=concurrency)
    gc.collect()
    if memory:
        tracemalloc.start()
    cpu, wall = time.process_time(), time.perf_counter()
    frame = agent.map(rows, **options)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = 0
    if memory:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    done = int((frame["status"] == "completed").sum())
    if done != len(rows):
        raise RuntimeError(f"{len(rows) - done} rows did not complete: {frame['error'].dropna().head(3).tolist()}")
    steps = int(frame["steps"].sum())
    return {"rows": len(rows), "steps": steps, "cpu_s": cpu, "wall_s": wall, "peak_bytes": peak,
            "cpu_ms_per_step": cpu / steps * 1000, "frame_bytes": int(frame.memory_usage(deep=True).sum())}


def speed(rows_n: int, workdir: Path) -> dict[str, Any]:
    """CPU per row and round, live and through the batch API (two-step rows)."""
    rows = [f"question {i}" for i in range(rows_n)]
    warm = [f"warm-up {i}" for i in range(32)]
    live, live_port = start(["tests/wire/scripted_server.py"])
    batch, batch_port = start(["tests/wire/batch_server.py", "--polls", "0", "--responder",
                               "bench.bench_batch_api:responder"], {STEPS_VAR: "2"})
    try:
        out = {}
        for name, port, is_batch in (("live", live_port, False), ("batch_api", batch_port, True)):
            agent = make_agent(f"http://127.0.0.1:{port}/v1", workdir / f"{name}.db")
            timed(agent, warm, f"{name}-warm", is_batch)
            out[name] = timed(agent, rows, f"{name}-timed", is_batch)
            print(f"== {name}: {out[name]['cpu_ms_per_step']:.2f} ms CPU per row and step, "
                  f"{out[name]['wall_s']:.1f} s wall", flush=True)
    finally:
        stop(live)
        stop(batch)
    return out


def stepping(steps: int) -> Any:
    """A fake model (no HTTP) answering as `responder` does: the live baseline of the memory table."""
    from nbagent.models import FunctionModel, tool_call

    def answer(messages: Any, info: Any) -> Any:
        prompt = messages[0].content
        done = sum(1 for m in messages if m.kind == "tool-result")
        return tool_call("lookup", row=f"{prompt} #{done}") if done < steps - 1 else f"answer to {prompt}"

    return FunctionModel(answer)


def memory(rows_n: int, steps_list: list[int], workdir: Path) -> list[dict[str, Any]]:
    """Peak Python memory of maps whose rows take 2, 4, 8 ... steps (as many rounds), through the
    batch API and live (a fake model, every row at once, as the rounds hold them)."""
    out = []
    rows = [f"question {i}" for i in range(rows_n)]
    for steps in steps_list:
        batch, port = start(["tests/wire/batch_server.py", "--polls", "0", "--responder",
                             "bench.bench_batch_api:responder"], {STEPS_VAR: str(steps)})
        try:
            agent = make_agent(f"http://127.0.0.1:{port}/v1", workdir / f"memory-{steps}.db")
            timed(agent, rows[:8], f"mem-warm-{steps}", True)
            result = timed(agent, rows, f"mem-{steps}", True, memory=True)
        finally:
            stop(batch)
        agent.model = stepping(steps)
        live = timed(agent, rows, f"mem-live-{steps}", False, memory=True, concurrency=rows_n)
        result["rounds"] = steps
        result["live_peak_bytes"] = live["peak_bytes"]
        result["peak_kb_per_row"] = result["peak_bytes"] / rows_n / 1024
        result["peak_kb_per_row_round"] = result["peak_kb_per_row"] / steps
        out.append(result)
        print(f"== {steps} rounds: peak {result['peak_bytes'] / 1e6:.1f} MB (live {live['peak_bytes'] / 1e6:.1f} MB), "
              f"frame {result['frame_bytes']} bytes", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--memory-rows", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="200 rows; memory at 2 and 4 steps")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows_n = 200 if args.quick else args.rows
    steps_list = [2, 4] if args.quick else [2, 4, 8]
    os.environ.pop("OPENAI_API_KEY", None)
    with tempfile.TemporaryDirectory(prefix="bench-batch-api-") as tmp:
        fast = speed(rows_n, Path(tmp))
        mem = memory(args.memory_rows, steps_list, Path(tmp))
    live, batch = fast["live"], fast["batch_api"]
    ratio = batch["cpu_ms_per_step"] / live["cpu_ms_per_step"]
    print(f"\n### agent.map(batch_api=True): {rows_n} two-step rows, {os.cpu_count()} cores\n")
    print("| path | CPU ms per row and round | CPU s | wall s | x live |")
    print("|---|---|---|---|---|")
    for name, r in fast.items():
        x = r["cpu_ms_per_step"] / live["cpu_ms_per_step"]
        goal = "" if name == "live" else (" ok" if x <= GOAL else f" (goal <= {GOAL})")
        print(f"| {name} | {r['cpu_ms_per_step']:.2f} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | {x:.2f}{goal} |")
    print(f"\n### Memory: {args.memory_rows} rows through the batch API, rows of 2 to {steps_list[-1]} steps\n")
    print("| rounds | peak MB | peak KB per row | peak KB per row and round | live peak MB | frame bytes |")
    print("|---|---|---|---|---|---|")
    for r in mem:
        print(f"| {r['rounds']} | {r['peak_bytes'] / 1e6:.1f} | {r['peak_kb_per_row']:.1f} | "
              f"{r['peak_kb_per_row_round']:.1f} | {r['live_peak_bytes'] / 1e6:.1f} | {r['frame_bytes']} |")

    def growth(key: str) -> str:
        return ", ".join(f"{(b[key] - a[key]) / max(1, b['rounds'] - a['rounds']) / args.memory_rows / 1024:.1f}"
                         for a, b in itertools.pairwise(mem))

    if len(mem) > 1:
        print(f"\nPeak growth per extra round, KB per row: {growth('peak_bytes')} through the batch API, "
              f"{growth('live_peak_bytes')} live (the conversation's own growth: each step adds a tool call and "
              "its result)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.json) if args.json else ROOT / "bench" / "results" / f"batch-api-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows_n, "cores": os.cpu_count(), "speed": fast, "ratio": ratio,
                               "goal": GOAL, "memory": mem}, indent=1))
    print(f"JSON: {out}")
    return 0 if ratio <= GOAL and not math.isnan(ratio) else 1


if __name__ == "__main__":
    raise SystemExit(main())
