"""Benchmark `OpenAIResponsesModel` against the OpenAI Agents SDK (Responses is its native API) and
pydantic-ai's `OpenAIResponsesModel`, each driven over loopback HTTP by the same recorded Responses
API stream, in one run.

    bench/.venv-peers/bin/python bench/bench_responses.py
    bench/.venv-peers/bin/python bench/bench_responses.py --deltas 1000 --runs 3 --round-trips 10

It needs the peers venv (bench/.venv-peers: openai-agents and pydantic-ai pinned in
bench/requirements-peers.txt, with the ``openai`` SDK).

The streams are recorded ones (tests/wire/openai_responses), served byte for byte by
`bench_provider.http_server` on 127.0.0.1 in a forked process, one HTTP chunk per event:

- per delta: ``responses_stream_text``, its ``response.output_text.delta`` events repeated to
  ``--deltas``; every consumer counts the text deltas it gets; CPU time per delta is reported;
- per tool round trip: ``responses_stream_tool_call_0`` (a ``get_capital`` call), then, once the
  request carries the call's output, ``responses_stream_tool_call_1``; each framework's agent
  runs its own ``get_capital`` tool; CPU time per run is reported.

Consumers. Model level: nbagent's ``OpenAIResponsesModel.request_stream``, the Agents SDK's
``OpenAIResponsesModel.stream_response``, pydantic-ai's ``OpenAIResponsesModel.request_stream``.
Agent level: ``Agent.stream`` (``store=MemoryStore()``), the Agents SDK's
``Runner.run_streamed`` (tracing off), pydantic-ai's ``Agent.run_stream``. nbagent's model and
agent once more with ``sdk_stream=True`` (``*_sdk_stream``: the SDK's parsed events, the switch
kept for a stream nbagent's own reader does not read right). Floors: ``http`` (the SDK's request,
the body read with ``aiter_bytes``) and ``sdk`` (the bare SDK iterating its parsed event stream,
``client.responses.create(stream=True)``, which both peers read). All consumers run interleaved,
one after the other in each of the runs.

Goals (issue #46), reported, this script exits 0: ``Agent.stream`` per delta <= 0.25x the bare
SDK's parsed stream; a tool round trip <= 0.5x the Agents SDK's.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))
os.environ.setdefault("PYDANTIC_AI_NO_BANNER", "1")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from bench_anthropic import ratio, serve_in_child, table, timed  # noqa: E402  (the same server, timing, report)
from openai import AsyncOpenAI  # noqa: E402

from nbagent import Agent  # noqa: E402
from nbagent.messages import UserMessage  # noqa: E402
from nbagent.models.base import ModelRequest  # noqa: E402
from nbagent.models.openai import OpenAIResponsesModel  # noqa: E402
from nbagent.store.memory import MemoryStore  # noqa: E402
from tests.wire.replay_server import RESPONSES_CASES_DIR, load_case, split_sse_events  # noqa: E402

KEY = "sk-bench-not-a-key"
MODEL = "gpt-4o"
PEERS = ("openai_agents", "pydantic_ai")
FINAL = "The capital of France is Paris."


def recorded_events(name: str) -> list[bytes]:
    """The recorded stream `name`, one bytes item per event, exactly as recorded."""
    return [e.encode("utf-8") for e in split_sse_events(load_case(name, RESPONSES_CASES_DIR)["response"]["sse"])]


def delta_stream(n: int) -> list[bytes]:
    """``responses_stream_text`` with its text delta events repeated to `n` deltas."""
    events = recorded_events("responses_stream_text")
    at = [i for i, e in enumerate(events) if e.startswith(b"event: response.output_text.delta")]
    deltas = [events[i] for i in at]
    return [*events[: at[0]], *(deltas[i % len(deltas)] for i in range(n)), *events[at[-1] + 1 :]]


ROUND_TRIP = {n: recorded_events(n) for n in ("responses_stream_tool_call_0", "responses_stream_tool_call_1")}


def round_trip_answers(body: bytes) -> list[bytes]:
    """The tool call first; the final answer once the request carries the call's output."""
    return ROUND_TRIP["responses_stream_tool_call_1" if b"function_call_output" in body
                      else "responses_stream_tool_call_0"]


def get_capital(country: str) -> str:
    """The capital of a country."""
    return "Paris"


def _is_text_delta(event: Any) -> bool:
    from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

    return (isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta)) or (
        isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and bool(event.part.content))


# ----------------------------------------------------------------------------- consumers, per delta
def delta_consumers(base: str, clients: list[Any]) -> dict[str, Callable[[], Any]]:
    from agents import Agent as SdkAgent
    from agents import ModelSettings, Runner, set_tracing_disabled
    from agents.models.interface import ModelTracing
    from agents.models.openai_responses import OpenAIResponsesModel as SdkModel
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.messages import ModelRequest as PydanticRequest
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.openai import OpenAIResponsesModel as PydanticModel
    from pydantic_ai.providers.openai import OpenAIProvider

    set_tracing_disabled(True)
    base = base + "/v1"
    sdk = AsyncOpenAI(api_key=KEY, base_url=base, max_retries=0)
    ours = OpenAIResponsesModel(MODEL, api_key=KEY, base_url=base)
    our_agent = Agent(ours, store=MemoryStore())
    switched = OpenAIResponsesModel(MODEL, api_key=KEY, base_url=base, sdk_stream=True)
    switched_agent = Agent(switched, store=MemoryStore())
    their_client = AsyncOpenAI(api_key=KEY, base_url=base, max_retries=0)
    theirs = SdkModel(MODEL, their_client)
    their_agent = SdkAgent("bench", model=theirs)
    pyd = PydanticModel(MODEL, provider=OpenAIProvider(api_key=KEY, base_url=base))
    pyd_agent = PydanticAgent(pyd)
    clients += [sdk, ours, switched, their_client, pyd.client]

    async def http() -> int:
        chunks = []
        stream = await sdk.responses.create(model=MODEL, input="hi", stream=True)
        async for chunk in stream.response.aiter_bytes():
            chunks.append(chunk)
        await stream.close()
        return b"".join(chunks).count(b"event: response.output_text.delta")

    async def sdk_events() -> int:
        n = 0
        async for event in await sdk.responses.create(model=MODEL, input="hi", stream=True):
            n += event.type == "response.output_text.delta"
        return n

    def model_deltas(model: OpenAIResponsesModel) -> Callable[[], Any]:
        async def consume() -> int:
            n = 0
            async for item in model.request_stream(ModelRequest([UserMessage("hi")])):
                n += type(item) is str
            return n
        return consume

    def agent_deltas(agent: Agent[Any]) -> Callable[[], Any]:
        async def consume() -> int:
            n = 0
            async for event in agent.stream("hi"):
                n += event.kind == "text-delta"
            return n
        return consume

    async def openai_agents_model() -> int:
        n = 0
        async for event in theirs.stream_response(None, "hi", ModelSettings(), [], None, [], ModelTracing.DISABLED):
            n += event.type == "response.output_text.delta"
        return n

    async def openai_agents_agent() -> int:
        n = 0
        result = Runner.run_streamed(their_agent, "hi")
        async for event in result.stream_events():
            n += event.type == "raw_response_event" and event.data.type == "response.output_text.delta"
        return n

    async def pydantic_ai_model() -> int:
        n = 0
        request = [PydanticRequest.user_text_prompt("hi")]
        async with pyd.request_stream(request, None, ModelRequestParameters()) as stream:
            async for event in stream:
                n += _is_text_delta(event)
        return n

    async def pydantic_ai_agent() -> int:
        n = 0
        async with pyd_agent.run_stream("hi") as result:
            async for _ in result.stream_text(delta=True, debounce_by=None):
                n += 1
        return n

    return {
        "http": http, "sdk": sdk_events, "nbagent_model": model_deltas(ours),
        "openai_agents_model": openai_agents_model, "pydantic_ai_model": pydantic_ai_model,
        "nbagent_agent": agent_deltas(our_agent), "openai_agents_agent": openai_agents_agent,
        "pydantic_ai_agent": pydantic_ai_agent, "nbagent_model_sdk_stream": model_deltas(switched),
        "nbagent_agent_sdk_stream": agent_deltas(switched_agent),
    }


# ----------------------------------------------------------------------------- consumers, per tool round trip
def round_trip_consumers(base: str, clients: list[Any]) -> dict[str, Callable[[], Any]]:
    from agents import Agent as SdkAgent
    from agents import Runner, function_tool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel as SdkModel
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.openai import OpenAIResponsesModel as PydanticModel
    from pydantic_ai.providers.openai import OpenAIProvider

    set_tracing_disabled(True)
    base = base + "/v1"
    ours = Agent(OpenAIResponsesModel(MODEL, api_key=KEY, base_url=base), tools=[get_capital], store=MemoryStore())
    their_client = AsyncOpenAI(api_key=KEY, base_url=base, max_retries=0)
    theirs = SdkAgent("bench", model=SdkModel(MODEL, their_client), tools=[function_tool(get_capital)])
    pyd = PydanticAgent(PydanticModel(MODEL, provider=OpenAIProvider(api_key=KEY, base_url=base)))
    pyd.tool_plain(get_capital)
    clients += [ours.model, their_client, pyd.model.client]  # type: ignore[attr-defined]

    async def nbagent() -> int:
        async for event in ours.stream("What is the capital of France?"):
            last = event
        return int(last.result.status == "completed" and last.result.output == FINAL)

    async def openai_agents() -> int:
        result = Runner.run_streamed(theirs, "What is the capital of France?")
        async for _ in result.stream_events():
            pass
        return int(result.final_output == FINAL)

    async def pydantic_ai() -> int:
        async with pyd.run_stream("What is the capital of France?") as result:
            text = await result.get_output()
        return int(text == FINAL)

    return {"nbagent": nbagent, "openai_agents": openai_agents, "pydantic_ai": pydantic_ai}


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
    print(f"\nper streamed delta: {a.deltas} deltas of the recorded stream, {a.runs} runs, loopback HTTP (CPU time)")
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

    print(f"\nnbagent / faster peer, median per delta: model {model_ratio:.2f}x ({model_best}), agent "
          f"{agent_ratio:.2f}x ({agent_best}); per tool round trip {trip_ratio:.2f}x ({trip_best})")
    to_sdk = per_delta["nbagent_agent"] / per_delta["sdk"]
    trip_to_agents = per_trip["nbagent"] / per_trip["openai_agents"]
    print(f"goals: Agent.stream / the bare SDK's parsed stream, per delta {to_sdk:.2f}x (<= 0.25x: "
          f"{'met' if to_sdk <= 0.25 else 'NOT met'}); model {per_delta['nbagent_model'] / per_delta['sdk']:.2f}x; "
          f"with sdk_stream=True {per_delta['nbagent_agent_sdk_stream'] / per_delta['sdk']:.2f}x; tool round trip / "
          f"the Agents SDK's {trip_to_agents:.2f}x (<= 0.5x: {'met' if trip_to_agents <= 0.5 else 'NOT met'})")
    if a.json:
        print(json.dumps({"per_delta_us": {k: round(v, 3) for k, v in per_delta.items()},
                          "per_round_trip_us": {k: round(v, 1) for k, v in per_trip.items()},
                          "ratios": {"model": round(model_ratio, 3), "agent": round(agent_ratio, 3),
                                     "round_trip": round(trip_ratio, 3), "agent_to_sdk": round(to_sdk, 3),
                                     "round_trip_to_openai_agents": round(trip_to_agents, 3)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
