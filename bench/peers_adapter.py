"""nbagent's adapter for a peer benchmark harness (`bench/run.py` uses it too).

An outside harness loads this file with ``NBAGENT_ADAPTER=bench/peers_adapter.py`` to measure
nbagent side by side with the peers.

Contract: ``build(spec, script, helpers)`` returns an
``async () -> helpers.RunOut`` that performs ONE complete agent run through nbagent's public async
API with default settings: a `FunctionModel` that calls ``script.next()`` exactly once per model
request, ``helpers.make_tool(script)`` registered with `Tool.from_function`, a new thread per run,
and the agent's default store (what a user gets). The only non-default setting is ``max_steps``,
raised so the 50-step loop is not stopped (the peers raise their limits the same way).

``NBAGENT_BENCH_STORE=memory`` makes the agent use ``store=MemoryStore()`` instead of the default
store, so both variants can be measured with the same harness (the harness has one nbagent slot).
`bench/run.py` measures both in one run, as ``nbagent`` and ``nbagent_mem``.
"""

from __future__ import annotations

import os
from typing import Any

try:
    import nbagent
except ImportError:  # not installed in this venv
    nbagent = None  # type: ignore[assignment]

AVAILABLE = nbagent is not None
SKIP_REASON = None if AVAILABLE else "nbagent is not installed in this venv (pip install -e .)"

MAX_STEPS = 1000
"""Like the peers' recursion_limit / max_turns / request_limit: the 50-step loop must not stop."""


def build(spec: Any, script: Any, helpers: Any, *, store: str | None = None) -> Any:
    """One complete nbagent run per call of the returned coroutine function.

    Args:
        spec: the scenario (`helpers.Spec`): turns, ``stream``, ``sync_tool``.
        script: the scripted cursor shared by the fake model and the tool.
        helpers: the harness module (``make_tool``, ``RunOut``, ``Unsupported``, ``PROMPT``).
        store: ``"default"`` (the agent's default store) or ``"memory"`` (``MemoryStore()``);
            default: the ``NBAGENT_BENCH_STORE`` environment variable, else ``"default"``.
    """
    if not AVAILABLE:
        raise helpers.Unsupported(SKIP_REASON)
    from nbagent import Agent, RunEndedEvent, TextDeltaEvent, Tool, ToolCall
    from nbagent.models import FunctionModel

    store = store or os.environ.get("NBAGENT_BENCH_STORE", "default")
    if store not in ("default", "memory"):
        raise helpers.Unsupported(f"NBAGENT_BENCH_STORE must be 'default' or 'memory', got {store!r}")

    async def answer(messages: Any, request: Any) -> Any:
        turn = script.next()
        if turn.calls:
            return [ToolCall(c.id, c.name, c.args_json) for c in turn.calls]
        return turn.text

    async def stream_answer(messages: Any, request: Any) -> Any:
        turn = script.next()
        if turn.calls:  # not used by the scenarios; keeps the fake honest
            raise NotImplementedError("streamed tool calls")
        for delta in turn.deltas or (turn.text,):
            yield delta

    model = FunctionModel(answer, stream_function=stream_answer, model_name="scripted")
    tool = Tool.from_function(helpers.make_tool(script))  # async def, or a plain def for S1s
    options: dict[str, Any] = {}
    if store == "memory":
        from nbagent.store import MemoryStore

        options["store"] = MemoryStore()
    agent = Agent(model, tools=[tool], max_steps=MAX_STEPS, **options)
    prompt = helpers.PROMPT
    RunOut = helpers.RunOut

    async def run() -> Any:
        script.reset()
        model.requests.clear()  # the fake keeps every request for test assertions; not framework cost
        result = await agent.run(prompt)
        return RunOut(result.output)

    async def run_stream() -> Any:
        script.reset()
        model.requests.clear()
        n = 0
        deltas: list[str] = []
        result = None
        async for event in agent.stream(prompt):
            n += 1
            if type(event) is TextDeltaEvent:
                deltas.append(event.delta)
            elif type(event) is RunEndedEvent:
                result = event.result
        assert result is not None and result.output == "".join(deltas), (
            "streamed text differs from the output"
        )
        return RunOut(result.output, n)

    run_stream.make_delta = lambda d: d  # type: ignore[attr-defined]  # FunctionModel takes plain str deltas
    return run_stream if spec.stream else run
