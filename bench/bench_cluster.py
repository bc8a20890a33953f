"""Benchmark ``agent.map`` locally (asyncio), on Ray and on Dask, at the same total concurrency.

    .venv/bin/python bench/bench_cluster.py                  # 1,000 rows, concurrency 32, 20 ms answers
    .venv/bin/python bench/bench_cluster.py --quick          # 200 rows
    .venv/bin/python bench/bench_cluster.py --engines local,dask --rows 500

Each row is a two-step conversation: the model calls a tool (``lookup(row)``), the tool answers,
the model answers in text. The model is the scripted OpenAI-compatible server of the tests
(``tests/wire/scripted_server.py``), in its own process on 127.0.0.1, answering each request
after ``--delay`` seconds (20 ms). Every path uses a fresh SQLite store file (the workers share it)
and the same ``concurrency``; Ray runs on ``ray.init(num_cpus=2)``, Dask on a ``LocalCluster`` of
two single-thread worker processes (``--workers``). On a 2-core machine this measures the
engines' overhead more than a speed-up: the server, the driver and the workers share the two
cores (but the local path is one process, so it uses one core at most; ``--workers 1`` gives the
engines that parallelism too).

Each engine first runs a small warm-up batch (its worker processes import nbagent, openai and
pandas, and open their store and HTTP connections: what a notebook has done after its first
batch); then one timed run. Reported: wall time and rows per second of each, the ratio to the
local path (goal: Ray and Dask each >= 0.8x), the warm-up time, and the CPU time per row of all
processes of the run (this one and its descendants, the server left out): the local path's is
what docs/scale.md multiplies out for N machines, the engines' excess over it is their overhead.

Runs in the project's venv (``.venv``: the ``test`` extra has ray and dask), as `bench/run.py`
does for it. Results: a markdown table on stdout and JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nbagent import Agent  # noqa: E402
from nbagent.models.openai import OpenAIModel  # noqa: E402

GOAL = 0.8


def lookup(row: str) -> str:
    """Look the row up.

    Args:
        row: the row's question.
    """
    return f"found {row}"


def start_server(delay: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "wire" / "scripted_server.py"), "--delay", str(delay)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"the scripted server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


def make_agent(base_url: str, store: Path) -> Agent:
    model = OpenAIModel("scripted", base_url=base_url, provider="scripted")
    return Agent(model, tools=[lookup], store=str(store), prices={"scripted": {"input": 1.0, "output": 2.0}})


def tree_cpu(exclude: int) -> dict[int, float]:
    """CPU seconds (user + system) of this process and its descendants (Ray's and Dask's
    processes are), the scripted server (pid `exclude`) left out."""
    import psutil

    me = psutil.Process()
    out: dict[int, float] = {}
    for proc in [me, *me.children(recursive=True)]:
        if proc.pid == exclude:
            continue
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        out[proc.pid] = times.user + times.system
    return out


def timed_map(agent: Agent, rows: list[str], executor: Any, concurrency: int, prefix: str) -> tuple[float, Any]:
    start = time.perf_counter()
    df = agent.map(rows, executor=executor, concurrency=concurrency, thread_prefix=prefix, progress=False)
    return time.perf_counter() - start, df


def run_engine(name: str, base_url: str, rows: list[str], concurrency: int, workdir: Path,
               server_pid: int, workers: int) -> dict[str, Any]:
    executor: Any = None
    teardown = None
    started = time.perf_counter()
    if name == "ray":
        from tests.cluster_engines import start_ray

        ray = start_ray(num_cpus=workers)
        executor, teardown = "ray", ray.shutdown
    elif name == "dask":
        from tests.cluster_engines import start_dask

        client = start_dask(workers=workers)
        executor = client

        def teardown() -> None:
            cluster = client.cluster
            client.close()
            cluster.close()

    cluster_start = time.perf_counter() - started
    try:
        agent = make_agent(base_url, workdir / f"{name}.db")
        warm = [f"warm-up {i}" for i in range(4 * concurrency)]
        warm_s, _ = timed_map(agent, warm, executor, concurrency, f"{name}-warm")
        before = tree_cpu(server_pid)
        cpu = time.process_time()
        wall, df = timed_map(agent, rows, executor, concurrency, f"{name}-timed")
        cpu = time.process_time() - cpu
        after = tree_cpu(server_pid)
        all_cpu = sum(t - before.get(pid, 0.0) for pid, t in after.items())
    finally:
        if teardown is not None:
            teardown()
    completed = int((df["status"] == "completed").sum())
    if completed != len(rows):
        raise RuntimeError(f"{name}: {len(rows) - completed} rows did not complete: {df['error'].dropna().head(3)}")
    return {"engine": name, "rows": len(rows), "wall_s": wall, "rows_per_s": len(rows) / wall,
            "warm_up_s": warm_s, "cluster_start_s": cluster_start, "driver_cpu_s": cpu,
            "cpu_ms_per_row": all_cpu / len(rows) * 1000,
            "row_latency_s": float(df["duration_s"].median())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds the server waits before each answer")
    parser.add_argument("--engines", default="local,ray,dask")
    parser.add_argument("--workers", type=int, default=2,
                        help="Ray CPUs / Dask worker processes (1: the local path's parallelism, so the "
                             "difference is the engine's overhead alone)")
    parser.add_argument("--quick", action="store_true", help="200 rows")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows_n = 200 if args.quick else args.rows
    rows = [f"question {i}" for i in range(rows_n)]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    os.environ.pop("OPENAI_API_KEY", None)
    server, base_url = start_server(args.delay)
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
            for name in engines:
                print(f"== {name}: {rows_n} rows, concurrency {args.concurrency}", flush=True)
                results.append(run_engine(name, base_url, rows, args.concurrency, Path(tmp), server.pid, args.workers))
    finally:
        server.terminate()
        server.wait(10)
    local = next((r for r in results if r["engine"] == "local"), None)
    print(f"\n### agent.map: {rows_n} two-step rows, concurrency {args.concurrency}, server answers in "
          f"{args.delay * 1000:.0f} ms, {os.cpu_count()} cores, {args.workers} Ray CPUs / Dask workers\n")
    print("| engine | wall s | rows/s | x local | CPU ms/row, all processes | warm-up s | cluster start s "
          "| median row s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        ratio = r["rows_per_s"] / local["rows_per_s"] if local else float("nan")
        r["vs_local"] = ratio
        goal = "" if r["engine"] == "local" else (" ok" if ratio >= GOAL else f" (goal {GOAL})")
        print(f"| {r['engine']} | {r['wall_s']:.2f} | {r['rows_per_s']:.0f} | {ratio:.2f}{goal} | "
              f"{r['cpu_ms_per_row']:.1f} | {r['warm_up_s']:.2f} | {r['cluster_start_s']:.1f} | "
              f"{r['row_latency_s']:.3f} |")
    if local:
        per_row_ms = local["cpu_ms_per_row"]
        print(f"\nlocal path: {per_row_ms:.2f} ms of CPU per row (nbagent + openai SDK + SQLite, the scripted "
              f"server not counted): one core does at most {1000 / per_row_ms:.0f} rows/s")
        for r in results:
            if r["engine"] != "local":
                print(f"{r['engine']}: {r['cpu_ms_per_row']:.2f} ms of CPU per row in all its processes "
                      f"({r['cpu_ms_per_row'] - per_row_ms:+.2f} ms compared with the local path)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.json) if args.json else ROOT / "bench" / "results" / f"cluster-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows_n, "concurrency": args.concurrency, "delay_s": args.delay,
                               "workers": args.workers,
                               "cores": os.cpu_count(), "results": results}, indent=1))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
