"""A model object that is dropped (a notebook cell re-run makes a new agent and model) closes its
HTTP connections: none is left for the garbage collector to find open ("unclosed transport")."""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

from nbagent import Agent
from nbagent.models import OpenAIModel
from nbagent.store import MemoryStore
from tests.wire.scripted_server import ScriptedServer


def _open_connections(server: ScriptedServer) -> int:
    return int(server.stats().get("open_connections", -1))


def test_a_dropped_model_closes_its_connections() -> None:
    ignored: list[Any] = []
    before, sys.unraisablehook = sys.unraisablehook, ignored.append
    try:
        with ScriptedServer() as server:
            model = OpenAIModel("scripted", base_url=server.base_url, api_key="sk-test", provider="scripted")
            agent = Agent(model, store=MemoryStore(), prices={"scripted": {"input": 1.0, "output": 1.0}})
            assert agent.run_sync("hello").output == "answer to hello"  # on nbagent's own loop
            assert _open_connections(server) == 1  # kept alive for the next request
            agent.me = agent  # type: ignore[attr-defined]  # in a cycle, as objects often are:
            del agent, model  # the cycle collector frees the model, its client and its sockets at once
            gc.collect()
            deadline = time.monotonic() + 5
            while _open_connections(server) and time.monotonic() < deadline:
                time.sleep(0.02)
            gc.collect()
            assert _open_connections(server) == 0, "the dropped model's connection is still open"
    finally:
        sys.unraisablehook = before
    assert [f"{u.exc_type.__name__}: {u.exc_value}" for u in ignored] == []
