"""Benchmark the pandas edge: usage frames of 1,000,000 model calls, and batch runs.

    .venv/bin/python bench/bench_frames.py                 # full sizes (targets below)
    .venv/bin/python bench/bench_frames.py --rows 100000 --batch 200   # quick

Scenarios (each measured in a fresh subprocess, so one's memory does not count in another's):

- ``usage 1M, columns``: `usage_from_columns` on a dict of Python lists (what a columnar store
  reader returns). Target: <= 2 s, <= 1 GB peak.
- ``usage 1M, SQLite``: `usage_frame(store)` on a `SQLiteStore` holding 1,000,000 usage rows
  (reading the file through ``usage_columns`` included). Target: <= 2 s, <= 1 GB peak. The
  file is filled first, in its own process, through `SQLiteStore.append` (1,000 threads of
  1,000 model calls, one append per thread), so the columnar chunks are those appends wrote.
- ``sqlite-thread``: `usage_frame(store, thread=...)` for one 1,000-row thread of that file.
- ``sqlite-v1``: the same file as a format-1 file from before usage chunks (chunk table and
  triggers dropped): the first `usage_frame` packs every row (the one-off migration), the
  second is timed as usual.
- ``append``: per-append latency (one message + one usage row, like a model step) over 20,000
  appends to one thread, with chunk packing and with packing switched off; reports p50 / p99 /
  p99.9 / max, so the pause of the append that packs a chunk is visible.
- ``usage 1M, objects``: `usage_frame(rows)` on 1,000,000 `ModelCallUsage` objects (what an
  in-memory source gives). No target; for reference.
- ``batch 1000, MemoryStore`` / ``batch 1000, default store``: `batch` of 1,000 conversations
  against an instant fake model, concurrency 32. Target: <= 5 s.

Time is wall-clock without tracing; peak memory is measured in a second pass with
``tracemalloc`` (Python and numpy allocations made while building; the source is excluded),
and the process's max RSS is reported too (source included). For the SQLite scenarios the RSS
growth of the first (untraced) build is reported as well: the peak RSS (``VmHWM``, reset through
``/proc/self/clear_refs`` where the kernel allows) minus the RSS before it.
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
    "sqlite-thread": (None, None),
    "sqlite-v1": (2.0, 1024.0),
    "append": (None, None),
    "fill": (None, None),
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


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    return float("nan")


def _reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass


def _measure(build: Any) -> tuple[float, float, float]:
    """(seconds, traced peak MB, RSS growth MB) of `build`."""
    _reset_peak_rss()
    rss_before = _status_mb("VmRSS")
    clock = time.perf_counter()
    df = build()
    seconds = time.perf_counter() - clock
    rss_growth = _status_mb("VmHWM") - rss_before
    rows = len(df)
    del df
    tracemalloc.start()
    df = build()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(df) == rows
    return seconds, peak / 2**20, rss_growth


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def scenario_columns(n: int) -> dict[str, Any]:
    from nbagent.dataframe import usage_from_columns

    cols = _columns(n)
    seconds, peak, _ = _measure(lambda: usage_from_columns(cols))
    return {"seconds": seconds, "peak_mb": peak}


def scenario_objects(n: int) -> dict[str, Any]:
    from nbagent.dataframe import usage_frame
    from nbagent.usage import ModelCallUsage

    cols = _columns(n)
    names = list(cols)
    rows = [ModelCallUsage(*values) for values in zip(*(cols[k] for k in names), strict=True)]
    del cols
    seconds, peak, _ = _measure(lambda: usage_frame(rows))
    return {"seconds": seconds, "peak_mb": peak}


def scenario_fill(n: int, path: str) -> dict[str, Any]:
    from nbagent.store import SQLiteStore

    store = SQLiteStore(path)
    fill = asyncio.run(_fill(store, n))
    asyncio.run(store.close())
    return {"seconds": fill, "peak_mb": None}


def scenario_sqlite(n: int, path: str, thread: str | None = None) -> dict[str, Any]:
    from nbagent.dataframe import usage_frame
    from nbagent.store import SQLiteStore

    store = SQLiteStore(path)
    asyncio.run(store.threads())  # open the file outside the measurement
    seconds, peak, rss = _measure(lambda: usage_frame(store, thread=thread))
    rows = len(usage_frame(store, thread=thread))
    assert rows == (n if thread is None else 1000), rows
    return {"seconds": seconds, "peak_mb": peak, "rss_growth_mb": rss}


def scenario_sqlite_v1(n: int, path: str) -> dict[str, Any]:
    import sqlite3

    from nbagent.dataframe import usage_frame
    from nbagent.store import SQLiteStore

    conn = sqlite3.connect(path)
    for trigger in ("usage_chunks_on_insert", "usage_chunks_on_update", "usage_chunks_on_delete"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute("DROP TABLE IF EXISTS usage_chunks")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    clock = time.perf_counter()
    assert len(usage_frame(store)) == n
    migrate = time.perf_counter() - clock
    seconds, peak, rss = _measure(lambda: usage_frame(store))
    return {"seconds": seconds, "peak_mb": peak, "rss_growth_mb": rss, "migrate_s": migrate}


def scenario_append(n: int, path: str) -> dict[str, Any]:
    from nbagent.messages import AssistantMessage
    from nbagent.store import SQLiteStore
    from nbagent.store.sqlite import _chunks as sqlite_store
    from nbagent.usage import ModelCallUsage

    async def run(thread: str) -> list[float]:
        times, v = [], 0
        for i in range(n):
            row = ModelCallUsage(f"run_{i // 10}", thread, i, time.time(), "openai", "gpt-4o-mini",
                                 input_tokens=1000 + i, output_tokens=20, cost_total=2e-4)
            clock = time.perf_counter()
            v = await store.append(thread, version=v, step=i, messages=[AssistantMessage("ok " * 20)],
                                   usage=[row])
            times.append(time.perf_counter() - clock)
        return times

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    store = SQLiteStore(path)
    out: dict[str, Any] = {}
    chunk_rows = sqlite_store.CHUNK_ROWS
    total = 0.0
    for label, rows in (("packing", chunk_rows), ("no-packing", 2**62)):
        sqlite_store.CHUNK_ROWS = rows
        t = asyncio.run(run(f"append-{label}"))
        total = total or sum(t)
        out[label] = {q: round(pct(t, p), 3) for q, p in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))}
        out[label]["max"] = round(max(t) * 1000, 3)
    sqlite_store.CHUNK_ROWS = chunk_rows
    asyncio.run(store.close())
    return {"seconds": total, "peak_mb": None, "latency_ms": out}


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
    elif name == "fill":
        out = scenario_fill(n, extra or "")
    elif name == "sqlite":
        out = scenario_sqlite(n, extra or "")
    elif name == "sqlite-thread":
        out = scenario_sqlite(n, extra or "", thread=f"bench_{n // 2000:06d}")
    elif name == "sqlite-v1":
        out = scenario_sqlite_v1(n, extra or "")
    elif name == "append":
        out = scenario_append(n, extra or "")
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
        db = str(Path(tmp) / "usage.db")
        plan = [
            ("columns", args.rows, None, None),
            ("fill", args.rows, db, None),
            ("sqlite", args.rows, db, None),
            ("sqlite-thread", args.rows, db, None),
            ("sqlite-v1", args.rows, db, None),
            ("append", 20_000, str(Path(tmp) / "append.db"), None),
            ("objects", args.rows, None, None),
            ("batch-memory", args.batch, None, None),
            ("batch-default", args.batch, None, {"NBAGENT_STORE": str(Path(tmp) / "default.db")}),
        ]
        for name, n, extra, env in plan:
            if name in skip or (name.startswith("sqlite") and "fill" in skip):
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
    if name == "fill":
        notes.append(f"{n // 1000:,} appends of 1,000 usage rows (chunks packed by the appends)")
    if r.get("rss_growth_mb") is not None:
        notes.append(f"RSS growth {r['rss_growth_mb']:.0f} MB")
    if r.get("migrate_s"):
        notes.append(f"first read of the format-1 file (packs every row) {r['migrate_s']:.1f} s")
    if r.get("latency_ms"):
        notes.append("append ms " + "; ".join(
            f"{label}: " + ", ".join(f"{q} {v:.2f}" for q, v in qs.items())
            for label, qs in r["latency_ms"].items()
        ))
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
