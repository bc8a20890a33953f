#!/usr/bin/env python3
"""One MCP tool round trip: nbagent against pydantic-ai's and the OpenAI Agents SDK's MCP clients.

Runs in ``bench/.venv-peers`` (``make bench`` runs it after bench/run.py; or
``bench/.venv-peers/bin/python bench/bench_mcp.py``). Every framework gets the same instant,
scripted fake model and the same stdio MCP server script (bench/mcp_weather_server.py, written
with the ``mcp`` SDK's ``MCPServer``; each client starts its own process of it), connected once
before timing, and is driven through its own public async API:

    model -> get_weather(city="Paris") on the MCP server -> model -> "It is sunny."

* ``floor``: the bare SDK: ``ClientSession.call_tool`` on an open session (no agent, no model).
* ``nbagent``: ``Agent(FunctionModel, tools=[MCPTools.stdio(...)], store=MemoryStore())``, awaited
  from the bench's loop (the connection lives on nbagent's background loop: the hop is included).
* ``nbagent_sqlite``: the same with the default durable store (a SQLite file in a scratch folder).
* ``pydantic_ai``: ``Agent(FunctionModel, toolsets=[MCPToolset(StdioTransport(...))])``.
* ``openai_agents``: ``Agent(model=FakeModel, mcp_servers=[MCPServerStdio(..., cache_tools_list=True)])``,
  ``Runner.run`` with tracing disabled.

All peers accept the ``mcp`` SDK 2.x that nbagent needs, so they run in one process against the
same server script. Runs are interleaved in shuffled blocks; the figure is the median wall time
per run (the server works in another process, so CPU time of this process would hide it). The
overhead of a framework is its median minus the floor's; the goal is nbagent's overhead at most
half the best peer's.

    python bench/bench_mcp.py              # ~1-2 minutes
    python bench/bench_mcp.py --quick      # a smoke run
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
SERVER = BENCH / "mcp_weather_server.py"
RESULTS = BENCH / "results"
PROMPT = "What is the weather in Paris?"
ANSWER = "It is sunny."
TOOL_RESULT = "Sunny, 22 °C in Paris"

os.environ.setdefault("PYDANTIC_AI_NO_BANNER", "1")
logging.getLogger("openai.agents").setLevel(logging.ERROR)

RunFn = Callable[[], Awaitable[str]]
Built = tuple[RunFn, Callable[[], Awaitable[None]]]  # (one run, close)


def _server_command() -> tuple[str, list[str]]:
    return sys.executable, [str(SERVER)]


# ---------------------------------------------------------------------------------------------- frameworks
async def build_floor() -> Built:
    from mcp import Client, StdioServerParameters

    command, args = _server_command()
    client = Client(StdioServerParameters(command=command, args=args))
    await client.__aenter__()
    session = client.session

    async def run() -> str:
        result = await session.call_tool("get_weather", {"city": "Paris"})
        assert result.content[0].text == TOOL_RESULT, result
        return ANSWER

    async def close() -> None:
        await client.__aexit__(None, None, None)

    return run, close


async def _build_nbagent(store: Any) -> Built:
    from nbagent import Agent
    from nbagent.mcp import MCPTools
    from nbagent.models import FunctionModel, tool_call

    command, args = _server_command()
    weather = MCPTools.stdio(command, args)

    def answer(messages: list[Any], request: Any) -> Any:
        last = messages[-1]
        if last.kind == "user":
            return tool_call("get_weather", city="Paris")
        assert last.content == TOOL_RESULT, last
        return ANSWER

    agent = Agent(FunctionModel(answer), tools=[weather], store=store)
    await weather.connect()

    async def run() -> str:
        result = await agent.run(PROMPT)
        return str(result.output)

    return run, weather.close


async def build_nbagent() -> Built:
    from nbagent.store import MemoryStore

    return await _build_nbagent(MemoryStore())


async def build_nbagent_sqlite() -> Built:
    return await _build_nbagent(None)  # the default store: ./.nbagent/threads.db (a scratch folder)


async def build_pydantic_ai() -> Built:
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RequestUsage

    command, args = _server_command()
    toolset = MCPToolset(StdioTransport(command=command, args=args))

    async def answer(messages: Any, info: Any) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            assert TOOL_RESULT in str(last.content), last
            parts: list[Any] = [TextPart(content=ANSWER)]
        else:
            parts = [ToolCallPart(tool_name="get_weather", args='{"city": "Paris"}', tool_call_id="call_1")]
        return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=10, output_tokens=5))

    agent = Agent(FunctionModel(answer, model_name="bench"), toolsets=[toolset], name="bench")
    await agent.__aenter__()  # keeps the server connected across runs

    async def run() -> str:
        result = await agent.run(PROMPT)
        return str(result.output)

    async def close() -> None:
        await agent.__aexit__(None, None, None)

    return run, close


async def build_openai_agents() -> Built:
    from agents import Agent, RunConfig, Runner
    from agents.items import ModelResponse
    from agents.mcp import MCPServerStdio
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    command, args = _server_command()
    server = MCPServerStdio(params={"command": command, "args": args}, cache_tools_list=True,
                            client_session_timeout_seconds=30)

    class FakeModel(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
            last = input[-1] if isinstance(input, list) else None
            if isinstance(last, dict) and last.get("type") == "function_call_output":
                assert TOOL_RESULT in str(last.get("output")), last
                output: list[Any] = [ResponseOutputMessage(
                    id="msg_1", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(text=ANSWER, type="output_text", annotations=[], logprobs=[])])]
            else:
                output = [ResponseFunctionToolCall(id="fc_1", call_id="call_1", type="function_call",
                                                   name="get_weather", arguments='{"city": "Paris"}',
                                                   status="completed")]
            return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=10, output_tokens=5,
                                                            total_tokens=15), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not streamed
            raise NotImplementedError

    await server.connect()
    agent = Agent(name="bench", model=FakeModel(), mcp_servers=[server])
    config = RunConfig(tracing_disabled=True)

    async def run() -> str:
        result = await Runner.run(agent, PROMPT, run_config=config)
        return str(result.final_output)

    return run, server.cleanup


FRAMEWORKS: dict[str, Callable[[], Awaitable[Built]]] = {
    "floor": build_floor,
    "nbagent": build_nbagent,
    "nbagent_sqlite": build_nbagent_sqlite,
    "pydantic_ai": build_pydantic_ai,
    "openai_agents": build_openai_agents,
}
PEERS = ("pydantic_ai", "openai_agents")


# ---------------------------------------------------------------------------------------------- measuring
async def measure(names: list[str], runs: int, block: int, budget_s: float, seed: int) -> dict[str, Any]:
    built: dict[str, Built] = {}
    skipped: dict[str, str] = {}
    for name in names:
        try:
            built[name] = await FRAMEWORKS[name]()
            for _ in range(10):  # warm-up, and a check that it answers right
                out = await built[name][0]()
                assert out == ANSWER, (name, out)
        except Exception as exc:  # a peer that cannot run here is reported, not fatal
            skipped[name] = f"{type(exc).__name__}: {exc}"
            print(f"== {name}: skipped ({skipped[name]})", flush=True)
    times: dict[str, list[float]] = {n: [] for n in built}
    rng = random.Random(seed)
    deadline = time.monotonic() + budget_s
    while any(len(t) < runs for t in times.values()) and time.monotonic() < deadline:
        order = [n for n in built if len(times[n]) < runs]
        rng.shuffle(order)
        for name in order:
            run = built[name][0]
            for _ in range(block):
                t0 = time.perf_counter_ns()
                await run()
                times[name].append((time.perf_counter_ns() - t0) / 1e3)
    for name, (_, close) in built.items():
        try:
            await close()
        except Exception as exc:
            print(f"== {name}: close failed: {exc!r}", flush=True)
    results: dict[str, Any] = {"skipped": skipped, "frameworks": {}}
    for name, xs in times.items():
        xs.sort()
        results["frameworks"][name] = {
            "runs": len(xs),
            "median_us": statistics.median(xs),
            "p10_us": xs[len(xs) // 10],
            "p90_us": xs[(len(xs) * 9) // 10],
        }
    return results


def report(results: dict[str, Any]) -> str:
    fw = results["frameworks"]
    floor = fw.get("floor", {}).get("median_us")
    lines = ["| framework | runs | median per round trip | p10 | p90 | overhead above the floor |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in fw.items():
        over = "" if floor is None or name == "floor" else f"{(r['median_us'] - floor) / 1e3:,.2f} ms"
        lines.append(f"| {name} | {r['runs']} | {r['median_us'] / 1e3:,.2f} ms | {r['p10_us'] / 1e3:,.2f} ms "
                     f"| {r['p90_us'] / 1e3:,.2f} ms | {over} |")
    peers = {n: fw[n]["median_us"] - floor for n in PEERS if n in fw and floor is not None}
    if floor is not None and "nbagent" in fw and peers:
        best = min(peers, key=peers.__getitem__)
        mine = fw["nbagent"]["median_us"] - floor
        ratio = mine / peers[best] if peers[best] > 0 else float("nan")
        results["summary"] = {"floor_us": floor, "nbagent_overhead_us": mine, "best_peer": best,
                              "best_peer_overhead_us": peers[best], "ratio": ratio, "target": 0.5}
        lines.append("")
        lines.append(f"nbagent's overhead above the floor: {mine / 1e3:.2f} ms; best peer ({best}): "
                     f"{peers[best] / 1e3:.2f} ms; ratio {ratio:.2f}x (target <= 0.5x)")
    for name, why in results["skipped"].items():
        lines.append(f"- {name} skipped: {why}")
    return "\n".join(lines)


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for dist in ("nbagent", "mcp", "pydantic-ai-slim", "fastmcp-slim", "openai-agents"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (fewer runs)")
    parser.add_argument("-f", "--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of timing at most")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=RESULTS / "bench_mcp.json")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.frameworks.split(",") if n.strip()]
    unknown = sorted(set(names) - set(FRAMEWORKS))
    if unknown:
        parser.error(f"unknown frameworks: {unknown}")
    runs, budget = (30, 20.0) if args.quick else (args.runs, args.budget)
    scratch = Path(tempfile.mkdtemp(prefix="bench-mcp-", dir=RESULTS if RESULTS.exists() else None))
    os.environ.pop("NBAGENT_STORE", None)
    here = os.getcwd()
    os.chdir(scratch)  # nbagent's default store goes to ./.nbagent/threads.db here
    try:
        results = asyncio.run(measure(names, runs, 10, budget, args.seed))
    finally:
        os.chdir(here)
        shutil.rmtree(scratch, ignore_errors=True)
    results["versions"] = versions()
    results["python"] = sys.version.split()[0]
    text = report(results)
    print("## MCP: one tool round trip over stdio (median wall time per run)\n")
    print(text)
    print(f"\nversions: {results['versions']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
