"""The Responses API in the chat view, from recorded real OpenAI traffic read by
`OpenAIResponsesModel` over loopback HTTP: a reasoning summary streams into the step's collapsed
"Thinking" section, above the answer, as text, and a new view of the stored thread shows it again;
the calls of built-in tools (web search, code interpreter, image generation) are read-only rows
of the tool table, live, in a stored thread's history and in the run's static summary."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nbagent import Agent
from nbagent.models.openai import OpenAIResponsesModel
from nbagent.store.memory import MemoryStore
from nbagent.widgets.stream import ThinkingText
from nbagent.widgets.tool_table import ToolRow
from tests.wire.replay_server import RESPONSES_CASES_DIR, ReplayServer, load_case, split_sse_events

from .test_widgets import _log_index, all_widgets, ask, is_answer

CASE = "responses_stream_reasoning_summary_0"
KEY = "sk-responses-view-0123456789abcdef"


def recorded_summary() -> str:
    """The summary text the recorded stream carries, read from its ``output_item.done`` event."""
    case = load_case(CASE, RESPONSES_CASES_DIR)
    for raw in split_sse_events(case["response"]["sse"]):
        data = "".join(line[5:].strip() for line in raw.splitlines() if line.startswith("data:"))
        if '"response.output_item.done"' in data:
            item = json.loads(data)["item"]
            if item["type"] == "reasoning":
                return "\n\n".join(p["text"] for p in item["summary"])
    raise AssertionError("no reasoning item in the recorded stream")


@pytest.fixture(scope="module")
def server() -> Any:
    with ReplayServer() as srv:
        yield srv


async def test_a_responses_reasoning_summary_shows_in_the_thinking_section(server: Any) -> None:
    summary = recorded_summary()
    assert summary  # the recording has one
    model = OpenAIResponsesModel("gpt-5", base_url=server.base_url_for(CASE), api_key=KEY,
                                 reasoning_effort="medium", reasoning_summary="auto")
    store = MemoryStore()
    try:
        view = Agent(model, store=store).chat(thread="t-responses-think")
        await view.wait_loaded()
        result = await ask(view, "What is 1 + 2?")
        assert result.status == "completed", result.error
        [th] = [w for w in all_widgets(view) if isinstance(w, ThinkingText)]
        [answer] = [w for w in all_widgets(view) if is_answer(w)]
        assert th.done and th.plain and th.html == ""  # text, never HTML
        assert th.text == summary == result.messages[-1].reasoning
        assert _log_index(view, ThinkingText) < _log_index(view, type(answer))  # above the answer
        assert summary[:40] not in answer.text and answer.text == "3"
        # a new view of the stored thread: the summary in a closed Thinking section
        again = Agent(model, store=store).chat(thread="t-responses-think")
        await again.wait_loaded()
        history = again.history.value
        assert '<details class="nbagent-thinking"' in history
        first_words = summary.split("\n")[0][:30].replace("'", "&#x27;")
        assert first_words in history
    finally:
        await model.aclose()


BUILT_IN = {
    "responses_web_search": ("web_search", "weather: San Francisco, CA", "ran on the model&#x27;s server"),
    "responses_stream_web_search": ("web_search", "January 1, 2026 Bitcoin price", "ran on the model&#x27;s server"),
    "responses_code_interpreter": ("code_interpreter", "65465 - 6544 * 65464", "-428330955.97745"),
    "responses_image_generation": ("image_generation", "pink leucistic axolotl", "an image (1536x1024 jpeg)"),
}


@pytest.mark.parametrize("name", sorted(BUILT_IN))
async def test_built_in_tool_calls_are_read_only_rows_of_the_tool_table(server: Any, name: str) -> None:
    tool, args, result_text = BUILT_IN[name]
    case = load_case(name, RESPONSES_CASES_DIR)
    body = case["request"]["body"]
    builtin = [t for t in body["tools"] if t["type"] != "function"]
    model = OpenAIResponsesModel(body["model"], base_url=server.base_url_for(name), api_key=KEY,
                                 builtin_tools=builtin)
    store = MemoryStore()
    try:
        view = Agent(model, store=store).chat(thread="t-built-in")
        await view.wait_loaded()
        result = await ask(view, "go")
        assert result.status == "completed", result.error
        [row] = [w for w in all_widgets(view) if isinstance(w, ToolRow)]
        assert (row.name, row.status, row.pending) == (tool, "done", None)
        assert not row.buttons and row.actions.layout.display == "none"  # read-only: nothing to click
        assert args in row.html.value and result_text in row.html.value
        assert "/9j/" not in row.html.value  # a generated image's base64 is not shown as text
        again = Agent(model, store=store).chat(thread="t-built-in")  # the stored thread's history
        await again.wait_loaded()
        for html in (again.history.value, result._repr_html_()):
            assert f">{tool}</code>" in html and args in html and result_text in html
    finally:
        await model.aclose()
