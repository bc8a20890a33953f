"""The notebook edge's tools with the real local model (SmolLM2-135M behind llama.cpp): a
`dataframe_tools` call and a `python_tool` call that waits for approval, then runs in the given
namespace. The model is tiny, so prompts name the tool and the assertions are about structure (the
right tool, arguments the tool accepts, its result sent back), never wording. Temperature 0."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from nbagent import Agent
from nbagent.notebook import dataframe_tools, python_tool
from tests.test_openai_local import local

pytestmark = [pytest.mark.local_llm, pytest.mark.timeout(600)]

SALES = pd.DataFrame({"region": ["North", "South", "North", "East"], "units": [12, 7, 30, 4]})


async def test_the_local_model_calls_a_dataframe_tool(local_llm_base_url: str) -> None:
    [head] = [t for t in dataframe_tools(SALES, name="sales") if t.name == "sales_head"]
    model = local(local_llm_base_url)
    try:
        result = await Agent(model, tools=[head], max_steps=3).run("Use the sales_head tool.")
    finally:
        await model.aclose()
    calls = [c for m in result.messages if m.kind == "assistant" for c in m.tool_calls]
    assert calls and calls[0].name == "sales_head", result.messages
    [first] = [m for m in result.messages if m.kind == "tool-result" and m.call_id == calls[0].id]
    n = int(calls[0].args.get("n", 5))
    if first.is_error:  # a value the tool refuses comes back as an error the model can read
        assert "n" in first.content
    else:
        for region in SALES.head(n)["region"]:
            assert region in first.content
    assert result.status in ("completed", "stopped"), result.error


async def test_the_local_model_calls_python_after_approval(local_llm_base_url: str) -> None:
    namespace: dict[str, Any] = {}
    model = local(local_llm_base_url)
    agent = Agent(model, tools=[python_tool(namespace=namespace, timeout=10)], max_steps=3)
    try:
        paused = await agent.run("Use the python tool.")
        assert paused.status == "paused", paused.error  # code waits for a person
        [call] = paused.pending
        assert call.name == "python" and isinstance(call.args.get("code"), str)
        assert namespace == {}  # nothing ran before the approval
        done = await agent.resume(paused, approve=paused.pending)
    finally:
        await model.aclose()
    [answer] = [m for m in done.messages if m.kind == "tool-result" and m.call_id == call.id]
    assert answer.content.strip()  # its output, value or error went back to the model
    assert done.status in ("completed", "stopped"), done.error
