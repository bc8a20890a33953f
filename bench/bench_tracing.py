#!/usr/bin/env python3
"""What tracing adds to one tool round trip: nbagent's spans against pydantic-ai's instrumentation.

Runs in ``bench/.venv-peers`` (it needs pydantic-ai and opentelemetry-sdk there; without
pydantic-ai only nbagent is measured):

    bench/.venv-peers/bin/python bench/bench_tracing.py            # ~1-2 minutes
    bench/.venv-peers/bin/python bench/bench_tracing.py --quick    # a smoke run

The round trip is bench/run.py's S1 (model -> get_weather -> model -> answer, an instant scripted
model), built by run.py's own builders: ``nbagent_mem`` (bench/peers_adapter.py, `MemoryStore`) and
``pydantic_ai``. Each framework runs with tracing off and on, on an SDK ``TracerProvider`` whose
``SimpleSpanProcessor`` hands every span to an exporter that drops it (so the spans are made,
ended and handed over, and nothing is written): nbagent with ``nbagent.tracing.instrument``,
pydantic-ai with ``Agent.instrument_all(InstrumentationSettings(...))``. Both with their default
content setting (nbagent: off; pydantic-ai: on) and both with content on.

The four variants run interleaved in shuffled blocks; a variant's figure is the median over its
blocks of the time per run (CPU time of the process, and wall time). The added cost of tracing is
a framework's median on minus its median off; the goal is nbagent's at most 0.5x pydantic-ai's.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
GOAL = 0.5

os.environ.setdefault("PYDANTIC_AI_NO_BANNER", "1")


def _harness() -> Any:
    """bench/run.py as a module (its scenarios, script and builders)."""
    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    return provider


Variant = tuple[Callable[[], Awaitable[Any]], Callable[[], None]]
"""(one run, what turns its tracing on or off before a block)"""


def _variants(harness: Any, provider: Any, content: bool) -> dict[str, Variant]:
    """name -> (one run, what turns its tracing on or off before a block)."""
    import nbagent.tracing

    sc = harness.SCENARIOS["S1"]
    out: dict[str, Variant] = {}
    nb = harness.build_nbagent_mem(sc, harness.Script(sc))
    out["nbagent off"] = (nb, nbagent.tracing.uninstrument)
    out["nbagent on"] = (nb, lambda: nbagent.tracing.instrument(tracer_provider=provider, include_content=content))
    try:
        from pydantic_ai import Agent
        from pydantic_ai.models.instrumented import InstrumentationSettings
    except ImportError:
        return out
    settings = InstrumentationSettings(tracer_provider=provider, include_content=True)  # its default, both times
    pa = harness.build_pydantic_ai(sc, harness.Script(sc))
    out["pydantic_ai off"] = (pa, lambda: Agent.instrument_all(False))
    out["pydantic_ai on"] = (pa, lambda: Agent.instrument_all(settings))
    return out


async def _block(run: Callable[[], Awaitable[Any]], n: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        await run()
    return (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n


async def measure(variants: dict[str, Any], blocks: int, block: int, warmup: int) -> dict[str, dict[str, float]]:
    for run, switch in variants.values():
        switch()
        for _ in range(warmup):
            await run()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    names = list(variants)
    rng = random.Random(0)
    for _ in range(blocks):
        rng.shuffle(names)
        for name in names:
            run, switch = variants[name]
            switch()
            times[name].append(await _block(run, block))
    return {name: {"cpu_us": statistics.median(c for c, _ in t) * 1e6,
                   "wall_us": statistics.median(w for _, w in t) * 1e6} for name, t in times.items()}


def report(label: str, medians: dict[str, dict[str, float]]) -> dict[str, Any]:
    print(f"\n### {label}\n\n| variant | CPU µs / round trip | wall µs / round trip |\n|---|---:|---:|")
    for name, m in medians.items():
        print(f"| {name} | {m['cpu_us']:.0f} | {m['wall_us']:.0f} |")
    out: dict[str, Any] = {"medians": medians}
    for clock in ("cpu_us", "wall_us"):
        added = {fw: medians[f"{fw} on"][clock] - medians[f"{fw} off"][clock]
                 for fw in ("nbagent", "pydantic_ai") if f"{fw} on" in medians}
        out[f"added_{clock}"] = added
        line = ", ".join(f"{fw} +{v:.0f} µs" for fw, v in added.items())
        if "pydantic_ai" in added and added["pydantic_ai"] > 0:
            ratio = added["nbagent"] / added["pydantic_ai"]
            out[f"ratio_{clock}"] = ratio
            line += f": **{ratio:.2f}x** (goal <= {GOAL}x) {'ok' if ratio <= GOAL else 'MISSED'}"
        print(f"\nadded by tracing ({clock[:-3]}): {line}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--block", type=int, default=100)
    args = parser.parse_args(argv)
    blocks, block, warmup = (3, 20, 10) if args.quick else (args.blocks, args.block, 100)
    harness = _harness()
    provider = _provider()
    results: dict[str, Any] = {"blocks": blocks, "block": block, "python": sys.version.split()[0]}
    for label, content in (("default content settings (nbagent off, pydantic-ai on)", False),
                           ("content on for both", True)):
        medians = asyncio.run(measure(_variants(harness, provider, content), blocks, block, warmup))
        results[label] = report(label, medians)
    import nbagent.tracing

    nbagent.tracing.uninstrument()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"tracing-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"\nsaved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
