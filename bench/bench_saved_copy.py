"""Bytes and render time of a long conversation's static HTML: a chat view's saved copy (the
output a saved notebook keeps, `transcript_bundle`) and `display(result)`'s summary
(`render_result_html`).

One thread of 15 runs (58 messages: questions, tool calls with results, Markdown answers with
tables, and a call that waits for approval), rendered `--runs` times; prints the bytes and the
fastest render of each in CPU time of the thread (the fastest is the one least disturbed by other
work on the machine; CPU time leaves out the time the thread waits for a core on a busy one).

    .venv/bin/python bench/bench_saved_copy.py [--runs 80]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from nbagent import Agent, tool
from nbagent.display.html import render_result_html
from nbagent.models import ScriptedModel, tool_call
from nbagent.result import RunResult
from nbagent.store import MemoryStore
from nbagent.widgets._transcript import transcript_bundle

DAYS = 14


@tool
def lookup(city: str, day: int) -> str:
    """The weather in a city on a day."""
    return f"Weather in {city} on day {day}: sunny, 21 C, wind 3 m/s. " * 3


@tool(requires_approval=True)
def book(city: str) -> str:
    """Book a table in a city."""
    return f"booked {city}"


def conversation() -> RunResult:
    """The thread's last run (paused at the booking), with every message of the thread."""
    script: list[object] = []
    for day in range(DAYS):
        answer = f"**Day {day}**: it is *sunny* in Paris.\n\n| day | C |\n|---|---|\n| {day} | 21 |\n\n- a\n- `b`\n"
        script += [tool_call("lookup", city="Paris", day=day), answer]
    script += [tool_call("book", city="Paris"), "done"]
    agent = Agent(ScriptedModel(script), tools=[lookup, book], store=MemoryStore())
    for day in range(DAYS):
        agent.run_sync(f"What is the weather in Paris on day {day}? Please answer with a table.", thread="t")
    return agent.run_sync("Book Paris", thread="t")


def fastest(render: Callable[[], str], runs: int) -> tuple[str, float]:
    """What `render` returns, and its fastest CPU time of `runs` in milliseconds."""
    best = float("inf")
    html = ""
    for _ in range(runs):
        start = time.thread_time()
        html = render()
        best = min(best, time.thread_time() - start)
    return html, best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=80)
    runs = parser.parse_args().runs
    result = conversation()
    print(f"{len(result.messages)} messages, {result.status}")
    for name, render in (("saved copy", lambda: transcript_bundle("t", result.messages)["text/html"]),
                         ("run summary", lambda: render_result_html(result))):
        html, ms = fastest(render, runs)
        print(f"{name:12}: {len(html.encode()):>9,} bytes, {ms:6.2f} ms CPU (fastest of {runs})")


if __name__ == "__main__":
    main()
