#!/usr/bin/env python3
"""A process that runs ``agent.map(..., batch_api=True)`` for tests/test_batch_api.py, so that a
test can kill it with SIGKILL (or interrupt it with SIGINT, as the kernel's Interrupt does)
while it waits on a batch, then run the same map again from another process.

    python tests/batch_api_child.py <api> <server url> <store file> <tool log> [wait|nowait] [rows]

The agent is `make_agent`: one tool, ``lookup``, that appends each call to the tool log (one
line per call, flushed), so the test counts the tool's runs across processes. Prints
``STARTED`` before the map, then one line per row (``status output``).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nbagent import Agent, tool

ROWS = ["Paris", "Lima", "Oslo"]


def make_agent(api: str, url: str, store: str, log: str) -> Agent:
    @tool
    def lookup(city: str) -> str:
        """The weather in a city.

        Args:
            city: the city.
        """
        with open(log, "a", encoding="utf-8") as out:
            out.write(city + "\n")
            out.flush()
        return f"sunny in {city}"

    if api == "anthropic":
        from nbagent.models.anthropic import AnthropicModel

        model: object = AnthropicModel("claude-sonnet-4-5", base_url=url, api_key="sk-child")
    elif api == "responses":
        from nbagent.models.openai import OpenAIResponsesModel

        model = OpenAIResponsesModel("gpt-4o-mini", base_url=url + "/v1", api_key="sk-child")
    else:
        from nbagent.models.openai import OpenAIModel

        model = OpenAIModel("gpt-4o-mini", base_url=url + "/v1", api_key="sk-child")
    return Agent(model, tools=[lookup], store=store)  # type: ignore[arg-type]


def main() -> int:
    api, url, store, log = sys.argv[1:5]
    wait = (sys.argv[5] if len(sys.argv) > 5 else "wait") == "wait"
    rows = sys.argv[6].split(",") if len(sys.argv) > 6 else ROWS
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background process may inherit it ignored
    agent = make_agent(api, url, store, log)
    print("STARTED", flush=True)
    try:
        frame = agent.map(rows, batch_api=True, wait=wait, poll_s=0.05, progress=False)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        return 130
    for status, output in zip(frame["status"], frame["output"], strict=True):
        print(status, output, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
