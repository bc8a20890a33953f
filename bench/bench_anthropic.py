"""Benchmark `AnthropicModel` against pydantic-ai's Anthropic model and LangChain's `ChatAnthropic`,
each driven over loopback HTTP by the same recorded Messages API stream, in one run.

    bench/.venv-peers/bin/python bench/bench_anthropic.py                 # `make bench` runs it too
    bench/.venv-peers/bin/python bench/bench_anthropic.py --deltas 1000 --runs 3 --round-trips 10

It needs the peers venv (bench/.venv-peers: pydantic-ai-slim[anthropic], langchain-anthropic and
the ``anthropic`` SDK pinned in bench/requirements-peers.txt, nbagent installed editable).

The streams are recorded ones (tests/wire/anthropic_messages), served byte for byte by
`bench_provider.http_server` on 127.0.0.1, one HTTP chunk per event as the API sends them:

- per delta: ``anthropic_stream_text`` (message_start, content_block_start, ping, four text
  deltas, ...), its delta events repeated to ``--deltas``; every consumer counts the text deltas
  it gets, and CPU time (``time.process_time``) per delta is reported;
- per tool round trip: ``anthropic_stream_tool_use`` (a ``weather_forecast`` call), then, once
  the request carries the tool's result, ``anthropic_stream_tool_result_answer``; each framework's
  agent runs its own ``weather_forecast`` tool; CPU time per run is reported.

Consumers. Model level: nbagent's ``AnthropicModel.request_stream``, pydantic-ai's
``AnthropicModel.request_stream``, LangChain's ``ChatAnthropic.astream``. Agent level:
``Agent.stream`` (``store=MemoryStore()``: the peers persist nothing either), pydantic-ai's
``Agent.run_stream`` (``stream_text(delta=True, debounce_by=None)``), LangChain's ``create_agent``
(``astream(stream_mode="messages")``). Floors: ``http`` (the SDK's request, then the body read with
``aiter_bytes``: the transport the SDK's own stream reads through) and ``sdk`` (the SDK's parsed
event stream, which the peers read, and so does nbagent).
The server runs in a forked process: the CPU time measured is the client's alone. Runs are
interleaved; min and median of ``--runs`` are shown.

The ratio per delta at the model level was a target (<= 0.25x the best peer) until 2026-12-02:
nbagent then read the event stream's bytes itself, beside the SDK's decoder, and came in near the
``http`` floor. That reader went (it saved about 16 us a delta, 12.8 -> 28.9 us here, which no
person watching a stream can see; bench/README.md, "Fast paths"); the ratio is now reported, not
a target, and this script exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing
import os
import statistics
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))
os.environ.setdefault("PYDANTIC_AI_NO_BANNER", "1")
os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")

from anthropic import AsyncAnthropic  # noqa: E402
from bench_provider import _timed, http_server  # noqa: E402  (the same server and timing as the OpenAI bench)

from nbagent import Agent  # noqa: E402
from nbagent.messages import UserMessage  # noqa: E402
from nbagent.models.anthropic import AnthropicModel  # noqa: E402
from nbagent.models.base import ModelRequest  # noqa: E402
from nbagent.store.memory import MemoryStore  # noqa: E402
from tests.wire.replay_server import ANTHROPIC_CASES_DIR, load_case, split_sse_events  # noqa: E402

KEY = "sk-ant-bench-not-a-key"
MODEL = "claude-haiku-4-5"
PEERS = ("pydantic_ai", "langchain")


def recorded_events(name: str) -> list[bytes]:
    """The recorded stream `name`, one bytes item per event, exactly as recorded."""
    return [e.encode("utf-8") for e in split_sse_events(load_case(name, ANTHROPIC_CASES_DIR)["response"]["sse"])]


def delta_stream(n: int) -> list[bytes]:
    """``anthropic_stream_text`` with its text delta events repeated to `n` deltas."""
    events = recorded_events("anthropic_stream_text")
    at = [i for i, e in enumerate(events) if e.startswith(b"event: content_block_delta")]
    deltas = [events[i] for i in at]
    return [*events[: at[0]], *(deltas[i % len(deltas)] for i in range(n)), *events[at[-1] + 1 :]]


def round_trip_answers(body: bytes) -> list[bytes]:
    """The tool call first; the final answer once the request carries the tool's result."""
    name = "anthropic_stream_tool_result_answer" if b'"tool_result"' in body else "anthropic_stream_tool_use"
    return ROUND_TRIP[name]


ROUND_TRIP = {n: recorded_events(n) for n in ("anthropic_stream_tool_use", "anthropic_stream_tool_result_answer")}
FINAL = "Here are two great names for your pet pelican"


def weather_forecast(city: str) -> str:
    """The weather forecast for a city."""
    return f"Sunny in {city}"


# ----------------------------------------------------------------------------- consumers, per delta
def delta_consumers(base: str, clients: list[Any]) -> dict[str, Callable[[], Any]]:
    from langchain.agents import create_agent
    from langchain_anthropic import ChatAnthropic
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.messages import ModelRequest as PydanticRequest
    from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.anthropic import AnthropicModel as PydanticAnthropic
    from pydantic_ai.providers.anthropic import AnthropicProvider

    sdk = AsyncAnthropic(api_key=KEY, base_url=base, max_retries=0)
    ours = AnthropicModel(MODEL, api_key=KEY, base_url=base)
    our_agent = Agent(ours, store=MemoryStore())
    theirs = PydanticAnthropic(MODEL, provider=AnthropicProvider(api_key=KEY, base_url=base))
    their_agent = PydanticAgent(theirs)
    chat = ChatAnthropic(model=MODEL, api_key=KEY, base_url=base, max_retries=0)
    chain_agent = create_agent(model=chat, tools=[])
    hi = [{"role": "user", "content": "hi"}]
    clients += [sdk, ours, theirs.client, chat._async_client]

    async def http() -> int:
        chunks = []
        stream = await sdk.messages.create(model=MODEL, max_tokens=100, messages=hi, stream=True)
        async for chunk in stream.response.aiter_bytes():  # (an event may come split in two)
            chunks.append(chunk)
        await stream.close()
        return b"".join(chunks).count(b"event: content_block_delta")

    async def sdk_events() -> int:
        n = 0
        stream = await sdk.messages.create(model=MODEL, max_tokens=100, messages=hi, stream=True)
        async for event in stream:
            n += event.type == "content_block_delta"
        return n

    async def nbagent_model() -> int:
        n = 0
        async for item in ours.request_stream(ModelRequest([UserMessage("hi")])):
            n += type(item) is str
        return n

    async def nbagent_agent() -> int:
        n = 0
        async for event in our_agent.stream("hi"):
            n += event.kind == "text-delta"
        return n

    async def pydantic_ai_model() -> int:
        n = 0
        request = [PydanticRequest.user_text_prompt("hi")]
        async with theirs.request_stream(request, None, ModelRequestParameters()) as stream:
            async for event in stream:
                n += (isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta)) or (
                    isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and bool(event.part.content))
        return n

    async def pydantic_ai_agent() -> int:
        n = 0
        async with their_agent.run_stream("hi") as result:
            async for _ in result.stream_text(delta=True, debounce_by=None):
                n += 1
        return n

    async def langchain_model() -> int:
        n = 0
        async for chunk in chat.astream("hi"):
            n += bool(chunk.content)
        return n

    async def langchain_agent() -> int:
        n = 0
        async for message, _ in chain_agent.astream({"messages": hi}, stream_mode="messages"):
            n += bool(message.content)
        return n

    return {
        "http": http, "sdk": sdk_events,
        "nbagent_model": nbagent_model, "pydantic_ai_model": pydantic_ai_model, "langchain_model": langchain_model,
        "nbagent_agent": nbagent_agent, "pydantic_ai_agent": pydantic_ai_agent, "langchain_agent": langchain_agent,
    }


# ----------------------------------------------------------------------------- consumers, per tool round trip
def round_trip_consumers(base: str, clients: list[Any]) -> dict[str, Callable[[], Any]]:
    from langchain.agents import create_agent
    from langchain_anthropic import ChatAnthropic
    from langchain_core.tools import tool as chain_tool
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.anthropic import AnthropicModel as PydanticAnthropic
    from pydantic_ai.providers.anthropic import AnthropicProvider

    ours = Agent(AnthropicModel(MODEL, api_key=KEY, base_url=base), tools=[weather_forecast], store=MemoryStore())
    theirs = PydanticAgent(PydanticAnthropic(MODEL, provider=AnthropicProvider(api_key=KEY, base_url=base)))
    theirs.tool_plain(weather_forecast)
    chat = ChatAnthropic(model=MODEL, api_key=KEY, base_url=base, max_retries=0, streaming=True)
    chain = create_agent(model=chat, tools=[chain_tool(weather_forecast)])
    clients += [ours.model, theirs.model.client, chat._async_client]

    async def nbagent() -> int:
        async for event in ours.stream("Weather in New York?"):
            last = event
        return int(last.result.status == "completed" and last.result.output.startswith(FINAL))

    async def pydantic_ai() -> int:
        async with theirs.run_stream("Weather in New York?") as result:
            text = await result.get_output()
        return int(text.startswith(FINAL))

    async def langchain() -> int:
        state = await chain.ainvoke({"messages": [{"role": "user", "content": "Weather in New York?"}]})
        return int(state["messages"][-1].text.startswith(FINAL))  # (content: blocks, when streamed)

    return {"nbagent": nbagent, "pydantic_ai": pydantic_ai, "langchain": langchain}


# ----------------------------------------------------------------------------- server, timing
def serve_in_child(answers: Callable[[], Any]) -> tuple[Any, str]:
    """`bench_provider.http_server` answering with ``answers()`` in a forked process, so that
    the CPU time measured here is the client's alone (``time.process_time`` counts every thread
    of this process); returns the process and the base URL (the SDKs add ``/v1/messages``)."""
    context = multiprocessing.get_context("fork")
    urls = context.Queue()

    def serve() -> None:
        urls.put(http_server(answers())[1])
        threading.Event().wait()

    process = context.Process(target=serve, daemon=True)
    process.start()
    return process, urls.get(timeout=60).removesuffix("/v1")


async def timed(consumers: Callable[[str, list[Any]], dict[str, Callable[[], Any]]], base: str, count: int,
                runs: int) -> dict[str, list[float]]:
    """`bench_provider._timed` over the consumers made for `base`, whose SDK clients are closed
    afterwards, inside the event loop that used them."""
    clients: list[Any] = []
    try:
        return await _timed(consumers(base, clients), count, runs)
    finally:
        for client in clients:  # nbagent's model has aclose(), the SDK clients close()
            with contextlib.suppress(Exception):
                await (getattr(client, "aclose", None) or client.close)()


# ----------------------------------------------------------------------------- report
def table(times: dict[str, list[float]], per: int, unit: str) -> dict[str, float]:
    """Print min and median in µs per `unit`; return the medians."""
    us = 1e6 / per
    medians = {}
    print(f"{'consumer':<20}{'min µs/' + unit:>18}{'median µs/' + unit:>21}")
    for name, values in times.items():
        medians[name] = statistics.median(values) * us
        print(f"{name:<20}{min(values) * us:>18.2f}{medians[name]:>21.2f}")
    return medians


def ratio(medians: dict[str, float], ours: str, peers: list[str]) -> tuple[float, str]:
    best = min(peers, key=lambda p: medians[p])
    return medians[ours] / medians[best], best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--deltas", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=7, help="timed runs of each per-delta consumer")
    ap.add_argument("--round-trips", type=int, default=30, help="timed runs of each tool round trip")
    ap.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    a = ap.parse_args(argv)

    server, base = serve_in_child(functools.partial(delta_stream, a.deltas))
    try:
        times = asyncio.run(timed(delta_consumers, base, a.deltas, a.runs))
    finally:
        server.terminate()
    print(f"\nper streamed delta: {a.deltas} deltas of the recorded stream, {a.runs} runs, loopback HTTP "
          "(CPU time)")
    per_delta = table(times, a.deltas, "delta")
    model_ratio, model_best = ratio(per_delta, "nbagent_model", [f"{p}_model" for p in PEERS])
    agent_ratio, agent_best = ratio(per_delta, "nbagent_agent", [f"{p}_agent" for p in PEERS])

    server, base = serve_in_child(lambda: round_trip_answers)
    try:
        times = asyncio.run(timed(round_trip_consumers, base, 1, a.round_trips))
    finally:
        server.terminate()
    print(f"\nper tool round trip (tool call streamed, tool run, answer streamed), {a.round_trips} runs (CPU time)")
    per_trip = table(times, 1, "trip")
    trip_ratio, trip_best = ratio(per_trip, "nbagent", list(PEERS))

    print(f"\nnbagent / best peer, median per delta: model {model_ratio:.2f}x ({model_best}), agent "
          f"{agent_ratio:.2f}x ({agent_best}); per tool round trip {trip_ratio:.2f}x ({trip_best})")
    print(f"loopback transport floor (http) / best peer model: {per_delta['http'] / per_delta[model_best]:.2f}x")
    if a.json:
        print(json.dumps({"per_delta_us": {k: round(v, 3) for k, v in per_delta.items()},
                          "per_round_trip_us": {k: round(v, 1) for k, v in per_trip.items()},
                          "ratios": {"model": round(model_ratio, 3), "agent": round(agent_ratio, 3),
                                     "round_trip": round(trip_ratio, 3)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
