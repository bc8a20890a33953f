"""Benchmark `OpenAIModel`'s per-delta overhead on a replayed ~4,000-delta stream.

    .venv/bin/python bench/bench_provider.py                  # 4,000 deltas, in-memory transport
    .venv/bin/python bench/bench_provider.py --http           # over a loopback HTTP server
    .venv/bin/python bench/bench_provider.py --deltas 1000 --runs 5

The stream is a synthetic OpenAI chat-completions SSE answer shaped like today's gpt-4o-mini
chunks (id, created, model, system_fingerprint, service_tier, ``obfuscation``, one token of
content per chunk), then a finish chunk and the ``include_usage`` chunk. It is served either by
an ``httpx2.MockTransport`` (one event per body chunk, no sockets: the least noisy) or by a
threaded HTTP server on 127.0.0.1 (``--http``, chunked transfer, one event per chunk).

Three consumers read the same stream through the real ``openai`` SDK:

- ``sdk``: ``async for chunk in await client.chat.completions.create(stream=True)`` reading
  ``chunk.choices[0].delta.content`` -- the SDK's own HTTP + SSE + pydantic parsing;
- ``model``: ``OpenAIModel.request_stream`` (text deltas, then the assembled `ModelResponse`);
- ``agent``: ``Agent.stream`` events (``text-delta`` with its snapshot accumulator, the
  response, usage, checkpoint to a `MemoryStore`, run-completed).

Reported: CPU time (``time.process_time``: other processes on a busy machine count less than
in wall time) per delta of each, and nbagent's overhead on top of the SDK (``model - sdk`` and
``agent - sdk``, divided by the number of deltas). Runs are interleaved and the minimum and
median of ``--runs`` are shown.

The model reads the stream's bytes itself (`models._sse.json_events`), not the SDK's parsed
chunks, which cost tens of µs per chunk: ``model`` is well below ``sdk`` end to end. The
``isolated`` table feeds the same events as bytes in memory through a stand-in client
(``chat.completions.with_raw_response.create`` returns them; no socket, no HTTP parsing): ``sdk``
is then the floor, a loop reading each event's JSON with ``json.loads``, and ``model`` /
``agent`` is nbagent's work from "bytes in" to "nbagent event out" on top of it. Target:
isolated ``agent - sdk`` <= 5 µs per delta.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
from openai import AsyncOpenAI

from nbagent import Agent
from nbagent.messages import UserMessage
from nbagent.models.base import ModelRequest
from nbagent.models.openai import OpenAIModel
from nbagent.store.memory import MemoryStore

TARGET_US = 5.0
WORDS = ("the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".", "\n", " And")


def sse_events(n: int) -> list[bytes]:
    """``n`` content chunks, a finish chunk, a usage chunk and [DONE], one SSE event each."""
    head = {
        "id": "chatcmpl-Bench0123456789abcdefghijkl",
        "object": "chat.completion.chunk",
        "created": 1766084443,
        "model": "gpt-4o-mini-2024-07-18",
        "service_tier": "default",
        "system_fingerprint": "fp_deacdd5f6f",
    }

    def event(obj: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps({**head, **obj}, separators=(",", ":")).encode() + b"\n\n"

    out = [
        event(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": "", "refusal": None},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "obfuscation": "Ab3",
            }
        )
    ]
    for i in range(n):
        out.append(
            event(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": WORDS[i % len(WORDS)]},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                    "obfuscation": "x7Kq",
                }
            )
        )
    out.append(
        event(
            {
                "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}],
                "obfuscation": "Qz",
            }
        )
    )
    out.append(
        event(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 12,
                    "completion_tokens": n,
                    "total_tokens": 12 + n,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {
                        "reasoning_tokens": 0,
                        "audio_tokens": 0,
                        "accepted_prediction_tokens": 0,
                        "rejected_prediction_tokens": 0,
                    },
                },
                "obfuscation": "k",
            }
        )
    )
    out.append(b"data: [DONE]\n\n")
    return out


# ----------------------------------------------------------------------------- transports
class _Events(httpx2.AsyncByteStream):
    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for e in self.events:
            yield e


def memory_client(events: list[bytes]) -> httpx2.AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_Events(events))

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


def http_server(
    events: list[bytes] | Callable[[bytes], list[bytes]],
) -> tuple[ThreadingHTTPServer, str]:
    """A threaded HTTP server on 127.0.0.1 answering every POST with `events` (or
    ``events(request_body)``), one chunk per event; returns it and its ``.../v1`` URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer = events(body) if callable(events) else events
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            write = self.wfile.write
            for e in answer:
                write(b"%x\r\n%s\r\n" % (len(e), e))
            write(b"0\r\n\r\n")
            self.wfile.flush()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/v1"


# ----------------------------------------------------------------------------- consumers
async def run_sdk(client: AsyncOpenAI) -> int:
    n = 0
    stream = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            n += 1
    return n


async def run_model(model: OpenAIModel) -> int:
    n = 0
    async for item in model.request_stream(ModelRequest([UserMessage("hi")])):
        if type(item) is str:
            n += 1
    return n


async def run_agent(agent: Agent) -> int:
    n = 0
    async for event in agent.stream("hi"):
        if event.kind == "text-delta":
            n += 1
    return n


class _Raw:
    """What ``with_raw_response.create(stream=True)`` returns: its ``http_response``, the stream's
    bytes in memory, one event per chunk (no socket, no HTTP parsing)."""

    def __init__(self, events: list[bytes]) -> None:
        self.http_response = httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                             stream=_Events(events))


class _BytesClient:
    """A stand-in for ``AsyncOpenAI`` whose ``chat.completions.with_raw_response.create`` returns `_Raw`."""

    def __init__(self, events: list[bytes]) -> None:
        self.events = events
        self.chat = self.completions = self.with_raw_response = self
        self.base_url = "http://bench.invalid/v1"
        self.api_key = "sk-bench"

    async def create(self, **params: Any) -> _Raw:
        return _Raw(self.events)


async def run_floor(events: list[bytes]) -> int:
    """The least any reader of the stream does: each event's JSON read with ``json.loads``."""
    n = 0
    loads = json.loads
    for event in events:
        data = event.strip()[6:]
        if data != b"[DONE]":
            choices = loads(data)["choices"]
            if choices and choices[0]["delta"].get("content"):
                n += 1
    return n


async def measure_isolated(deltas: int, runs: int) -> dict[str, list[float]]:
    events = sse_events(deltas)
    client = _BytesClient(events)
    model = OpenAIModel("gpt-4o-mini", client=client)  # type: ignore[arg-type]
    agent = Agent(model, store=MemoryStore())
    consumers: dict[str, Callable[[], Any]] = {
        "sdk": lambda: run_floor(events),
        "model": lambda: run_model(model),
        "agent": lambda: run_agent(agent),
    }
    return await _timed(consumers, deltas, runs)


async def _timed(consumers: dict[str, Callable[[], Any]], deltas: int, runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in consumers}
    for name, consume in consumers.items():  # warm-up: imports, connections, caches
        assert await consume() == deltas, name
    for _ in range(runs):
        for name, consume in consumers.items():
            gc.collect()
            t0 = time.process_time()
            count = await consume()
            times[name].append(time.process_time() - t0)
            assert count == deltas, (name, count)
    return times


async def measure(deltas: int, runs: int, use_http: bool) -> dict[str, list[float]]:
    events = sse_events(deltas)
    srv = None
    if use_http:
        srv, base_url = http_server(events)
        http_client = None
    else:
        base_url, http_client = "http://bench.invalid/v1", memory_client(events)
    sdk = AsyncOpenAI(api_key="sk-bench", base_url=base_url, max_retries=0, http_client=http_client)
    model = OpenAIModel("gpt-4o-mini", base_url=base_url, api_key="sk-bench", http_client=http_client)
    agent = Agent(model, store=MemoryStore())
    consumers: dict[str, Callable[[], Any]] = {
        "sdk": lambda: run_sdk(sdk),
        "model": lambda: run_model(model),
        "agent": lambda: run_agent(agent),
    }
    times = await _timed(consumers, deltas, runs)
    await sdk.close()
    if http_client is not None:
        await http_client.aclose()
    else:
        await model.aclose()
    if srv is not None:
        srv.shutdown()
        srv.server_close()
    return times


def report(times: dict[str, list[float]], deltas: int, transport: str) -> dict[str, float]:
    us = 1e6 / deltas
    best = {k: min(v) * us for k, v in times.items()}
    med = {k: statistics.median(v) * us for k, v in times.items()}
    print(f"\n{deltas} deltas, {len(times['sdk'])} runs, transport: {transport}")
    print(f"{'consumer':<10}{'min µs/delta':>14}{'median µs/delta':>17}   (CPU time)")
    for k in times:
        print(f"{k:<10}{best[k]:>14.2f}{med[k]:>17.2f}")
    over_model = (best["model"] - best["sdk"], med["model"] - med["sdk"])
    over_agent = (best["agent"] - best["sdk"], med["agent"] - med["sdk"])
    print(f"{'overhead':<10}{'min':>14}{'median':>17}")
    print(f"{'model-sdk':<10}{over_model[0]:>14.2f}{over_model[1]:>17.2f}")
    print(f"{'agent-sdk':<10}{over_agent[0]:>14.2f}{over_agent[1]:>17.2f}")
    return {
        "sdk": best["sdk"],
        "model": best["model"],
        "agent": best["agent"],
        "model_overhead": over_model[0],
        "agent_overhead": over_agent[0],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deltas", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--http", action="store_true", help="serve over loopback HTTP instead of in memory")
    ap.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    a = ap.parse_args(argv)
    times = asyncio.run(measure(a.deltas, a.runs, a.http))
    numbers = report(times, a.deltas, "loopback HTTP" if a.http else "in-memory (httpx2.MockTransport)")
    isolated = report(
        asyncio.run(measure_isolated(a.deltas, a.runs)),
        a.deltas,
        "isolated (the stream's bytes in memory; sdk = the floor: json.loads of each event)",
    )
    ok = isolated["agent_overhead"] <= TARGET_US
    print(
        f"\ntarget: nbagent's overhead (isolated agent - sdk) <= {TARGET_US:.0f} µs per delta: "
        f"{isolated['agent_overhead']:.2f} µs -> {'OK' if ok else 'OVER TARGET'}"
    )
    if a.json:
        print(
            json.dumps(
                {
                    "end_to_end": {k: round(v, 3) for k, v in numbers.items()},
                    "isolated": {k: round(v, 3) for k, v in isolated.items()},
                }
            )
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
