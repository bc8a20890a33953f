"""The kernel's event loop while a long answer streams into a `ChatView`: its largest pause.

    .venv/bin/python bench/bench_loop_lag.py [--deltas 4000 --runs 3]

A real IPython kernel (ipykernel, started with jupyter_client; no front end attached, so the
widgets' messages are serialised and sent on iopub as in any notebook) runs ``agent.chat()`` and
sends one message, ``view.ask("hi")``. The model reads a recorded stream with its text deltas
repeated to ``--deltas``, served over loopback HTTP by a server in another process, as fast as
the socket takes it (the worst case: a burst, as after a network stall or from a fast local
server; a remote model's 50-150 tokens a second leave the loop idle between deltas):

- ``chat``: `OpenAIModel`, ``tests/wire/cases/openai_stream_text_usage``;
- ``responses``: `OpenAIResponsesModel`, ``tests/wire/openai_responses/responses_stream_text``;
- ``responses_sdk_stream``: the same with ``sdk_stream=True`` (the SDK's parsed events, for comparison);
- ``claude``: `AnthropicModel`, ``tests/wire/anthropic_messages/anthropic_stream_text``.

While the answer streams, a ticker task on the kernel's loop sleeps 1 ms at a time and records the
time between its wake-ups: a pause is that time minus the 1 ms asked for. Reported per recording
(medians over ``--runs`` runs, interleaved): the largest pause in wall time, the largest in CPU time
of the loop's thread (what nbagent and the libraries held the loop for, without the time the OS
gave other processes on a busy machine), the 99th percentile, and the loop thread's CPU per delta.
The goal (issue #46): the largest pause <= 20 ms.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import threading
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from bench_provider import http_server  # noqa: E402  (the same one-chunk-per-event server)

from tests.wire.replay_server import (  # noqa: E402
    ANTHROPIC_CASES_DIR,
    CASES_DIR,
    RESPONSES_CASES_DIR,
    load_case,
    split_sse_events,
)

GOAL_MS = 20.0
KEY = "sk-bench-not-a-key"

# recording: (case, its directory, what its text delta events (only they) hold, the model made in the kernel)
RECORDINGS: dict[str, tuple[str, Path, bytes, str]] = {
    "chat": ("openai_stream_text_usage", CASES_DIR, b'"delta":{"content":"',
             "from nbagent.models.openai import OpenAIModel\n"
             "model = OpenAIModel('gpt-4o', base_url=URL + '/v1', api_key=KEY)"),
    "responses": ("responses_stream_text", RESPONSES_CASES_DIR, b"event: response.output_text.delta",
                  "from nbagent.models.openai import OpenAIResponsesModel\n"
                  "model = OpenAIResponsesModel('gpt-4o', base_url=URL + '/v1', api_key=KEY)"),
    "responses_sdk_stream": ("responses_stream_text", RESPONSES_CASES_DIR, b"event: response.output_text.delta",
                             "from nbagent.models.openai import OpenAIResponsesModel\n"
                             "model = OpenAIResponsesModel('gpt-4o', base_url=URL + '/v1', api_key=KEY, "
                             "sdk_stream=True)"),
    "claude": ("anthropic_stream_text", ANTHROPIC_CASES_DIR, b"event: content_block_delta",
               "from nbagent.models.anthropic import AnthropicModel\n"
               "model = AnthropicModel('claude-sonnet-4-5', base_url=URL, api_key=KEY)"),
}


def delta_stream(name: str, n: int) -> list[bytes]:
    """Recording `name` with its text delta events repeated to `n` deltas. A Responses stream's
    last events (the done item, the completed response) then carry the whole text, as they would."""
    case, where, mark, _ = RECORDINGS[name]
    events = [e.encode() for e in split_sse_events(load_case(case, where)["response"]["sse"])]
    at = [i for i, e in enumerate(events) if mark in e and b'"content":""' not in e]
    deltas = [events[i] for i in at]
    repeated = [deltas[i % len(deltas)] for i in range(n)]
    tail = events[at[-1] + 1:]
    if name.startswith("responses"):
        def text(chosen: list[bytes]) -> bytes:
            return json.dumps("".join(json.loads(e.partition(b"data: ")[2])["delta"] for e in chosen)).encode()
        tail = [e.replace(text(deltas), text(repeated)) for e in tail]
    return [*events[: at[0]], *repeated, *tail]


def serve(events: list[bytes]) -> tuple[Any, str]:
    """`http_server` answering with `events`, in a forked process (its CPU is not the kernel's)."""
    context = multiprocessing.get_context("fork")
    urls = context.Queue()

    def run() -> None:
        urls.put(http_server(events)[1])
        threading.Event().wait()

    process = context.Process(target=run, daemon=True)
    process.start()
    return process, urls.get(timeout=60).removesuffix("/v1")


SETUP = """
URL, KEY = {url!r}, {key!r}
{model}
models[{name!r}] = model
"""
"""Made once per recording (its client too, on the first run): a notebook's model lives across its runs."""

CELL = """
import asyncio, json, time
from nbagent import Agent
from nbagent.store.memory import MemoryStore
agent = Agent(models[{name!r}], store=MemoryStore())
view = agent.chat()
await view.wait_loaded()
gaps, running, deltas = [], True, []
shown = view.run_log.stream

def stream(step, delta, **kwargs):  # when each delta reached the view
    deltas.append(time.perf_counter())
    shown(step, delta, **kwargs)

view.run_log.stream = stream

async def ticker():
    last_w, last_c = time.perf_counter(), time.thread_time()
    while running:
        await asyncio.sleep(0.001)
        w, c = time.perf_counter(), time.thread_time()
        gaps.append((w - last_w - 0.001, c - last_c, last_w, w))  # pause (wall, CPU), from, to
        last_w, last_c = w, c

tick = asyncio.ensure_future(ticker())
await asyncio.sleep(0.05)
gaps.clear()
cpu = time.thread_time()
view.ask("hi")
result = await view.wait()
cpu = time.thread_time() - cpu
running = False
await tick
view.close()
first, last = deltas[0], deltas[-1]
streaming = [g for g in gaps if g[2] >= first and g[3] <= last] or [(0.0, 0.0, 0.0, 0.0)]
before = [g for g in gaps if g[2] < first] or [(0.0, 0.0, 0.0, 0.0)]
after = [g for g in gaps if g[3] > last] or [(0.0, 0.0, 0.0, 0.0)]
walls = sorted(g[0] for g in streaming)
print("RESULT " + json.dumps({{"status": result.status, "chars": len(result.output or ""), "deltas": len(deltas),
      "max_wall_ms": walls[-1] * 1e3, "max_cpu_ms": max(g[1] for g in streaming) * 1e3,
      "p99_wall_ms": walls[int(len(walls) * 0.99)] * 1e3, "ticks": len(streaming), "cpu_s": cpu,
      "start_wall_ms": max(g[0] for g in before) * 1e3, "start_cpu_ms": max(g[1] for g in before) * 1e3,
      "end_wall_ms": max(g[0] for g in after) * 1e3, "end_cpu_ms": max(g[1] for g in after) * 1e3}}))
"""


def run_in_kernel(client: Any, code: str) -> dict[str, Any]:
    """Run `code` in the kernel; the JSON it printed after ``RESULT `` ({} when none)."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    reply = client.execute_interactive(code, output_hook=hook, timeout=300)
    text = "".join(out)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"the cell failed: {text[-3000:]}")
    return json.loads(text.split("RESULT ", 1)[1].splitlines()[0]) if "RESULT " in text else {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--deltas", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-r", "--recordings", default=",".join(RECORDINGS), help="which, comma-separated")
    ap.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    a = ap.parse_args(argv)
    chosen = a.recordings.split(",")
    from jupyter_client.manager import KernelManager

    servers = {name: serve(delta_stream(name, a.deltas)) for name in chosen}
    manager = KernelManager(kernel_name="python3", transport="ipc")  # a local socket file, no TCP port
    manager.start_kernel(cwd=str(ROOT))
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=120)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
    try:
        run_in_kernel(client, "import nbagent.widgets, nbagent.models.openai, nbagent.models.anthropic\nmodels = {}")
        for name in chosen:  # the models, and a warm-up run each: imports, the client, the connection
            run_in_kernel(client, SETUP.format(url=servers[name][1], key=KEY, model=RECORDINGS[name][3], name=name))
            run_in_kernel(client, CELL.format(name=name))
        for _ in range(a.runs):
            for name in chosen:
                found = run_in_kernel(client, CELL.format(name=name))
                assert found["status"] == "completed" and found["deltas"] == a.deltas, (name, found)
                results[name].append(found)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        for process, _ in servers.values():
            process.terminate()
    report(results, a.deltas, a.runs)
    if a.json:
        keys = ("max_wall_ms", "max_cpu_ms", "p99_wall_ms", "start_wall_ms", "start_cpu_ms", "end_wall_ms",
                "end_cpu_ms", "cpu_s")
        print(json.dumps({n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in results.items()}))
    return 0


def report(results: dict[str, list[dict[str, Any]]], deltas: int, runs: int) -> None:
    def median(rs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rs)

    print(f"\nthe kernel's loop while a {deltas}-delta answer streams into a ChatView (medians of {runs} runs): "
          "the largest pause from the first delta to the last (wall, and CPU of the loop's thread) and its 99th "
          "percentile; the largest before the first delta (the run's start, the request) and after the last (the "
          "answer's final rendering); the loop thread's CPU per delta, whole run")
    print(f"{'recording':<22}{'streaming':>11}{'CPU':>9}{'p99':>9}{'before':>10}{'CPU':>9}{'after':>10}{'CPU':>9}"
          f"{'CPU/delta':>11}")
    for name, rs in results.items():
        print(f"{name:<22}{median(rs, 'max_wall_ms'):>8.1f} ms{median(rs, 'max_cpu_ms'):>6.1f} ms"
              f"{median(rs, 'p99_wall_ms'):>6.1f} ms{median(rs, 'start_wall_ms'):>7.1f} ms"
              f"{median(rs, 'start_cpu_ms'):>6.1f} ms{median(rs, 'end_wall_ms'):>7.1f} ms"
              f"{median(rs, 'end_cpu_ms'):>6.1f} ms{median(rs, 'cpu_s') / deltas * 1e6:>8.1f} µs")
    ours = {n: rs for n, rs in results.items() if n != "responses_sdk_stream"}
    worst = max(median(rs, "max_wall_ms") for rs in ours.values())
    worst_cpu = max(median(rs, "max_cpu_ms") for rs in ours.values())
    print(f"goal: the largest pause while streaming <= {GOAL_MS:.0f} ms (chat, responses, claude): worst median "
          f"{worst:.1f} ms wall ({'met' if worst <= GOAL_MS else 'NOT met'}), {worst_cpu:.1f} ms of the loop's CPU "
          f"({'met' if worst_cpu <= GOAL_MS else 'NOT met'})")


if __name__ == "__main__":
    sys.exit(main())
