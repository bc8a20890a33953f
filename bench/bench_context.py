#!/usr/bin/env python3
"""The context window (issue #25): a long session kept flat by compaction, what the gauge costs,
and compaction's own overhead next to LangChain's ``SummarizationMiddleware``.

Runs in ``bench/.venv-peers`` (it needs ``langchain`` and ``langchain-openai``; ``make bench``
runs it after bench/run.py)::

    bench/.venv-peers/bin/python bench/bench_context.py            # ~2 minutes on 2 busy cores
    bench/.venv-peers/bin/python bench/bench_context.py --quick    # a smoke run

The session (parts 1 and 3): 100 turns against tests/wire/window_server.py's `WindowServer`, an
OpenAI-compatible loopback server (a thread of this process) with a 4,000-token window that
measures every request by one documented rule, reports it as ``prompt_tokens`` and refuses a
larger request with OpenAI's ``context_length_exceeded`` 400. Each turn the user asks
"Show 20 rows of the sales table (turn N)"; the server calls the one tool, ``get_rows(n=20)``
(20 lines of text, ~210 tokens), then answers. nbagent: `OpenAIModel` on the server,
``context_window=4000``, `MemoryStore`, ``Compaction()`` (``at=0.8, keep_last=6``, the agent's own
model writes the summary). LangChain: ``create_agent(ChatOpenAI(...), tools=[get_rows],
middleware=[SummarizationMiddleware(model, trigger=("fraction", 0.8), keep=("messages", 6))],
checkpointer=InMemorySaver())``, the model's profile ``max_input_tokens=4000``: the same
threshold and the same number of messages kept. The server writes both summaries.

1. Tokens: the input tokens a turn sends (the server's count of its model calls, summary calls
   apart) at turn 100 vs turn 10 (goal <= 1.5x), and the same session without compaction up to
   the turn where it fails (nbagent: ``status="failed"``), with its tokens and cost at a nominal
   price (``PRICE``) next to the compacted session's over the same turns.
2. Gauge: S1 of bench/run.py (one tool round trip, an instant `FunctionModel`, via
   bench/peers_adapter.py) with `MemoryStore`, CPU per run, the gauge computed vs not. nbagent has
   no switch for the gauge, so "not" is this bench replacing, for its arm only, the per-request
   estimate by part (``nbagent._run.window.request_parts``) by a constant and ``Window.observe``
   (the `ContextUsage`, the parts scaled to the reported count, the usage row's JSON) by
   ``None``. The arms alternate run by run; the figure is the median over blocks of (on / off - 1)
   (goal <= 5 %). A second pass times those functions (and ``Window.row_context``) directly
   inside S1 runs, and a third compares on / off per turn in a 100-turn session with no compaction
   (an instant in-process model, a 1M window), where the thread grows to ~400 messages.
3. Compaction overhead per turn, excluding the summary call: CPU time of this thread (the server's
   thread is not counted) spent in each framework's compaction code, per turn, over the 100-turn
   session, less the summary model call. LangChain: its ``abefore_model`` hook (token count,
   trigger, cutoff, trimming and formatting the transcript, the new messages) less the summary
   model's ``ainvoke``; not counted: LangGraph applying its ``RemoveMessage`` and running the
   middleware's node (favourable to LangChain). nbagent: ``Window.over_threshold`` (the check),
   ``visible`` (the stored records applied to each request), ``_Loop.compact`` (the cut, the
   transcript, the record, its commit and events) less ``_ask`` (the summary call), and the
   request built before a threshold compaction and then discarded. Goal: nbagent / LangChain
   <= 0.25x. Sessions alternate between the frameworks; medians over sessions, with the range.
   Beside it, an A/B of what configuring compaction costs a turn when it never triggers (instant
   in-process models, a 1M window: no HTTP, so the small difference shows): this one includes
   LangChain's middleware node.

Results: a markdown report on stdout and in bench/results/context-<utc>.md, JSON beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
sys.path[:0] = [str(ROOT), str(BENCH)]  # this checkout's nbagent and tests/, and bench/run.py

os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")

import nbagent  # noqa: E402
from nbagent import Agent, Compaction, tool  # noqa: E402
from nbagent.models import OpenAIModel  # noqa: E402
from nbagent.store import MemoryStore  # noqa: E402
from tests.wire.window_server import WindowServer  # noqa: E402

WINDOW = 4_000
TURNS = 100
ROWS = 20
PRICE = {"input": 0.40, "output": 1.60}
"""USD per million tokens for the cost column: a nominal price (gpt-4.1-mini's list price), for scale."""
TOKENS_GOAL, GAUGE_GOAL, OVERHEAD_GOAL = 1.5, 0.05, 0.25
thread_ns = time.thread_time_ns


def rows_text(n: int) -> str:
    """The tool's answer: `n` lines of a sales table (~42 characters each)."""
    return "\n".join(f"row {i}: 2026-11-{i % 28 + 1:02d} Paris {17.5 * i:.2f} EUR paid" for i in range(n))


def prompt(turn: int) -> str:
    """The user's message of `turn` (the server calls the tool with the first number in it)."""
    return f"Show {ROWS} rows of the sales table (turn {turn})"


@tool
def get_rows(n: int) -> str:
    """The first n rows of the sales table.

    Args:
        n: how many rows.
    """
    return rows_text(n)


def lc_get_rows(n: int) -> str:
    """The first n rows of the sales table.

    Args:
        n: how many rows.
    """
    return rows_text(n)


def turn_tokens(server: WindowServer) -> dict[str, Any]:
    """What the server received during one turn: the model calls' sizes, the summary calls' sizes
    (requests without tools), refusals."""
    sizes, bodies = list(server.sizes), list(server.requests)
    calls = [s for s, b in zip(sizes, bodies, strict=True) if b.get("tools") and s <= server.window]
    summaries = [s for s, b in zip(sizes, bodies, strict=True) if not b.get("tools") and s <= server.window]
    return {"input": sum(calls), "largest": max(calls, default=0), "calls": calls,
            "summary_input": sum(summaries), "summaries": len(summaries), "refused": server.refused}


# ------------------------------------------------------------------------------------------ clocks
class Clock:
    """CPU time of this thread inside the instrumented code (outermost calls only), less the
    summary calls made inside it."""

    def __init__(self) -> None:
        self.depth = 0
        self.total = 0
        self.summary = 0
        self.discardable = 0  # the last request built's own time (its `visible` excluded)
        self.parts: dict[str, int] = {}
        """Time by part (the summary calls subtracted from the part that made them), for all turns."""

    def add(self, label: str, ns: int) -> None:
        """`ns` spent in `label`."""
        self.total += ns
        self.parts[label] = self.parts.get(label, 0) + ns

    def take(self) -> int:
        """The time gathered since the last `take`, less the summary calls, and start again."""
        out = self.total - self.summary
        self.total = self.summary = 0
        return out

    def wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        """`fn` (a plain function) timed when it is the outermost instrumented call."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            t0 = thread_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(label, thread_ns() - t0)
                self.depth -= 1

        return timed

    def wrap_agen(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        """`fn` (an async generator function) timed step by step (the consumer's work between its
        items is not counted)."""

        async def timed(*args: Any, **kwargs: Any) -> Any:
            agen = fn(*args, **kwargs)
            while True:
                outer = not self.depth
                self.depth += 1
                t0, summary = thread_ns(), self.summary
                try:
                    item = await agen.__anext__()
                except StopAsyncIteration:
                    return
                finally:
                    if outer:
                        self.add(label, thread_ns() - t0)
                        self.parts[label] -= self.summary - summary
                    self.depth -= 1
                yield item

        return timed

    def wrap_summary(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` (a coroutine function: the summary call) timed, to be subtracted."""

        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = thread_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.summary += thread_ns() - t0

        return timed


@contextmanager
def patched(target: Any, name: str, value: Any) -> Iterator[None]:
    """`target.name` set to `value` for the block."""
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)


@contextmanager
def nbagent_clock(clock: Clock) -> Iterator[None]:
    """nbagent's compaction code timed by `clock` (see the module doc, part 3)."""
    from nbagent._run import loop, window

    request = loop._Loop.request
    compact = clock.wrap_agen(loop._Loop.compact, "compact (less the summary call)")

    def timed_request(self: Any, step: int) -> Any:
        inner, t0 = clock.total, thread_ns()
        out = request(self, step)
        clock.discardable = thread_ns() - t0 - (clock.total - inner)
        return out

    async def timed_compact(self: Any, step: int, trigger: str, *args: Any) -> Any:
        if trigger == "threshold":  # before_call built the next request to size it; it is rebuilt
            clock.add("request built, then discarded", clock.discardable)
        async for event in compact(self, step, trigger, *args):
            yield event

    # `Window.visible` (since issue #46: the running view's `follow`, or the plain `visible` with
    # NBAGENT_CONTEXT_CACHE=0); the module's `visible` too, for versions before the method.
    method = getattr(window.Window, "visible", None)
    with patched(window.Window, "over_threshold", clock.wrap(window.Window.over_threshold, "check")), \
            patched(window, "visible", clock.wrap(window.visible, "visible (records applied)")), \
            (patched(window.Window, "visible", clock.wrap(method, "visible (records applied)")) if method
             else contextlib.nullcontext()), \
            patched(window, "_ask", clock.wrap_summary(window._ask)), \
            patched(loop._Loop, "request", timed_request), \
            patched(loop._Loop, "compact", timed_compact):
        yield


# ------------------------------------------------------------------------------------ the sessions
async def nbagent_session(server: WindowServer, compaction: Compaction | None, turns: int,
                          clock: Clock | None = None) -> list[dict[str, Any]]:
    """One session of `turns` turns (stops at the first turn that does not complete)."""
    model = OpenAIModel("window", base_url=server.base_url, api_key="sk-test", provider="window",
                        context_window=server.window)
    agent = Agent(model, tools=[get_rows], store=MemoryStore(), compaction=compaction,
                  prices={"window": PRICE})
    thread, out = None, []
    for turn in range(1, turns + 1):
        server.reset()
        if clock is not None:
            clock.take()
        t0 = thread_ns()
        result = await agent.run(prompt(turn), thread=thread)
        cpu = thread_ns() - t0
        thread = result.thread
        row = {"turn": turn, "status": result.status, "cpu_ns": cpu, "cost": result.usage.cost_total or 0.0,
               "output": result.usage.output_tokens, **turn_tokens(server)}
        if clock is not None:
            row["overhead_ns"] = clock.take()
        out.append(row)
        if result.status != "completed":
            row["error"] = (result.error or "")[:300]
            break
    return out


def langchain_agent(server: WindowServer, compaction: bool, clock: Clock | None) -> Any:
    """LangChain's agent on the server, with `SummarizationMiddleware` when `compaction`."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    chat = ChatOpenAI(model="window", base_url=server.base_url, api_key="sk-test", max_retries=0,
                      profile={"max_input_tokens": server.window})
    middleware: list[Any] = []
    if compaction:

        class TimedSummarization(SummarizationMiddleware):  # type: ignore[misc]
            """The middleware, its hook timed by `clock` (the summary call subtracted)."""

            async def abefore_model(self, state: Any, runtime: Any) -> Any:
                if clock is None:
                    return await super().abefore_model(state, runtime)
                t0, summary = thread_ns(), clock.summary
                try:
                    return await super().abefore_model(state, runtime)
                finally:
                    clock.add("abefore_model (less the summary call)", thread_ns() - t0 - (clock.summary - summary))
                    clock.total += clock.summary - summary

        summarization = TimedSummarization(model=chat, trigger=("fraction", 0.8), keep=("messages", 6))
        if clock is not None:
            inner = summarization._summary_model

            class TimedSummaryModel:
                """The summary model's ``ainvoke``, timed (``_acreate_summary`` only calls that)."""

                ainvoke = staticmethod(clock.wrap_summary(inner.ainvoke))

            summarization._summary_model = TimedSummaryModel()
        middleware.append(summarization)
    return create_agent(chat, tools=[lc_get_rows], middleware=middleware, checkpointer=InMemorySaver())


async def langchain_session(server: WindowServer, compaction: bool, turns: int,
                            clock: Clock | None = None) -> list[dict[str, Any]]:
    """The same session through LangChain (stops at the first turn that raises)."""
    agent = langchain_agent(server, compaction, clock)
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 1000}
    out = []
    for turn in range(1, turns + 1):
        server.reset()
        if clock is not None:
            clock.take()
        t0 = thread_ns()
        status, error = "completed", None
        try:
            await agent.ainvoke({"messages": [{"role": "user", "content": prompt(turn)}]}, config=config)
        except Exception as exc:  # the provider's refusal, as LangChain raises it
            status, error = "failed", f"{type(exc).__name__}: {exc}"[:300]
        row = {"turn": turn, "status": status, "cpu_ns": thread_ns() - t0, **turn_tokens(server)}
        if clock is not None:
            row["overhead_ns"] = clock.take()
        out.append(row)
        if error is not None:
            row["error"] = error
            break
    return out


# ------------------------------------------------------------------------------------------ part 1
def summarize_session(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A session's token figures."""
    done = [r for r in rows if r["status"] == "completed"]
    by_turn = {r["turn"]: r for r in done}
    t10, t100 = by_turn.get(10), by_turn.get(TURNS)
    out: dict[str, Any] = {
        "session": name, "completed": len(done),
        "failed_at": rows[-1]["turn"] if rows[-1]["status"] != "completed" else None,
        "turn10": t10["input"] if t10 else None, "turn100": t100["input"] if t100 else None,
        "largest": max((r["largest"] for r in done), default=0),
        "input_total": sum(r["input"] + r["summary_input"] for r in done),
        "summaries": sum(r["summaries"] for r in done),
        "cost": sum(r.get("cost", 0.0) for r in done) if "cost" in rows[0] else None,
        "error": rows[-1].get("error"),
    }
    if t10 and t100:
        out["ratio"] = t100["input"] / t10["input"]
        late = [by_turn[t]["input"] for t in range(TURNS - 9, TURNS + 1)]
        early = [by_turn[t]["input"] for t in range(11, 21)]
        out["late_mean"], out["early_mean"] = statistics.mean(late), statistics.mean(early)
    return out


def upto(rows: list[dict[str, Any]], turn: int) -> dict[str, Any]:
    """Tokens and cost of a session's first `turn` completed turns."""
    first = [r for r in rows if r["turn"] <= turn and r["status"] == "completed"]
    return {"turns": len(first), "input_total": sum(r["input"] + r["summary_input"] for r in first),
            "cost": sum(r.get("cost", 0.0) for r in first)}


async def part_tokens() -> dict[str, Any]:
    """Part 1: the sessions' tokens, with and without compaction, for both frameworks."""
    with WindowServer(window=WINDOW) as server:
        nb_on = await nbagent_session(server, Compaction(at=0.8, keep_last=6), TURNS)
        nb_off = await nbagent_session(server, None, TURNS)
        lc_on = await langchain_session(server, True, TURNS)
        lc_off = await langchain_session(server, False, TURNS)
    sessions = {"nbagent, Compaction()": nb_on, "nbagent, no compaction": nb_off,
                "LangChain, SummarizationMiddleware": lc_on, "LangChain, no middleware": lc_off}
    out = {name: summarize_session(name, rows) for name, rows in sessions.items()}
    last_ok = out["nbagent, no compaction"]["completed"]
    out["same_turns"] = {"turns": last_ok, "compacted": upto(nb_on, last_ok), "uncompacted": upto(nb_off, last_ok)}
    out["per_turn"] = {name: [{k: r[k] for k in ("turn", "status", "input", "largest", "summary_input")}
                              for r in rows] for name, rows in sessions.items()}
    return out


# ------------------------------------------------------------------------------------------ part 2
@contextmanager
def gauge_off() -> Iterator[None]:
    """nbagent without the gauge: no estimate by part per request, no `ContextUsage` per answer.
    (``Window.parts`` since issue #46, which sizes a request from running sums; before it, the
    module's ``request_parts``.)"""
    from nbagent._run import window
    from nbagent.context import PARTS

    zero = dict.fromkeys(PARTS, 0)
    target = (window.Window, "parts") if hasattr(window.Window, "parts") else (window, "request_parts")
    with patched(*target, lambda *a, **k: dict(zero)), \
            patched(window.Window, "observe", lambda self, config, response, step: None):
        yield


def runner(key: str = "S1") -> tuple[Any, Any]:
    """S1 or S2 of bench/run.py with `MemoryStore` (bench/peers_adapter.py, as run.py builds it)."""
    import run as harness

    scenario = harness.SCENARIOS[key]
    script = harness.Script(scenario)
    return harness.build_nbagent_mem(scenario, script), scenario.expected_text


async def s1_block(fn: Any, expected: str, runs: int) -> float:
    """The median CPU time (process) of `runs` runs, in µs."""
    times = []
    gc.collect()
    for _ in range(runs):
        t0 = time.process_time_ns()
        out = await fn()
        times.append(time.process_time_ns() - t0)
        assert out.text == expected, out.text
    return statistics.median(times) / 1e3


async def python_calls(fn: Any, expected: str) -> int:
    """Python calls (functions and calls into C, ``sys.setprofile``) of one run."""
    n = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    sys.setprofile(count)
    try:
        out = await fn()
    finally:
        sys.setprofile(None)
    assert out.text == expected, out.text
    return n


async def gauge_ab(key: str, blocks: int, runs: int) -> dict[str, Any]:
    """`key` (S1 or S2) with the gauge computed vs not, the arms alternating run by run (the patch
    is applied between runs, outside the timing); per block of `runs` pairs, the median of each
    arm; and each arm's Python calls in a run."""
    fn, expected = runner(key)
    for _ in range(3):  # warm both paths
        await s1_block(fn, expected, max(5, runs // 4))
        with gauge_off():
            await s1_block(fn, expected, max(5, runs // 4))
    on, off, ratios = [], [], []
    for _ in range(blocks):
        times: dict[bool, list[int]] = {True: [], False: []}
        gc.collect()
        for i in range(2 * runs):
            gauge = i % 4 in (0, 3)  # on, off, off, on, ...: neither arm always goes first
            with contextlib.nullcontext() if gauge else gauge_off():
                t0 = time.process_time_ns()
                out = await fn()
                times[gauge].append(time.process_time_ns() - t0)
            assert out.text == expected, out.text
        on.append(statistics.median(times[True]) / 1e3)
        off.append(statistics.median(times[False]) / 1e3)
        ratios.append(on[-1] / off[-1] - 1)
    calls_on = await python_calls(fn, expected)
    with gauge_off():
        calls_off = await python_calls(fn, expected)
    return {"on_us": on, "off_us": off, "overhead": ratios, "calls_on": calls_on, "calls_off": calls_off}


async def part_gauge(blocks: int, runs: int, sessions: int) -> dict[str, Any]:
    """Part 2: S1 and S2 with the gauge computed vs not (`gauge_ab`), then the gauge's own
    functions timed inside S1, and the 100-turn session."""
    out = {"S1": await gauge_ab("S1", blocks, runs), "S2": await gauge_ab("S2", blocks, max(4, runs // 20))}
    fn, expected = runner("S1")
    out["direct"] = await gauge_direct(fn, expected, runs * 5)
    out["long"] = await gauge_long(sessions)
    return out


async def gauge_long(sessions: int) -> dict[str, Any]:
    """The gauge on/off in the 100-turn session with an instant in-process model and no compaction
    (1M window: the thread grows to ~400 messages), two sessions side by side, their turns
    alternating: per session pair, the median over turns of on / off - 1, and over turns 91-100."""
    all_turns, late, on_late = [], [], []
    for _ in range(sessions):
        gauge, plain = FakeSession("nbagent", False), FakeSession("nbagent", False)
        pair: dict[bool, list[int]] = {True: [], False: []}
        gc.collect()
        for turn in range(1, TURNS + 1):
            for on in ((True, False) if turn % 2 else (False, True)):
                with contextlib.nullcontext() if on else gauge_off():
                    pair[on].append(await (gauge if on else plain).turn(turn))
        ratios = [a / b - 1 for a, b in zip(pair[True], pair[False], strict=True)]
        all_turns.append(statistics.median(ratios))
        late.append(statistics.median(ratios[-10:]))
        on_late.append(statistics.median(pair[True][-10:]) / 1e3)
    return {"overhead": all_turns, "late_overhead": late, "late_turn_us": on_late}


async def gauge_direct(fn: Any, expected: str, runs: int) -> dict[str, Any]:
    """The gauge's functions timed inside S1 runs: each request's estimate by part
    (``Window.parts``; ``request_parts`` before issue #46), ``Window.observe`` (the
    `ContextUsage`) and the usage row's JSON copy of it (``Window.row_context``;
    ``ContextUsage.to_json`` in versions before it)."""
    from nbagent._run import window
    from nbagent.context import ContextUsage

    parts = (window.Window, "parts") if hasattr(window.Window, "parts") else (window, "request_parts")
    row_json = (window.Window, "row_context") if hasattr(window.Window, "row_context") else (ContextUsage, "to_json")
    spent = [0, 0, 0]

    def timing(index: int, f: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = thread_ns()
            try:
                return f(*args, **kwargs)
            finally:
                spent[index] += thread_ns() - t0
        return timed

    with patched(*parts, timing(0, getattr(*parts))), \
            patched(window.Window, "observe", timing(1, window.Window.observe)), \
            patched(*row_json, timing(2, getattr(*row_json))):
        await s1_block(fn, expected, 50)
        spent[:] = [0, 0, 0]
        per_run = await s1_block(fn, expected, runs)
    return {"request_parts_us": spent[0] / runs / 1e3, "observe_us": spent[1] / runs / 1e3,
            "row_json_us": spent[2] / runs / 1e3, "row_json": ".".join((row_json[0].__name__, row_json[1])),
            "parts": ".".join((getattr(parts[0], "__name__", "window"), parts[1])),
            "s1_us_instrumented": per_run, "runs": runs}


# ------------------------------------------------------------------------------------------ part 3
async def part_overhead(sessions: int) -> dict[str, Any]:
    """Part 3: compaction overhead per turn (summary call excluded), sessions alternating."""
    per_session: dict[str, list[dict[str, Any]]] = {"nbagent": [], "langchain": []}
    with WindowServer(window=WINDOW) as server:
        await nbagent_session(server, Compaction(), 20)  # warm both
        await langchain_session(server, True, 20)
        for i in range(sessions):
            for name in (("nbagent", "langchain") if i % 2 == 0 else ("langchain", "nbagent")):
                clock = Clock()
                gc.collect()
                if name == "nbagent":
                    with nbagent_clock(clock):
                        rows = await nbagent_session(server, Compaction(at=0.8, keep_last=6), TURNS, clock)
                else:
                    rows = await langchain_session(server, True, TURNS, clock)
                assert len(rows) == TURNS and rows[-1]["status"] == "completed", rows[-1]
                over = [r["overhead_ns"] / 1e3 for r in rows]
                per_session[name].append({
                    "mean_us": statistics.mean(over), "median_us": statistics.median(over),
                    "late_mean_us": statistics.mean(over[-10:]), "early_mean_us": statistics.mean(over[:10]),
                    "compacting_turns": sum(r["summaries"] > 0 for r in rows),
                    "turn_cpu_us": statistics.median(r["cpu_ns"] / 1e3 for r in rows),
                    "parts_us_per_turn": {k: v / len(rows) / 1e3 for k, v in clock.parts.items()},
                })
    out: dict[str, Any] = {"sessions": per_session}
    for key in ("mean_us", "median_us", "turn_cpu_us", "late_mean_us", "early_mean_us"):
        out[key] = {name: statistics.median(s[key] for s in runs) for name, runs in per_session.items()}
    pairs = zip(per_session["nbagent"], per_session["langchain"], strict=True)
    out["ratios"] = [a["mean_us"] / b["mean_us"] for a, b in pairs]
    out["parts_us_per_turn"] = {name: {k: statistics.median(s["parts_us_per_turn"].get(k, 0.0) for s in runs)
                                       for k in runs[0]["parts_us_per_turn"]} for name, runs in per_session.items()}
    out["check"] = await check_ab(sessions)
    return out


# --------------------------------------------------------------------------- part 3, the check A/B
BIG = 1_000_000
"""The window of the never-compacting sessions."""


def fake_nbagent(compaction: bool) -> Agent:
    """nbagent with an instant in-process model (a 1M-token window) and, if asked, `Compaction()`."""
    from nbagent.models import FunctionModel, tool_call

    def answer(messages: Any, request: Any) -> Any:
        return tool_call("get_rows", n=ROWS) if messages[-1].kind == "user" else "turn done"

    return Agent(FunctionModel(answer, context_window=BIG), tools=[get_rows], store=MemoryStore(),
                 compaction=Compaction(at=0.8, keep_last=6) if compaction else None)


def fake_langchain(compaction: bool) -> Any:
    """LangChain with an instant in-process chat model (profile: 1M tokens) and, if asked, the
    middleware."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.checkpoint.memory import InMemorySaver

    calls = iter(range(10**9))

    class Instant(BaseChatModel):  # type: ignore[misc]
        """Calls the tool after a user message, else answers."""

        @property
        def _llm_type(self) -> str:
            return "bench-instant"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=tools, **kwargs)

        def _answer(self, messages: Any) -> ChatResult:
            if isinstance(messages[-1], HumanMessage):
                call = {"name": "lc_get_rows", "args": {"n": ROWS}, "id": f"call_{next(calls)}", "type": "tool_call"}
                message = AIMessage(content="", tool_calls=[call])
            else:
                message = AIMessage(content="turn done")
            return ChatResult(generations=[ChatGeneration(message=message)])

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
            return self._answer(messages)

        async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
            return self._answer(messages)

    chat = Instant(profile={"max_input_tokens": BIG})
    middleware = ([SummarizationMiddleware(model=chat, trigger=("fraction", 0.8), keep=("messages", 6))]
                  if compaction else [])
    return create_agent(chat, tools=[lc_get_rows], middleware=middleware, checkpointer=InMemorySaver())


class FakeSession:
    """A never-compacting session on an instant in-process model, turn by turn."""

    def __init__(self, name: str, compaction: bool) -> None:
        self.name = name
        self.agent = fake_nbagent(compaction) if name == "nbagent" else fake_langchain(compaction)
        self.thread: Any = None

    async def turn(self, turn: int) -> int:
        """Run `turn`; its CPU time (this thread), in ns."""
        if self.name == "nbagent":
            t0 = thread_ns()
            result = await self.agent.run(prompt(turn), thread=self.thread)
            spent = thread_ns() - t0
            assert result.status == "completed" and result.output == "turn done", result.error
            self.thread = result.thread
            return spent
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 1000}
        t0 = thread_ns()
        state = await self.agent.ainvoke({"messages": [{"role": "user", "content": prompt(turn)}]}, config=config)
        spent = thread_ns() - t0
        assert state["messages"][-1].content == "turn done"
        return spent


async def check_ab(sessions: int) -> dict[str, Any]:
    """What configuring compaction costs a turn when it never triggers (1M-token window, instant
    in-process models): two sessions side by side, with and without, their turns alternating;
    per turn the CPU with less without, the median over turns, per session pair."""
    out: dict[str, Any] = {}
    for name in ("nbagent", "langchain"):
        warm_on, warm_off = FakeSession(name, True), FakeSession(name, False)
        for turn in range(1, 11):
            await warm_on.turn(turn)
            await warm_off.turn(turn)
        added, base = [], []
        for _ in range(sessions):
            with_it, without = FakeSession(name, True), FakeSession(name, False)
            pair: dict[bool, list[int]] = {True: [], False: []}
            gc.collect()
            for turn in range(1, TURNS + 1):
                for on in ((True, False) if turn % 2 else (False, True)):
                    pair[on].append(await (with_it if on else without).turn(turn))
            added.append(statistics.median((a - b) / 1e3 for a, b in zip(pair[True], pair[False], strict=True)))
            base.append(statistics.median(b / 1e3 for b in pair[False]))
        out[name] = {"added_us": added, "turn_us": base}
    return out


# ------------------------------------------------------------------------------------------ report
def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """``median (min-max)``."""
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def report(results: dict[str, Any]) -> str:
    """The markdown report."""
    lines = [f"## bench_context.py ({results['meta']['date_utc']}, load {results['meta']['load']})", ""]
    tokens = results.get("tokens")
    if tokens:
        lines += ["### 1. A 100-turn session, 4,000-token window: input tokens per turn", "",
                  "| session | turns completed | turn 10 | turn 100 | 100 / 10 | turns 91-100 / 11-20 (means) "
                  "| largest request | input tokens in all | summaries | cost at $0.40/$1.60 per M |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name in ("nbagent, Compaction()", "nbagent, no compaction", "LangChain, SummarizationMiddleware",
                     "LangChain, no middleware"):
            s = tokens[name]
            done = f"{s['completed']}" + (f" (fails at {s['failed_at']})" if s["failed_at"] else "")
            ratio = f"{s['ratio']:.2f}x" if "ratio" in s else "-"
            means = f"{s['late_mean'] / s['early_mean']:.2f}x" if "ratio" in s else "-"
            cost = f"${s['cost']:.5f}" if s["cost"] is not None else "-"
            lines.append(f"| {name} | {done} | {s['turn10'] or '-'} | {s['turn100'] or '-'} | {ratio} | {means} "
                         f"| {s['largest']:,} | {s['input_total']:,} | {s['summaries']} | {cost} |")
        same = tokens["same_turns"]
        lines += ["", f"Over the {same['turns']} turns the uncompacted session completes: "
                  f"{same['uncompacted']['input_total']:,} input tokens (${same['uncompacted']['cost']:.5f}) "
                  f"without compaction, {same['compacted']['input_total']:,} (${same['compacted']['cost']:.5f}) "
                  "with it, summary calls included.", ""]
    gauge = results.get("gauge")
    if gauge:
        d = gauge["direct"]
        on = statistics.median(gauge["S1"]["on_us"])
        gauge_us = d["request_parts_us"] + d["observe_us"] + d["row_json_us"]
        lines += ["### 2. The gauge's cost in S1 and S2 (`MemoryStore`), CPU per run", "",
                  "| | S1 | S2 (50 steps) |", "|---|---:|---:|"]
        s1, s2 = gauge["S1"], gauge["S2"]
        lines += [f"| gauge computed (median over blocks of interleaved runs, min-max) | {spread(s1['on_us'])} µs "
                  f"| {spread(s2['on_us'])} µs |",
                  f"| gauge not computed | {spread(s1['off_us'])} µs | {spread(s2['off_us'])} µs |",
                  f"| **on / off - 1** (per block) | {spread([100 * r for r in s1['overhead']], '{:+.1f}')} % "
                  f"| {spread([100 * r for r in s2['overhead']], '{:+.1f}')} % |",
                  f"| Python calls a run, on / off | {s1['calls_on']:,} / {s1['calls_off']:,} "
                  f"({100 * (s1['calls_on'] / s1['calls_off'] - 1):+.1f} %) | {s2['calls_on']:,} / {s2['calls_off']:,} "
                  f"({100 * (s2['calls_on'] / s2['calls_off'] - 1):+.1f} %) |",
                  f"| `{d.get('parts', 'request_parts')}` + `Window.observe` + `{d['row_json']}`, timed inside S1 "
                  f"(2 calls each) | {gauge_us:.1f} µs a run ({d['request_parts_us']:.1f} + {d['observe_us']:.1f} + "
                  f"{d['row_json_us']:.1f}), {100 * gauge_us / on:.1f} % of S1 with the gauge | |"]
        long = gauge["long"]
        lines += [f"| on / off - 1 in a 100-turn session, no compaction (1M window, instant model), median turn "
                  f"| {spread([100 * r for r in long['overhead']], '{:+.1f}')} % | |",
                  f"| the same, turns 91-100 (a turn with the gauge: {statistics.median(long['late_turn_us']):.0f} µs) "
                  f"| {spread([100 * r for r in long['late_overhead']], '{:+.1f}')} % | |", ""]
    over = results.get("overhead")
    if over:
        nb, lc = over["sessions"]["nbagent"], over["sessions"]["langchain"]
        lines += ["### 3. Compaction overhead per turn, summary call excluded (CPU of this thread)", "",
                  "| | nbagent | LangChain | nbagent / LangChain |", "|---|---:|---:|---:|",
                  f"| mean per turn, 100 turns (median of sessions, range) | {spread([s['mean_us'] for s in nb])} µs "
                  f"| {spread([s['mean_us'] for s in lc])} µs | {spread(over['ratios'], '{:.3f}')}x |",
                  f"| median turn | {spread([s['median_us'] for s in nb])} µs "
                  f"| {spread([s['median_us'] for s in lc])} µs "
                  f"| {over['median_us']['nbagent'] / over['median_us']['langchain']:.3f}x |",
                  f"| turns 1-10 / 91-100 (means) | {over['early_mean_us']['nbagent']:.1f} / "
                  f"{over['late_mean_us']['nbagent']:.1f} µs | {over['early_mean_us']['langchain']:.1f} / "
                  f"{over['late_mean_us']['langchain']:.1f} µs | |",
                  f"| turns that compacted | {nb[0]['compacting_turns']} | {lc[0]['compacting_turns']} | |",
                  f"| a whole turn over loopback HTTP, for scale (median) | {over['turn_cpu_us']['nbagent']:.0f} µs "
                  f"| {over['turn_cpu_us']['langchain']:.0f} µs | |"]
        check = over["check"]
        nb_add = statistics.median(check["nbagent"]["added_us"])
        lc_add = statistics.median(check["langchain"]["added_us"])
        lines += [f"| compaction configured, never triggered (1M window, instant in-process model): CPU added a turn "
                  f"(A/B, median of session pairs, range) | {spread(check['nbagent']['added_us'])} µs "
                  f"| {spread(check['langchain']['added_us'])} µs | {nb_add / lc_add:.3f}x |",
                  f"| the same session's turn without compaction (median) | "
                  f"{statistics.median(check['nbagent']['turn_us']):.0f} µs "
                  f"| {statistics.median(check['langchain']['turn_us']):.0f} µs | |", "",
                  "Where it goes, µs a turn (median of sessions):", ""]
        for name, parts in over["parts_us_per_turn"].items():
            lines.append(f"- {name}: " + "; ".join(f"{k} {v:.1f}" for k, v in parts.items()))
        lines.append("")
    return "\n".join(lines)


def versions() -> dict[str, str | None]:
    """The measured packages' versions."""
    import importlib.metadata

    out: dict[str, str | None] = {"nbagent": nbagent.__version__ if hasattr(nbagent, "__version__") else None}
    for pkg in ("langchain", "langchain-core", "langchain-openai", "langgraph", "openai"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    """The parts asked for."""
    results: dict[str, Any] = {"meta": {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": platform.python_version(),
        "platform": platform.platform(terse=True), "cpus": os.cpu_count(),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()), "argv": sys.argv[1:]}, "versions": versions()}
    if "1" in args.parts:
        print("== 1. tokens of a 100-turn session", flush=True)
        results["tokens"] = await part_tokens()
    if "2" in args.parts:
        print("== 2. the gauge in S1", flush=True)
        results["gauge"] = await part_gauge(args.blocks, args.runs, args.sessions)
    if "3" in args.parts:
        print("== 3. compaction overhead per turn", flush=True)
        results["overhead"] = await part_overhead(args.sessions)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run, print the report, write it and the JSON to bench/results/."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run (fewer blocks and sessions)")
    ap.add_argument("--parts", default="123", help="which parts: any of 1, 2, 3 (default all)")
    ap.add_argument("--blocks", type=int, default=None, help="part 2: block pairs (default 20, --quick 4)")
    ap.add_argument("--runs", type=int, default=None, help="part 2: S1 runs per block (default 200, --quick 50)")
    ap.add_argument("--sessions", type=int, default=None, help="part 3: sessions per framework (default 7, --quick 2)")
    ap.add_argument("--json", default=None, help="result file (default bench/results/context-<utc>.json)")
    args = ap.parse_args(argv)
    args.blocks = args.blocks or (4 if args.quick else 20)
    args.runs = args.runs or (50 if args.quick else 200)
    args.sessions = args.sessions or (2 if args.quick else 7)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    results = asyncio.run(amain(args))
    results["meta"]["seconds"] = round(time.perf_counter() - t0, 1)
    text = report(results)
    print()
    print(text)
    print("versions:", ", ".join(f"{k}=={v}" for k, v in results["versions"].items() if v))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.json) if args.json else RESULTS / f"context-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    out.with_suffix(".md").write_text(text + "\n")
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
