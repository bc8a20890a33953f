"""Benchmark the pandas edge: usage frames of 1,000,000 model calls, and batch runs.

    .venv/bin/python bench/bench_frames.py                 # full sizes (targets below)
    .venv/bin/python bench/bench_frames.py --rows 100000 --batch 200   # quick

Scenarios (each measured in a fresh subprocess, so one's memory does not count in another's):

- ``usage 1M, columns``: `usage_from_columns` on a dict of Python lists (what a columnar store
  reader returns). Target: <= 2 s, <= 1 GB peak.
- ``usage 1M, SQLite``: `usage_frame(store)` on a `SQLiteStore` holding 1,000,000 usage rows
  (reading the file through ``usage_columns`` included). Target: <= 2 s, <= 1 GB peak.
- ``usage 1M, objects``: `usage_frame(rows)` on 1,000,000 `ModelCallUsage` objects (what an
  in-memory source gives). No target; for reference.
- ``batch 1000, MemoryStore`` / ``batch 1000, default store``: `batch` of 1,000 conversations
  against an instant fake model, concurrency 32. Target: <= 5 s.

Time is wall-clock without tracing; peak memory is measured in a second pass with
``tracemalloc`` (Python and numpy allocations made while building; the source is excluded),
and the process's max RSS is reported too (source included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

TARGETS = {
    "columns": (2.0, 1024.0),
    "sqlite": (2.0, 1024.0),
    "objects": (None, None),
    "batch-memory": (5.0, None),
    "batch-default": (5.0, None),
}


def _columns(n: int) -> dict[str, list[Any]]:
    # Realistic repetition: 10 calls per run, 50 per thread, two models, some unpriced calls.
    t0 = 1.75e9
    return {
        "run_id": [f"run_{i // 10:016x}" for i in range(n)],
        "thread": [f"thread_{i // 50:016x}" for i in range(n)],
        "step": [i % 50 + 1 for i in range(n)],
        "time": [t0 + i * 0.5 for i in range(n)],
        "provider": ["openai"] * n,
        "model": ["gpt-4o-mini" if i % 3 else "gpt-4.1-mini" for i in range(n)],
        "input_tokens": [1000 + i % 977 for i in range(n)],
        "cache_read_tokens": [(i % 4) * 256 for i in range(n)],
        "cache_write_tokens": [0] * n,
        "output_tokens": [20 + i % 97 for i in range(n)],
        "reasoning_tokens": [0] * n,
        "latency_s": [0.25 + (i % 10) / 100 for i in range(n)],
        "finish_reason": ["tool_calls" if i % 10 else "stop" for i in range(n)],
        "tool_calls": [1 if i % 10 else 0 for i in range(n)],
        "cost_input": [None if i % 100 == 0 else 1.5e-4 for i in range(n)],
        "cost_output": [None if i % 100 == 0 else 6e-5 for i in range(n)],
        "cost_total": [None if i % 100 == 0 else 2.1e-4 for i in range(n)],
        "currency": ["USD"] * n,
        "usage_reported": [True] * n,
    }


def _measure(build: Any) -> tuple[float, float]:
    clock = time.perf_counter()
    df = build()
    seconds = time.perf_counter() - clock
    rows = len(df)
    del df
    tracemalloc.start()
    df = build()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(df) == rows
    return seconds, peak / 2**20


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def scenario_columns(n: int) -> dict[str, Any]:
    from nbagent.dataframe import usage_from_columns

    cols = _columns(n)
    seconds, peak = _measure(lambda: usage_from_columns(cols))
    return {"seconds": seconds, "peak_mb": peak}


def scenario_objects(n: int) -> dict[str, Any]:
    from nbagent.dataframe import usage_frame
    from nbagent.usage import ModelCallUsage

    cols = _columns(n)
    names = list(cols)
    rows = [ModelCallUsage(*values) for values in zip(*(cols[k] for k in names), strict=True)]
    del cols
    seconds, peak = _measure(lambda: usage_frame(rows))
    return {"seconds": seconds, "peak_mb": peak}


def scenario_sqlite(n: int, path: str) -> dict[str, Any]:
    from nbagent.dataframe import usage_frame
    from nbagent.store import SQLiteStore

    store = SQLiteStore(path)
    fill = 0.0
    if not asyncio.run(_has_rows(store, n)):
        fill = asyncio.run(_fill(store, n))
    seconds, peak = _measure(lambda: usage_frame(store))
    return {"seconds": seconds, "peak_mb": peak, "fill_s": fill}


async def _has_rows(store: Any, n: int) -> bool:
    cols = await store.usage_columns()
    return len(cols["run_id"]) == n


async def _fill(store: Any, n: int) -> float:
    from nbagent.usage import ModelCallUsage

    clock = time.perf_counter()
    cols = _columns(n)
    names = list(cols)
    per_thread = 1000
    for start in range(0, n, per_thread):
        thread = f"bench_{start // per_thread:06d}"
        rows = [
            ModelCallUsage(*values)
            for values in zip(*(cols[k][start : start + per_thread] for k in names), strict=True)
        ]
        for r in rows:
            r.thread = thread
        await store.append(thread, version=0, step=0, usage=rows)
    return time.perf_counter() - clock


def scenario_batch(n: int, store_kind: str) -> dict[str, Any]:
    from nbagent import Agent
    from nbagent.dataframe import batch
    from nbagent.models import FunctionModel
    from nbagent.store import MemoryStore

    store = MemoryStore() if store_kind == "memory" else None  # None: the default store
    agent = Agent(FunctionModel(lambda messages, request: "ok"), store=store)
    clock = time.perf_counter()
    df = batch(
        agent,
        [f"question {i}" for i in range(n)],
        concurrency=32,
        progress=False,
        thread_prefix=f"bench-{os.getpid()}",
    )
    seconds = time.perf_counter() - clock
    assert (df["status"] == "completed").all() and len(df) == n
    clock = time.perf_counter()
    again = batch(
        agent,
        [f"question {i}" for i in range(n)],
        concurrency=32,
        progress=False,
        thread_prefix=f"bench-{os.getpid()}",
    )
    rerun = time.perf_counter() - clock
    assert again["skipped"].all()
    return {"seconds": seconds, "peak_mb": None, "rerun_s": rerun}


def _child(name: str, n: int, extra: str | None) -> None:
    if name == "columns":
        out = scenario_columns(n)
    elif name == "objects":
        out = scenario_objects(n)
    elif name == "sqlite":
        out = scenario_sqlite(n, extra or "")
    else:
        out = scenario_batch(n, name.split("-", 1)[1])
    out["maxrss_mb"] = _maxrss_mb()
    print(json.dumps(out))


def _run(name: str, n: int, extra: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", name, "--n", str(n)]
    if extra:
        cmd += ["--extra", extra]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--child")
    parser.add_argument("--n", type=int)
    parser.add_argument("--extra")
    parser.add_argument("--skip", default="", help="comma-separated scenarios to skip")
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.n, args.extra)
        return
    skip = set(filter(None, args.skip.split(",")))
    results: list[tuple[str, int, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        plan = [
            ("columns", args.rows, None, None),
            ("sqlite", args.rows, str(Path(tmp) / "usage.db"), None),
            ("objects", args.rows, None, None),
            ("batch-memory", args.batch, None, None),
            ("batch-default", args.batch, None, {"NBAGENT_STORE": str(Path(tmp) / "default.db")}),
        ]
        for name, n, extra, env in plan:
            if name in skip:
                continue
            results.append((name, n, _run(name, n, extra, env)))
            _print_row(*results[-1])


def _print_row(name: str, n: int, r: dict[str, Any]) -> None:
    t_target, m_target = TARGETS[name]
    ok = (t_target is None or r["seconds"] <= t_target) and (
        m_target is None or r.get("peak_mb") is None or r["peak_mb"] <= m_target
    )
    peak = "-" if r.get("peak_mb") is None else f"{r['peak_mb']:.0f} MB"
    target = (
        "-" if t_target is None else f"<= {t_target:g} s" + (f", <= {m_target:.0f} MB" if m_target else "")
    )
    notes = []
    if r.get("fill_s"):
        notes.append(f"filling the file took {r['fill_s']:.1f} s")
    if "rerun_s" in r:
        notes.append(f"re-run (all skipped) {r['rerun_s']:.2f} s")
    if not _print_row.header:  # type: ignore[attr-defined]
        print(
            f"{'scenario':<15} {'rows':>9} {'time':>8} {'peak (traced)':>14} {'max RSS':>9}  "
            f"{'target':<20} {'ok':<3} notes"
        )
        _print_row.header = True  # type: ignore[attr-defined]
    print(
        f"{name:<15} {n:>9,} {r['seconds']:>7.2f}s {peak:>14} {r['maxrss_mb']:>6.0f} MB  {target:<20} "
        f"{'yes' if ok else 'NO':<3} {'; '.join(notes)}",
        flush=True,
    )


_print_row.header = False  # type: ignore[attr-defined]

if __name__ == "__main__":
    main()
