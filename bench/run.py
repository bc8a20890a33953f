#!/usr/bin/env python3
"""nbagent's overhead compared with LangGraph, pydantic-ai and the OpenAI Agents SDK, in one run.

`make bench` runs this file in ``bench/.venv-peers`` (peers from ``bench/requirements-peers.txt``,
nbagent installed editable). Every framework gets the same instant, scripted fake model and the
same tool, built through its own extension point and driven through its own public async API, so
what is measured is the framework's own cost per run. A hand-written loop over plain dicts is the
floor.

Scenarios:
  S1   one tool round trip: model -> get_weather(city="Paris") -> model -> "It is sunny."
  S1s  the same with a plain ``def`` tool (frameworks run it in a worker thread)
  S2   50 tool turns in a row, then the answer: cost per step, and steps 41-50 vs 1-10 (growth)
  S3   one answer with 8 tool calls, each awaiting asyncio.sleep(0.1): ideally 100 ms in all
  S4   import time of each framework's entry point, a fresh interpreter per sample
  S5   one answer streamed as 10,000 text deltas, consumed event by event: CPU per delta

nbagent is measured twice: ``nbagent`` with the agent's default store (what a user gets; the
store file goes to a scratch folder under bench/results/ that is removed afterwards) and
``nbagent_mem`` with ``store=MemoryStore()``. The nbagent adapter is bench/peers_adapter.py, the
same file the shared reference harness loads, so both harnesses time the same code.

Runs of all frameworks are interleaved in shuffled blocks (the machine is shared: compare within
one run; CPU time is steadier than wall time). The summary gives nbagent / best peer per scenario
against the project's targets. Results: a markdown report on stdout and JSON in bench/results/.

Afterwards the project's other benches (bench_store.py, bench_provider.py, bench_anthropic.py,
bench_frames.py, bench_widget_traffic.py, bench_commit_floor.py, bench_postgres.py, bench_pg_paths.py,
bench_mcp.py, bench_cluster.py, bench_tracing.py, bench_context.py, bench_evals.py, bench_replay.py,
bench_responses.py, bench_guards.py, bench_subagents.py, bench_loop_lag.py, bench_saved_copy.py,
bench_batch_api.py, bench_growth.py, bench_versus.py) run as subprocesses when present (``--no-other`` skips them).

    python bench/run.py                         # everything (~10 min on 2 cores)
    python bench/run.py --quick                 # smoke run (~2 min)
    python bench/run.py -s S1,S5 -f floor,nbagent,pydantic_ai --no-other
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import importlib.util
import inspect
import itertools
import json
import logging
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
OTHER_BENCHES = (
    "bench_store.py", "bench_provider.py", "bench_anthropic.py", "bench_frames.py", "bench_widget_traffic.py",
    "bench_commit_floor.py", "bench_postgres.py", "bench_pg_paths.py", "bench_mcp.py", "bench_cluster.py",
    "bench_tracing.py", "bench_context.py", "bench_evals.py", "bench_replay.py", "bench_responses.py",
    "bench_guards.py", "bench_subagents.py", "bench_loop_lag.py", "bench_saved_copy.py",
    "bench_batch_api.py", "bench_growth.py", "bench_versus.py",
)
OTHER_QUICK_ARGS = {  # what --quick passes on to each (their own smoke settings)
    "bench_frames.py": ["--rows", "100000", "--batch", "200"],
    "bench_provider.py": ["--runs", "3"],
    "bench_evals.py": ["--cases", "100", "--repeats", "1"],
    "bench_replay.py": ["--runs", "20"],
    "bench_guards.py": ["--runs", "300", "--streams", "3"],
    "bench_responses.py": ["--deltas", "1000", "--runs", "3", "--round-trips", "10"],
    "bench_loop_lag.py": ["--deltas", "1000", "--runs", "1"],
    "bench_saved_copy.py": ["--runs", "10"],
    "bench_growth.py": ["--quick"],
    "bench_anthropic.py": ["--deltas", "1000", "--runs", "3", "--round-trips", "10"],
    "bench_batch_api.py": ["--quick"],
    "bench_versus.py": ["--quick"],
}

os.environ.setdefault("PYDANTIC_AI_NO_BANNER", "1")
os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")
logging.getLogger("openai.agents").setLevel(logging.ERROR)  # "no API key, skipping trace export"

now_ns = time.perf_counter_ns
cpu_ns = time.process_time_ns

# ---------------------------------------------------------------------------------------------
# What every fake model says and what the tool does. The names below (PROMPT, TOOL_NAME, Call,
# Turn, RunOut, Unsupported, make_tool, and the scenario fields turns / stream / sync_tool) are the
# adapter contract of the shared harness, so bench/peers_adapter.py works with both.
# ---------------------------------------------------------------------------------------------
PROMPT = "What is the weather in Paris?"
ANSWER = "It is sunny."
TOOL_NAME = "get_weather"
TOOL_DOC = "Get the current weather for a city."
STEPS = 50
PARALLEL = 8
DELTAS = 10_000


@dataclass(frozen=True)
class Call:
    """One tool call the fake model asks for."""

    id: str
    name: str
    args: dict[str, Any]
    args_json: str


@dataclass(frozen=True)
class Turn:
    """One model answer: tool calls, or text (streamed as `deltas` when the scenario streams)."""

    calls: tuple[Call, ...] = ()
    text: str = ""
    deltas: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    """A scenario and how often it is timed."""

    key: str
    title: str
    turns: tuple[Turn, ...]
    tool_calls: int
    tool_sleep: float = 0.0
    sync_tool: bool = False
    stream: bool = False
    warmup: int = 5
    runs: int = 100
    block: int = 10
    budget_s: float = 20.0
    min_runs: int = 3

    @property
    def expected_text(self) -> str:
        last = self.turns[-1]
        return "".join(last.deltas) if last.deltas else last.text


@dataclass
class RunOut:
    """What one run returns: the final text and, when streaming, the events seen."""

    text: str
    events: int = 0


class Unsupported(Exception):
    """An adapter cannot express a scenario."""


RunFn = Callable[[], Awaitable[RunOut]]


class Script:
    """The cursor shared by one framework's fake model and its tool."""

    __slots__ = ("i", "model_stamps", "scenario", "tool_calls", "tool_starts", "turns")

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.turns = scenario.turns
        self.reset()

    @property
    def spec(self) -> Scenario:
        """The scenario (the shared contract's name for it)."""
        return self.scenario

    def reset(self) -> None:
        """Start a new run."""
        self.i = 0
        self.tool_calls = 0
        self.model_stamps: list[int] = []
        self.tool_starts: list[int] = []

    def next(self) -> Turn:
        """The next model answer (call exactly once per model request)."""
        self.model_stamps.append(now_ns())
        turn = self.turns[self.i]
        self.i += 1
        return turn

    @property
    def stamps(self) -> list[int]:
        """When each model request came (perf_counter ns)."""
        return self.model_stamps


def make_tool(script: Script) -> Callable[..., Any]:
    """The one tool every framework registers (async def, or a plain def for S1s)."""
    sc = script.scenario
    if sc.sync_tool:

        def get_weather(city: str) -> str:
            script.tool_calls += 1
            return f"Sunny, 22 C in {city}"

    elif sc.tool_sleep:
        delay = sc.tool_sleep

        async def get_weather(city: str) -> str:
            script.tool_calls += 1
            script.tool_starts.append(now_ns())
            await asyncio.sleep(delay)
            return f"Sunny, 22 C in {city}"

    else:

        async def get_weather(city: str) -> str:
            script.tool_calls += 1
            return f"Sunny, 22 C in {city}"

    get_weather.__doc__ = TOOL_DOC
    return get_weather


def _call(i: int) -> Call:
    return Call(f"call_{i}", TOOL_NAME, {"city": "Paris"}, '{"city": "Paris"}')


SCENARIOS: dict[str, Scenario] = {
    s.key: s
    for s in [
        Scenario(
            "S1",
            "one tool round trip (2 model calls, 1 async tool)",
            (Turn(calls=(_call(0),)), Turn(text=ANSWER)),
            1,
            warmup=100,
            runs=1000,
            block=100,
        ),
        Scenario(
            "S1s",
            "one tool round trip, sync `def` tool",
            (Turn(calls=(_call(0),)), Turn(text=ANSWER)),
            1,
            sync_tool=True,
            warmup=50,
            runs=500,
            block=50,
            budget_s=12.0,
        ),
        Scenario(
            "S2",
            f"{STEPS}-step tool loop, then the answer",
            (*(Turn(calls=(_call(i),)) for i in range(STEPS)), Turn(text=ANSWER)),
            STEPS,
            warmup=5,
            runs=100,
            block=10,
            min_runs=10,
        ),
        Scenario(
            "S3",
            f"{PARALLEL} parallel tools x asyncio.sleep(0.1)",
            (Turn(calls=tuple(_call(i) for i in range(PARALLEL))), Turn(text=ANSWER)),
            PARALLEL,
            tool_sleep=0.1,
            warmup=1,
            runs=7,
            block=1,
            budget_s=8.0,
        ),
        Scenario(
            "S5",
            f"{DELTAS:,} streamed text deltas",
            (Turn(deltas=tuple(f"w{i} " for i in range(DELTAS))),),
            0,
            stream=True,
            warmup=1,
            runs=12,
            block=3,
        ),
    ]
}
ALL_SCENARIOS = ["S1", "S1s", "S2", "S3", "S4", "S5"]


# ---------------------------------------------------------------------------------------------
# Frameworks
# ---------------------------------------------------------------------------------------------
def build_floor(sc: Scenario, script: Script) -> RunFn:
    """The lower bound: a plain async loop over OpenAI-style dicts, no events, no persistence."""
    fn = make_tool(script)
    is_async = inspect.iscoroutinefunction(fn)

    async def complete(messages: list[dict[str, Any]]) -> dict[str, Any]:
        turn = script.next()
        if not turn.calls:
            return {"role": "assistant", "content": turn.text}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.args_json}}
                for c in turn.calls
            ],
        }

    async def run_call(call: dict[str, Any]) -> dict[str, Any]:
        kwargs = json.loads(call["function"]["arguments"])
        value = await fn(**kwargs) if is_async else await asyncio.to_thread(fn, **kwargs)
        return {"role": "tool", "tool_call_id": call["id"], "content": str(value)}

    async def run() -> RunOut:
        script.reset()
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
        while True:
            answer = await complete(messages)
            messages.append(answer)
            calls = answer.get("tool_calls")
            if not calls:
                return RunOut(answer["content"])
            if len(calls) == 1:
                messages.append(await run_call(calls[0]))
            else:
                messages.extend(await asyncio.gather(*map(run_call, calls)))

    async def stream() -> RunOut:
        script.reset()
        pieces: list[str] = []
        n = 0

        async def deltas():  # the fake streaming call
            for d in script.next().deltas:
                yield {"type": "delta", "text": d}

        async def events():  # the loop's own event stream
            async for ev in deltas():
                pieces.append(ev["text"])
                yield ev
            yield {"type": "end", "text": "".join(pieces)}

        last: dict[str, Any] = {}
        async for last in events():  # noqa: B007  (the last event carries the text)
            n += 1
        return RunOut(last["text"], n)

    return stream if sc.stream else run


def build_nbagent(sc: Scenario, script: Script, store: str = "default") -> RunFn:
    """nbagent through bench/peers_adapter.py (the adapter the shared harness uses too)."""
    path = BENCH / "peers_adapter.py"
    spec = importlib.util.spec_from_file_location("nbagent_peers_adapter", path)
    assert spec is not None and spec.loader is not None
    adapter = sys.modules.get(spec.name)
    if adapter is None:
        adapter = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(adapter)
        sys.modules[spec.name] = adapter
    if not adapter.AVAILABLE:
        raise Unsupported(adapter.SKIP_REASON)
    return adapter.build(sc, script, sys.modules[__name__], store=store)  # type: ignore[no-any-return]


def build_nbagent_mem(sc: Scenario, script: Script) -> RunFn:
    """nbagent with ``store=MemoryStore()``."""
    return build_nbagent(sc, script, store="memory")


def build_langgraph(sc: Scenario, script: Script, checkpointer: bool = False) -> Any:
    """LangGraph through LangChain's current agent API, ``langchain.agents.create_agent``.

    With ``checkpointer=True`` the returned function takes ``(saver, config)`` and builds the
    agent with that checkpointer on its first call (see `build_langgraph_sqlite`)."""
    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, AIMessageChunk
    from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

    class FakeChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "bench-fake"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=tools, **kwargs)

        def _answer(self) -> ChatResult:
            turn = script.next()
            calls = [
                {"name": c.name, "args": dict(c.args), "id": c.id, "type": "tool_call"} for c in turn.calls
            ]
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage(content=turn.text, tool_calls=calls))]
            )

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            return self._answer()

        async def _agenerate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            return self._answer()

        async def _astream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            turn = script.next()
            for d in turn.deltas or (turn.text,):
                yield ChatGenerationChunk(message=AIMessageChunk(content=d))

    tool = make_tool(script)
    config = {"recursion_limit": 1000}
    if checkpointer:
        made: dict[str, Any] = {}

        async def run_with(saver: Any, extra: dict[str, Any]) -> RunOut:
            script.reset()
            if "agent" not in made:
                made["agent"] = create_agent(FakeChat(), tools=[tool], name="bench", checkpointer=saver)
            if sc.stream:
                raise Unsupported("streaming is measured without a checkpointer")
            state = await made["agent"].ainvoke(
                {"messages": [{"role": "user", "content": PROMPT}]}, config={**config, **extra}
            )
            return RunOut(state["messages"][-1].content)

        return run_with
    agent = create_agent(FakeChat(), tools=[tool], name="bench")

    async def run() -> RunOut:
        script.reset()
        state = await agent.ainvoke({"messages": [{"role": "user", "content": PROMPT}]}, config=config)
        return RunOut(state["messages"][-1].content)

    async def stream() -> RunOut:
        script.reset()
        n = 0
        text: list[str] = []
        async for chunk, _meta in agent.astream(
            {"messages": [{"role": "user", "content": PROMPT}]}, config=config, stream_mode="messages"
        ):
            n += 1
            if isinstance(chunk, AIMessageChunk) and chunk.content:
                text.append(chunk.content)
        return RunOut("".join(text), n)

    return stream if sc.stream else run


def build_langgraph_sqlite(sc: Scenario, script: Script) -> RunFn:
    """LangGraph with its SQLite checkpointer (AsyncSqliteSaver), a new thread per run: durable
    like nbagent's default store. Informative: not counted as "best peer"."""
    try:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError as exc:
        raise Unsupported(f"langgraph-checkpoint-sqlite is not installed ({exc})") from None
    import uuid

    if sc.stream:
        raise Unsupported("streaming is measured without a checkpointer")
    inner = build_langgraph(sc, script, checkpointer=True)
    box: dict[str, Any] = {}

    async def setup() -> None:
        import aiosqlite

        conn = await aiosqlite.connect("langgraph-checkpoints.db")
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        box["saver"] = saver

    async def run() -> RunOut:
        if "saver" not in box:
            await setup()
        return await inner(box["saver"], {"configurable": {"thread_id": uuid.uuid4().hex}})  # type: ignore[call-arg]

    async def aclose() -> None:  # before the event loop closes (aiosqlite's worker thread needs it)
        saver = box.pop("saver", None)
        if saver is not None:
            await saver.conn.close()

    run.aclose = aclose  # type: ignore[attr-defined]
    return run


def build_pydantic_ai(sc: Scenario, script: Script) -> RunFn:
    """pydantic-ai's Agent with its FunctionModel (usage given, so it does not estimate tokens)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelResponse,
        PartDeltaEvent,
        PartStartEvent,
        TextPart,
        TextPartDelta,
        ToolCallPart,
    )
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RequestUsage, UsageLimits

    async def answer(messages: Any, info: Any) -> ModelResponse:
        turn = script.next()
        parts: list[Any] = [
            ToolCallPart(tool_name=c.name, args=c.args_json, tool_call_id=c.id) for c in turn.calls
        ]
        return ModelResponse(
            parts=parts or [TextPart(content=turn.text)], usage=RequestUsage(input_tokens=10, output_tokens=5)
        )

    async def stream_answer(messages: Any, info: Any) -> Any:
        turn = script.next()
        for d in turn.deltas or (turn.text,):
            yield d

    agent = Agent(
        FunctionModel(answer, stream_function=stream_answer, model_name="bench"),
        tools=[make_tool(script)],
        name="bench",
    )
    limits = UsageLimits(request_limit=None)

    async def run() -> RunOut:
        script.reset()
        result = await agent.run(PROMPT, usage_limits=limits)
        return RunOut(result.output)

    async def stream() -> RunOut:
        script.reset()
        n = 0
        async with agent.run_stream_events(PROMPT, usage_limits=limits) as events:
            async for ev in events:
                n += 1
                if isinstance(ev, PartDeltaEvent):
                    assert isinstance(ev.delta, TextPartDelta)
                elif isinstance(ev, PartStartEvent):
                    assert isinstance(ev.part, TextPart)
            output = events.result.output
        return RunOut(output, n)

    return stream if sc.stream else run


def _openai_agents(sc: Scenario, script: Script, tracing_disabled: bool) -> RunFn:
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseTextDeltaEvent,
    )
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails, ResponseUsage

    def text_item(text: str) -> ResponseOutputMessage:
        return ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])],
        )

    class FakeModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            turn = script.next()
            output: list[Any] = [
                ResponseFunctionToolCall(
                    id=f"fc_{c.id}",
                    call_id=c.id,
                    type="function_call",
                    name=c.name,
                    arguments=c.args_json,
                    status="completed",
                )
                for c in turn.calls
            ] or [text_item(turn.text)]
            return ModelResponse(
                output=output,
                usage=Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15),
                response_id=None,
            )

        async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            turn = script.next()
            deltas = turn.deltas or (turn.text,)
            for i, d in enumerate(deltas):
                yield ResponseTextDeltaEvent(
                    type="response.output_text.delta",
                    item_id="msg_1",
                    output_index=0,
                    content_index=0,
                    delta=d,
                    logprobs=[],
                    sequence_number=i,
                )
            usage = ResponseUsage(
                input_tokens=10,
                output_tokens=len(deltas),
                total_tokens=10 + len(deltas),
                input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            )
            response = Response(
                id="resp_1",
                created_at=0,
                model="bench",
                object="response",
                output=[text_item("".join(deltas))],
                tool_choice="auto",
                tools=[],
                top_p=None,
                parallel_tool_calls=True,
                status="completed",
                usage=usage,
            )
            yield ResponseCompletedEvent(
                type="response.completed", response=response, sequence_number=len(deltas)
            )

    agent = Agent(name="bench", model=FakeModel(), tools=[function_tool(make_tool(script))])
    config = RunConfig(tracing_disabled=tracing_disabled)

    async def run() -> RunOut:
        script.reset()
        result = await Runner.run(agent, PROMPT, max_turns=1000, run_config=config)
        return RunOut(result.final_output)

    async def stream() -> RunOut:
        script.reset()
        n = 0
        result = Runner.run_streamed(agent, PROMPT, max_turns=1000, run_config=config)
        async for _ev in result.stream_events():
            n += 1
        return RunOut(result.final_output, n)

    return stream if sc.stream else run


def build_openai_agents(sc: Scenario, script: Script) -> RunFn:
    """The OpenAI Agents SDK's Runner with a custom Model; tracing as by default (on)."""
    return _openai_agents(sc, script, tracing_disabled=False)


def build_openai_agents_notrace(sc: Scenario, script: Script) -> RunFn:
    """The same with ``RunConfig(tracing_disabled=True)``."""
    return _openai_agents(sc, script, tracing_disabled=True)


@dataclass(frozen=True)
class Framework:
    """A framework entry: how to build a run, what a user imports, which packages it is."""

    name: str
    build: Callable[[Scenario, Script], RunFn]
    import_stmt: str
    packages: tuple[str, ...]
    role: str  # "floor" | "nbagent" | "peer" | "durable" (a peer with persistence on: informative)


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in [
        Framework("floor", build_floor, "import asyncio, json", (), "floor"),
        Framework("nbagent", build_nbagent, "import nbagent", ("nbagent",), "nbagent"),
        Framework("nbagent_mem", build_nbagent_mem, "import nbagent", ("nbagent",), "nbagent"),
        Framework(
            "langgraph",
            build_langgraph,
            "from langchain.agents import create_agent",
            ("langgraph", "langchain", "langchain-core"),
            "peer",
        ),
        Framework(
            "langgraph_sqlite",
            build_langgraph_sqlite,
            "from langchain.agents import create_agent",
            ("langgraph", "langgraph-checkpoint-sqlite", "aiosqlite"),
            "durable",
        ),
        Framework(
            "pydantic_ai",
            build_pydantic_ai,
            "from pydantic_ai import Agent",
            ("pydantic-ai-slim", "pydantic"),
            "peer",
        ),
        Framework(
            "openai_agents",
            build_openai_agents,
            "from agents import Agent, Runner",
            ("openai-agents", "openai"),
            "peer",
        ),
        Framework(
            "openai_agents_notrace",
            build_openai_agents_notrace,
            "from agents import Agent, Runner",
            ("openai-agents", "openai"),
            "peer",
        ),
    ]
}

TARGETS = {  # nbagent / best in-memory peer, the project's goals
    "S1": 0.05,  # the core, with MemoryStore (nbagent_mem)
    "S1s": 0.05,
    "S2": 0.05,
    "S3": 1.05,  # of the ideal 100 ms, not of a peer
    "S4": 0.20,
    "S5": 0.25,
}
GUARD_TARGET = 0.25
"""S1/S2 with the durable default store, against the best in-memory peer (a guard rail)."""
DURABLE_TARGET = 0.20
"""S1/S2 with the durable default store, against LangGraph with its SQLite checkpointer."""
GROWTH_TARGET = 1.2


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------
def stats(xs: list[float]) -> dict[str, float]:
    """n, median, p10, p90, min of a sample."""
    if not xs:
        return {"n": 0, "median": float("nan"), "p10": float("nan"), "p90": float("nan"), "min": float("nan")}
    s = sorted(xs)

    def q(p: float) -> float:
        k = (len(s) - 1) * p
        lo = int(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {"n": len(s), "median": q(0.5), "p10": q(0.1), "p90": q(0.9), "min": s[0]}


def check(sc: Scenario, script: Script, out: RunOut, name: str) -> None:
    """Every run must do the scripted work: right answer, every tool call, every model call."""
    problems = []
    if out.text != sc.expected_text:
        problems.append(f"answer {out.text[:40]!r}")
    if script.tool_calls != sc.tool_calls:
        problems.append(f"{script.tool_calls} tool calls (expected {sc.tool_calls})")
    if script.i != len(sc.turns):
        problems.append(f"{script.i} model calls (expected {len(sc.turns)})")
    if problems:
        raise AssertionError(f"{name}/{sc.key}: " + ", ".join(problems))


async def count_python_calls(fn: RunFn, runs: int) -> float:
    """Python function calls per run (cProfile; deterministic, unlike time)."""
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        await fn()
    prof.disable()
    prof.create_stats()
    return sum(v[1] for v in prof.stats.values()) / runs  # type: ignore[attr-defined]


async def measure(sc: Scenario, names: list[str], scale: float, seed: int) -> dict[str, Any]:
    """Build each framework once, warm it up, then time runs in shuffled, interleaved blocks."""
    runners: dict[str, tuple[RunFn, Script]] = {}
    out: dict[str, Any] = {}
    for name in names:
        script = Script(sc)
        try:
            fn = FRAMEWORKS[name].build(sc, script)
            for _ in range(max(1, int(sc.warmup * scale))):
                check(sc, script, await fn(), name)
        except Unsupported as exc:
            out[name] = {"skipped": str(exc)}
            print(f"  {name:<22} skipped: {exc}", flush=True)
            continue
        except ImportError as exc:
            out[name] = {"skipped": f"not installed: {exc}"}
            print(f"  {name:<22} skipped (not installed): {exc}", flush=True)
            continue
        runners[name] = (fn, script)

    target = max(sc.min_runs, int(sc.runs * scale))
    block = max(1, min(sc.block, target))
    budget_ns = sc.budget_s * max(scale, 0.05) ** 0.5 * 1e9
    wall: dict[str, list[float]] = {n: [] for n in runners}
    cpu: dict[str, list[float]] = {n: [] for n in runners}
    early: dict[str, list[float]] = {n: [] for n in runners}
    late: dict[str, list[float]] = {n: [] for n in runners}
    events: dict[str, list[int]] = {n: [] for n in runners}
    spread: dict[str, list[float]] = {n: [] for n in runners}
    spent = dict.fromkeys(runners, 0)
    rng = random.Random(seed)
    while True:
        todo = [
            n
            for n in runners
            if len(wall[n]) < target and (spent[n] < budget_ns or len(wall[n]) < sc.min_runs)
        ]
        if not todo:
            break
        rng.shuffle(todo)
        for name in todo:
            fn, script = runners[name]
            gc.collect()
            for _ in range(min(block, target - len(wall[name]))):
                c0, t0 = cpu_ns(), now_ns()
                result = await fn()
                dt, dc = now_ns() - t0, cpu_ns() - c0
                check(sc, script, result, name)
                wall[name].append(dt / 1e3)
                cpu[name].append(dc / 1e3)
                spent[name] += dt
                if sc.key == "S2":
                    st = script.model_stamps
                    steps = [(b - a) / 1e3 for a, b in itertools.pairwise(st)]
                    early[name].append(statistics.fmean(steps[:10]))
                    late[name].append(statistics.fmean(steps[-10:]))
                elif sc.key == "S3":
                    ts = script.tool_starts
                    spread[name].append((max(ts) - min(ts)) / 1e3)
                elif sc.key == "S5":
                    events[name].append(result.events)

    for name, (fn, _script) in runners.items():
        r: dict[str, Any] = {"wall_us": stats(wall[name]), "cpu_us": stats(cpu[name])}
        if sc.key in ("S1", "S1s", "S2"):
            r["py_calls_per_run"] = await count_python_calls(fn, 1 if sc.key == "S2" else 10)
        if sc.key == "S2":
            r["per_step_wall_us"] = r["wall_us"]["median"] / STEPS
            r["per_step_cpu_us"] = r["cpu_us"]["median"] / STEPS
            r["steps_1_10_us"] = stats(early[name])
            r["steps_41_50_us"] = stats(late[name])
            r["growth"] = r["steps_41_50_us"]["median"] / r["steps_1_10_us"]["median"]
        elif sc.key == "S3":
            r["tool_start_spread_us"] = stats(spread[name])
        elif sc.key == "S5":
            r["events"] = statistics.median(events[name])
            r["cpu_per_delta_us"] = r["cpu_us"]["median"] / DELTAS
            r["wall_per_delta_us"] = r["wall_us"]["median"] / DELTAS
        out[name] = r
        print(
            f"  {name:<22} n={r['wall_us']['n']:<5} wall median {fmt_us(r['wall_us']['median']):>9}  "
            f"cpu median {fmt_us(r['cpu_us']['median']):>9}",
            flush=True,
        )
    for fn, _script in runners.values():
        aclose = getattr(fn, "aclose", None)
        if aclose is not None:
            await aclose()
    return out


def measure_imports(names: list[str], repeats: int) -> dict[str, Any]:
    """S4: wall time of a fresh interpreter running each import statement, minus a bare one."""
    stmts: dict[str, str] = {"(bare python)": "pass"}
    for name in names:
        stmt = FRAMEWORKS[name].import_stmt
        if stmt not in stmts.values():
            stmts[name] = stmt
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    ok: dict[str, str] = {}
    for key, stmt in stmts.items():  # warm the .pyc and page caches; drop what is not installed
        p = subprocess.run([sys.executable, "-c", stmt], env=env, capture_output=True, text=True)
        if p.returncode == 0:
            ok[key] = stmt
        else:
            print(f"  {key:<22} skipped: {p.stderr.strip().splitlines()[-1:]}", flush=True)
    samples: dict[str, list[float]] = {k: [] for k in ok}
    order = list(ok)
    for _ in range(repeats):
        random.shuffle(order)
        for key in order:
            t0 = now_ns()
            subprocess.run([sys.executable, "-c", ok[key]], env=env, check=True, capture_output=True)
            samples[key].append((now_ns() - t0) / 1e6)
    bare = statistics.median(samples["(bare python)"])
    out: dict[str, Any] = {}
    for key, stmt in ok.items():
        p = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", stmt], env=env, capture_output=True, text=True
        )
        modules = sum(
            1
            for line in p.stderr.splitlines()
            if line.startswith("import time:") and "cumulative" not in line
        )
        med = statistics.median(samples[key])
        out[key] = {
            "stmt": stmt,
            "wall_ms": stats(samples[key]),
            "over_bare_ms": med - bare,
            "modules": modules,
        }
        print(
            f"  {key:<22} {med:8.1f} ms  (+{med - bare:7.1f} ms over bare python, {modules} modules)",
            flush=True,
        )
    return out


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def fmt_us(x: float) -> str:
    """A duration given in microseconds, readable."""
    if x != x:
        return "-"
    if x >= 10_000:
        return f"{x / 1e3:,.1f} ms"
    if x >= 100:
        return f"{x:,.0f} us"
    return f"{x:.1f} us"


def table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """A markdown table, the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        cells = (
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        return "| " + " | ".join(cells) + " |"

    sep = (
        "|" + "|".join("-" * (w + 2) if i < left else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    )
    return "\n".join([line(header), sep, *map(line, rows)])


def key_metrics(skey: str, r: dict[str, Any]) -> tuple[float, float]:
    """(CPU, wall) figure compared across frameworks for a scenario."""
    if skey == "S2":
        return r["per_step_cpu_us"], r["per_step_wall_us"]
    if skey == "S5":
        return r["cpu_per_delta_us"], r["wall_per_delta_us"]
    return r["cpu_us"]["median"], r["wall_us"]["median"]


def report(results: dict[str, Any], names: list[str]) -> str:
    """Per-scenario tables and the nbagent / best-peer summary."""
    sc = results["scenarios"]
    parts: list[str] = []
    for skey in ("S1", "S1s", "S2", "S3", "S5"):
        if skey not in sc:
            continue
        rows = []
        for n in names:
            r = sc[skey].get(n)
            if r is None:
                continue
            if "skipped" in r:
                rows.append([n, "skip"] + [""] * 4)
                continue
            w, c = r["wall_us"], r["cpu_us"]
            if skey == "S2":
                extra = [
                    fmt_us(r["per_step_cpu_us"]),
                    fmt_us(r["steps_1_10_us"]["median"]),
                    fmt_us(r["steps_41_50_us"]["median"]),
                    f"x{r['growth']:.2f}",
                ]
            elif skey == "S3":
                extra = [fmt_us(r["tool_start_spread_us"]["median"])]
            elif skey == "S5":
                extra = [f"{r['cpu_per_delta_us']:.2f} us", f"{r['events']:,.0f}"]
            else:
                extra = [f"{r['py_calls_per_run']:,.0f}"]
            rows.append([n, fmt_us(w["median"]), fmt_us(w["p90"]), fmt_us(c["median"]), str(w["n"]), *extra])
        head = ["framework", "wall median", "wall p90", "CPU median", "runs"]
        head += {
            "S2": ["CPU/step", "steps 1-10", "steps 41-50", "late/early"],
            "S3": ["tool start spread"],
            "S5": ["CPU/delta", "events"],
        }.get(skey, ["py calls/run"])
        rows = [r + [""] * (len(head) - len(r)) for r in rows]
        parts.append(f"### {skey}: {SCENARIOS[skey].title}\n\n" + table(head, rows))
    if "S4" in sc:
        rows = [
            [
                k,
                v["stmt"],
                f"{v['wall_ms']['median']:,.0f} ms",
                f"{v['over_bare_ms']:,.0f} ms",
                str(v["modules"]),
            ]
            for k, v in sc["S4"].items()
        ]
        parts.append(
            "### S4: import time (fresh interpreter per sample)\n\n"
            + table(["entry", "statement", "wall median", "over bare python", "modules"], rows, left=2)
        )
    parts.append(
        "### nbagent / best peer (targets: the core with MemoryStore <= 0.05x of the in-memory peers; "
        "the durable default <= 0.2x of LangGraph with its SQLite checkpointer and <= 0.25x of the "
        "in-memory peers)\n\n"
        + table(
            ["scenario", "variant", "nbagent", "best peer", "ratio (CPU)", "ratio (wall)", "target", "met"],
            summary_rows(results, names),
            left=2,
        )
    )
    return "\n\n".join(parts)


def summary_rows(results: dict[str, Any], names: list[str]) -> list[list[str]]:
    """One row per scenario and nbagent variant; fills results["summary"]."""
    sc = results["scenarios"]
    peers = [n for n in names if FRAMEWORKS[n].role == "peer"]
    variants = [n for n in names if FRAMEWORKS[n].role == "nbagent"]
    rows: list[list[str]] = []
    summary: list[dict[str, Any]] = []
    for skey in ("S1", "S1s", "S2", "S3", "S4", "S5"):
        if skey not in sc:
            continue
        data = sc[skey]
        if skey == "S4":
            if "nbagent" not in data:
                continue
            ok_peers = [p for p in peers if p in data]
            if not ok_peers:
                continue
            best = min(ok_peers, key=lambda p: data[p]["over_bare_ms"])
            ratio = data["nbagent"]["over_bare_ms"] / data[best]["over_bare_ms"]
            met = ratio <= TARGETS["S4"]
            rows.append(
                [
                    "S4 import",
                    "nbagent",
                    f"{data['nbagent']['over_bare_ms']:,.0f} ms",
                    f"{best} {data[best]['over_bare_ms']:,.0f} ms",
                    "-",
                    f"{ratio:.3f}x",
                    "<= 0.2x",
                    "yes" if met else "NO",
                ]
            )
            summary.append(
                {"scenario": "S4", "variant": "nbagent", "best_peer": best, "ratio_wall": ratio, "met": met}
            )
            continue
        ok_peers = [p for p in peers if p in data and "skipped" not in data[p]]
        for v in variants:
            r = data.get(v)
            if r is None or "skipped" in r:
                continue
            if skey == "S3":
                ratio = r["wall_us"]["median"] / 100_000
                met = ratio <= TARGETS["S3"]
                best = min(ok_peers, key=lambda p: data[p]["wall_us"]["median"]) if ok_peers else None
                rows.append(
                    [
                        "S3 parallel",
                        v,
                        fmt_us(r["wall_us"]["median"]),
                        f"{best} {fmt_us(data[best]['wall_us']['median'])}" if best else "-",
                        "-",
                        f"{ratio:.3f}x of 100 ms",
                        "<= 1.05x",
                        "yes" if met else "NO",
                    ]
                )
                summary.append({"scenario": "S3", "variant": v, "ratio_of_ideal": ratio, "met": met})
                continue
            if not ok_peers:
                continue
            best = min(ok_peers, key=lambda p: key_metrics(skey, data[p])[0])
            mc, mw = key_metrics(skey, r)
            bc = key_metrics(skey, data[best])[0]
            rc = mc / bc
            best_w = min(key_metrics(skey, data[p])[1] for p in ok_peers)
            rw = mw / best_w
            goal = GUARD_TARGET if (v == "nbagent" and skey in ("S1", "S1s", "S2")) else TARGETS[skey]
            met = rc <= goal
            label = {
                "S1": "S1 round trip",
                "S1s": "S1s sync tool",
                "S2": "S2 per step",
                "S5": "S5 per delta",
            }[skey]
            rows.append(
                [
                    label,
                    v,
                    fmt_us(mc),
                    f"{best} {fmt_us(bc)}",
                    f"{rc:.3f}x",
                    f"{rw:.3f}x",
                    f"<= {goal}x",
                    "yes" if met else "NO",
                ]
            )
            entry = {
                "scenario": skey,
                "variant": v,
                "best_peer": best,
                "ratio_cpu": rc,
                "ratio_wall": rw,
                "met": met,
            }
            durable = [
                n
                for n in names
                if FRAMEWORKS[n].role == "durable" and "skipped" not in data.get(n, {"skipped": 1})
            ]
            if v == "nbagent" and durable and skey not in ("S5",):
                d = durable[0]
                dc, dw = key_metrics(skey, data[d])
                rows.append(
                    [
                        label + ", durable",
                        v,
                        fmt_us(mc),
                        f"{d} {fmt_us(dc)}",
                        f"{mc / dc:.3f}x",
                        f"{mw / dw:.3f}x",
                        f"<= {DURABLE_TARGET}x",
                        "yes" if mc / dc <= DURABLE_TARGET else "NO",
                    ]
                )
                entry["vs_durable_peer"] = {"peer": d, "ratio_cpu": mc / dc, "ratio_wall": mw / dw,
                                            "met": mc / dc <= DURABLE_TARGET}
            if skey == "S2":
                g = r["growth"]
                gm = g <= GROWTH_TARGET
                rows.append(
                    [
                        "S2 growth",
                        v,
                        f"x{g:.2f}",
                        "-",
                        "-",
                        "-",
                        f"<= {GROWTH_TARGET}x",
                        "yes" if gm else "NO",
                    ]
                )
                entry["growth"], entry["growth_met"] = g, gm
            summary.append(entry)
    results["summary"] = summary
    return rows


# ---------------------------------------------------------------------------------------------
# The other benches in bench/
# ---------------------------------------------------------------------------------------------
def run_other_benches(quick: bool, timeout_s: float) -> list[dict[str, Any]]:
    """Run each of the project's other bench scripts that exists, as a subprocess.

    A script whose text names ``.venv-peers`` runs with this interpreter (the peers venv); the
    others with the project's venv (.venv/bin/python, which has every extra) when there is one.
    With ``quick`` each gets its smoke settings (`OTHER_QUICK_ARGS`, else ``--quick`` when the
    script mentions it).
    """
    project_python = ROOT / ".venv" / "bin" / "python"
    done = []
    for name in OTHER_BENCHES:
        path = BENCH / name
        if not path.exists():
            print(f"== {name}: not present, skipped", flush=True)
            done.append({"bench": name, "status": "absent"})
            continue
        source = path.read_text(errors="replace")
        peers = ".venv-peers" in source or not project_python.exists()
        cmd = [sys.executable if peers else str(project_python), str(path)]
        if quick:
            cmd += OTHER_QUICK_ARGS.get(name, ["--quick"] if "--quick" in source else [])
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
            status = "ok" if p.returncode == 0 else f"exit {p.returncode}"
            stdout, stderr = p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            status = f"timeout after {timeout_s:.0f} s"
            stdout = (
                exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            )
            stderr = (
                exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            )
        print(stdout.rstrip(), flush=True)
        if status != "ok":
            print(f"   {name}: {status}\n{stderr[-2000:]}", flush=True)
        done.append(
            {
                "bench": name,
                "cmd": cmd,
                "status": status,
                "seconds": round(time.perf_counter() - t0, 1),
                "stdout_tail": stdout[-4000:],
                "stderr_tail": stderr[-2000:],
            }
        )
    return done


# ---------------------------------------------------------------------------------------------
def versions(names: list[str]) -> dict[str, str | None]:
    """Installed versions of the measured packages."""
    out: dict[str, str | None] = {}
    for pkg in sorted({p for n in names for p in FRAMEWORKS[n].packages} | {"pydantic"}):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line options."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-s", "--scenarios", default="all", help="comma list of " + ",".join(ALL_SCENARIOS))
    ap.add_argument("-f", "--frameworks", default="all", help="comma list of " + ",".join(FRAMEWORKS))
    ap.add_argument("--quick", action="store_true", help="smoke run: few runs per scenario, 3 import samples")
    ap.add_argument(
        "--scale", type=float, default=None, help="multiply the run counts (default 1, --quick 0.1)"
    )
    ap.add_argument(
        "--import-repeats", type=int, default=None, help="S4 samples per entry (default 9, --quick 3)"
    )
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--json", default=None, help="result file (default bench/results/run-<utc>.json)")
    ap.add_argument("--no-other", action="store_true", help="do not run the other bench_*.py scripts")
    ap.add_argument("--other-only", action="store_true", help="run only the other bench_*.py scripts")
    ap.add_argument("--other-timeout", type=float, default=900.0, help="seconds per other bench script")
    ap.add_argument("--keep-store", action="store_true", help="keep the scratch folder of the default store")
    a = ap.parse_args(argv)
    a.scenarios = (
        ALL_SCENARIOS if a.scenarios == "all" else [s.strip() for s in a.scenarios.split(",") if s.strip()]
    )
    a.frameworks = (
        list(FRAMEWORKS)
        if a.frameworks == "all"
        else [f.strip() for f in a.frameworks.split(",") if f.strip()]
    )
    for s in a.scenarios:
        if s not in ALL_SCENARIOS:
            ap.error(f"unknown scenario {s!r} (choose from {', '.join(ALL_SCENARIOS)})")
    for f in a.frameworks:
        if f not in FRAMEWORKS:
            ap.error(f"unknown framework {f!r} (choose from {', '.join(FRAMEWORKS)})")
    if a.other_only:
        a.scenarios, a.no_other = [], False
    a.scale = a.scale if a.scale is not None else (0.1 if a.quick else 1.0)
    a.import_repeats = a.import_repeats or (3 if a.quick else 9)
    return a


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    """Every requested scenario, one after the other."""
    results: dict[str, Any] = {
        "meta": {
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": platform.python_version(),
            "platform": platform.platform(terse=True),
            "cpus": os.cpu_count(),
            "scale": args.scale,
            "frameworks": args.frameworks,
            "argv": sys.argv[1:],
        },
        "versions": versions(args.frameworks),
        "scenarios": {},
    }
    for skey in args.scenarios:
        t0 = time.perf_counter()
        if skey == "S4":
            print(f"== S4 import time ({args.import_repeats} fresh interpreters per entry)", flush=True)
            results["scenarios"]["S4"] = measure_imports(args.frameworks, args.import_repeats)
        else:
            print(f"== {skey} {SCENARIOS[skey].title}", flush=True)
            results["scenarios"][skey] = await measure(
                SCENARIOS[skey], args.frameworks, args.scale, args.seed
            )
        print(f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, print the report, write the JSON; then the other benches."""
    args = parse_args(argv)
    if os.environ.pop("NBAGENT_STORE", None) is not None:
        print("note: NBAGENT_STORE is ignored here: `nbagent` measures the default store", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    scratch = RESULTS / f"scratch-{stamp}-{os.getpid()}"
    scratch.mkdir(parents=True)
    cwd = os.getcwd()
    os.chdir(scratch)  # the default store lives in ./.nbagent/ of the working directory
    t0 = time.perf_counter()
    try:
        results = asyncio.run(amain(args))
    finally:
        os.chdir(cwd)
        if not args.keep_store:
            shutil.rmtree(scratch, ignore_errors=True)
    results["meta"]["seconds"] = round(time.perf_counter() - t0, 1)
    text = report(results, args.frameworks) if args.scenarios else ""
    if text:
        print()
        print(text)
        print()
        print("versions:", ", ".join(f"{k}=={v}" for k, v in results["versions"].items() if v))
    if not args.no_other:
        results["other_benches"] = run_other_benches(args.quick, args.other_timeout)
    out = Path(args.json) if args.json else RESULTS / f"run-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    if text:
        out.with_suffix(".md").write_text(text + "\n")
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
