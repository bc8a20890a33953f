#!/usr/bin/env python3
"""What a sub-agent adds to a run: nbagent's `Agent.as_tool()` against the OpenAI Agents SDK's
`Agent.as_tool()`, side by side in one process.

Runs in ``bench/.venv-peers`` (``make bench`` runs it after bench/run.py; or
``bench/.venv-peers/bin/python bench/bench_subagents.py``). Every framework gets instant,
scripted fake models and the same tool, driven through its own public async API, twice:

* ``plain``: the parent calls the tool itself: model -> get_weather("Paris") -> model -> answer
  (bench/run.py's S1);
* ``child``: the parent calls a sub-agent, which makes that same round trip:
  model -> researcher("Paris") -> [model -> get_weather("Paris") -> model -> "Sunny, 22 C"] ->
  model -> answer.

What a child adds is the median of ``child`` minus the median of ``plain`` (CPU time per run:
the sub-agent's own loop, its thread and commits for nbagent, its Runner for the SDK). nbagent
runs with ``store=MemoryStore()`` (``nbagent_mem``) and with the default SQLite store in a scratch
folder (``nbagent``); the SDK with tracing disabled (``openai_agents_notrace``, its cheaper
setting) and as by default (``openai_agents``). The goal: nbagent's child adds at most 0.25x what
the SDK's adds. Runs are interleaved in shuffled blocks (the machine is shared: compare within one
run).

    python bench/bench_subagents.py            # ~1-2 minutes
    python bench/bench_subagents.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
PROMPT = "What is the weather in Paris?"
ANSWER = "It is sunny."
WEATHER = "Sunny, 22 C in Paris"

logging.getLogger("openai.agents").setLevel(logging.ERROR)  # "no API key, skipping trace export"

RunFn = Callable[[], Awaitable[str]]


async def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"Sunny, 22 C in {city}"


# ------------------------------------------------------------------------------------- nbagent
def build_nbagent(shape: str, store: str) -> RunFn:
    """nbagent: a parent `Agent` with the tool (``plain``) or with a sub-agent (``child``)."""
    from nbagent import Agent, ToolCall
    from nbagent.models import FunctionModel
    from nbagent.store import MemoryStore

    def parent(messages: Any, request: Any) -> Any:
        if messages[-1].kind == "user":
            name = "get_weather" if shape == "plain" else "researcher"
            args = '{"city": "Paris"}' if shape == "plain" else '{"task": "Paris"}'
            return [ToolCall("call_1", name, args)]
        return ANSWER

    def child(messages: Any, request: Any) -> Any:
        if messages[-1].kind == "user":
            return [ToolCall("call_2", "get_weather", '{"city": "Paris"}')]
        return WEATHER

    options: dict[str, Any] = {"store": MemoryStore()} if store == "memory" else {}
    if shape == "plain":
        agent = Agent(FunctionModel(parent), tools=[get_weather], name="boss", **options)
    else:
        researcher = Agent(FunctionModel(child), tools=[get_weather], name="researcher")
        agent = Agent(FunctionModel(parent), agents=[researcher], name="boss", **options)
    models = [agent.model, *(t.agent.model for t in agent.tools.values() if hasattr(t, "agent"))]

    async def run() -> str:
        for model in models:
            model.requests.clear()  # the fake keeps every request for test assertions: not framework cost
        result = await agent.run(PROMPT)
        return str(result.output)

    return run


# ------------------------------------------------------------------------- OpenAI Agents SDK
def build_openai_agents(shape: str, tracing_disabled: bool) -> RunFn:
    """The OpenAI Agents SDK: a parent `Agent` with the function tool, or with a sub-agent's
    ``as_tool()``; each agent with a scripted `Model` (no network)."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    def text(value: str) -> ResponseOutputMessage:
        return ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                     content=[ResponseOutputText(text=value, type="output_text", annotations=[],
                                                                 logprobs=[])])

    class Scripted(Model):
        """Calls `tool` with `args` on the first request of a run, then answers `answer`."""

        def __init__(self, tool: str, args: str, answer: str) -> None:
            self.tool, self.args, self.answer = tool, args, answer

        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
            done = isinstance(input, list) and any(
                (item.get("type") if isinstance(item, dict) else getattr(item, "type", None)) == "function_call_output"
                for item in input)
            output: list[Any] = [text(self.answer)] if done else [ResponseFunctionToolCall(
                id="fc_1", call_id="call_1", type="function_call", name=self.tool, arguments=self.args,
                status="completed")]
            return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=10, output_tokens=5,
                                                            total_tokens=15), response_id=None)

        async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError
            yield  # pragma: no cover

    weather = function_tool(get_weather)
    if shape == "plain":
        agent = Agent(name="boss", model=Scripted("get_weather", '{"city": "Paris"}', ANSWER), tools=[weather])
    else:
        researcher = Agent(name="researcher", model=Scripted("get_weather", '{"city": "Paris"}', WEATHER),
                           tools=[weather])
        tool = researcher.as_tool(tool_name="researcher", tool_description="Research one question")
        agent = Agent(name="boss", model=Scripted("researcher", '{"input": "Paris"}', ANSWER), tools=[tool])
    config = RunConfig(tracing_disabled=tracing_disabled)

    async def run() -> str:
        result = await Runner.run(agent, PROMPT, run_config=config)
        return str(result.final_output)

    return run


BUILDERS: dict[str, Callable[[str], RunFn]] = {
    "nbagent_mem": lambda shape: build_nbagent(shape, "memory"),
    "nbagent": lambda shape: build_nbagent(shape, "default"),
    "openai_agents_notrace": lambda shape: build_openai_agents(shape, True),
    "openai_agents": lambda shape: build_openai_agents(shape, False),
}


# ------------------------------------------------------------------------------------ timing
async def _block(run: RunFn, n: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        if await run() != ANSWER:
            raise AssertionError("a run gave the wrong answer")
    return (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n


async def measure(names: list[str], blocks: int, block: int, warmup: int, seed: int) -> dict[str, Any]:
    runs: dict[tuple[str, str], RunFn] = {}
    for name in names:
        for shape in ("plain", "child"):
            try:
                runs[name, shape] = BUILDERS[name](shape)
            except ImportError as exc:
                print(f"{name}: skipped ({exc})", file=sys.stderr)
                break
    for run in runs.values():
        for _ in range(warmup):
            await run()
    times: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in runs}
    order = list(runs)
    rng = random.Random(seed)
    for _ in range(blocks):
        rng.shuffle(order)
        for key in order:
            times[key].append(await _block(runs[key], block))
    out: dict[str, Any] = {}
    for (name, shape), t in times.items():
        out.setdefault(name, {})[shape] = {"cpu_us": statistics.median(c for c, _ in t) * 1e6,
                                           "wall_us": statistics.median(w for _, w in t) * 1e6, "runs": len(t) * block}
    for parts in out.values():
        if "child" in parts and "plain" in parts:
            parts["added_cpu_us"] = parts["child"]["cpu_us"] - parts["plain"]["cpu_us"]
            parts["added_wall_us"] = parts["child"]["wall_us"] - parts["plain"]["wall_us"]
    return out


def report(results: dict[str, Any]) -> str:
    lines = ["| framework | plain: CPU µs / run | child: CPU µs / run | a child adds (CPU) | a child adds (wall) |",
             "|---|---:|---:|---:|---:|"]
    for name, r in results.items():
        if "added_cpu_us" not in r:
            continue
        lines.append(f"| {name} | {r['plain']['cpu_us']:,.0f} | {r['child']['cpu_us']:,.0f} | "
                     f"{r['added_cpu_us']:,.0f} µs | {r['added_wall_us']:,.0f} µs |")
    peers = [r["added_cpu_us"] for n, r in results.items() if n.startswith("openai") and "added_cpu_us" in r]
    if peers:
        best = min(peers)
        lines.append("")
        for name in ("nbagent_mem", "nbagent"):
            if name in results and "added_cpu_us" in results[name]:
                ratio = results[name]["added_cpu_us"] / best
                lines.append(f"{name}: a child adds {ratio:.2f}x of what the SDK's cheaper setting's child adds "
                             f"(goal <= 0.25x: {'met' if ratio <= 0.25 else 'NOT met'})")
    return "\n".join(lines)


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for package in ("nbagent", "openai-agents", "openai"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("-f", "--frameworks", default=",".join(BUILDERS))
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    blocks, block = (5, 5) if args.quick else (args.blocks, args.block)
    names = [n.strip() for n in args.frameworks.split(",") if n.strip()]
    scratch = Path(tempfile.mkdtemp(prefix="nbagent-bench-subagents-", dir=RESULTS if RESULTS.exists() else None))
    here = os.getcwd()
    os.chdir(scratch)  # the default store (./.nbagent/threads.db) goes to the scratch folder
    try:
        results = asyncio.run(measure(names, blocks, block, warmup=block, seed=args.seed))
    finally:
        os.chdir(here)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n### A sub-agent's cost ({blocks} blocks of {block} runs each, medians)\n")
    print(report(results))
    data = {"results": results, "versions": versions(), "blocks": blocks, "block": block}
    print(f"\nversions: {', '.join(f'{k}=={v}' for k, v in data['versions'].items())}")
    path = args.json or RESULTS / f"subagents-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
