"""OpenAI's Responses API in the chat view, in a real browser (JupyterLab 4, headless Chromium): the
notebook's kernel talks over loopback HTTP to a replay server started by the test, which answers
with recorded real OpenAI traffic (a streamed reasoning summary, then the answer). The summary
shows in the step's "Thinking" section, closed by default, above the answer, as text; a new view
of the stored thread shows it again. The pictures go to tests/browser/artifacts."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.wire.replay_server import RESPONSES_CASES_DIR, ReplayServer, load_case, split_sse_events

from .harness import KNOWN_CONSOLE_NOISE

ARTIFACTS = Path(os.environ.get("NBAGENT_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))
CASE = "responses_stream_reasoning_summary_0"

SETUP = '''\
from nbagent import Agent
from nbagent.models import OpenAIResponsesModel
from nbagent.store.memory import MemoryStore

model = OpenAIResponsesModel({model!r}, base_url={base_url!r}, api_key="test-key",
                             reasoning_effort={effort!r}, reasoning_summary="auto")
store = MemoryStore()
view = Agent(model, store=store).chat(thread="primes")
view
'''

AGAIN = '''\
Agent(model, store=store).chat(thread="primes")
'''

# the first Thinking section and the first answer of the first chat view
_STEP = """() => {
  const chat = document.querySelector('.nbagent-chat');
  const d = chat && chat.querySelector('details.nbagent-thinking');
  const answers = chat ? [...chat.querySelectorAll('.nbagent-answer')] : [];
  const a = answers.find(x => x.textContent.trim() !== '');
  if (!d || !a) return null;
  const body = d.querySelector('.nbagent-thinking-text');
  return {
    label: d.querySelector('summary').textContent,
    open: d.open,
    shown: getComputedStyle(d).display !== 'none',
    text: body.textContent,
    elements: body.querySelectorAll('*').length,
    visible: body.checkVisibility(),
    height: d.getBoundingClientRect().height,
    answer: a.textContent.trim(),
    above: Boolean(d.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING),
  };
}"""

# the stored thread's history in the second chat view
_HISTORY = """() => {
  const chat = document.querySelectorAll('.nbagent-chat')[1];
  const d = chat && chat.querySelector('details.nbagent-thinking');
  return d ? {open: d.open, text: d.textContent, strong: d.querySelectorAll('strong').length} : null;
}"""


def recorded() -> tuple[dict[str, Any], str, str]:
    """The recorded request body, its reasoning summary (from the stream's ``output_item.done``
    event of the reasoning item) and its answer."""
    case = load_case(CASE, RESPONSES_CASES_DIR)
    summary = answer = None
    for raw in split_sse_events(case["response"]["sse"]):
        data = "".join(line[5:].strip() for line in raw.splitlines() if line.startswith("data:"))
        if '"response.output_item.done"' in data:
            item = json.loads(data)["item"]
            if item["type"] == "reasoning":
                summary = "\n\n".join(p["text"] for p in item["summary"])
            elif item["type"] == "message":
                answer = "".join(c["text"] for c in item["content"] if c["type"] == "output_text")
    assert summary and answer, "the recording carries a reasoning summary and an answer"
    return case["request"]["body"], summary, answer


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    """The replay server on 127.0.0.1, in this process: the notebook's kernel reaches it over loopback."""
    with ReplayServer() as srv:
        yield srv


def test_responses_reasoning_summary_in_the_thinking_section_in_jupyterlab(
    jupyter_lab, make_notebook, page_factory, replay
):
    body, summary, answer = recorded()
    [prompt] = [m["content"] for m in body["input"] if m["role"] == "user"]
    setup = SETUP.format(model=body["model"], base_url=replay.base_url_for(CASE),
                         effort=body["reasoning"]["effort"])
    page = page_factory(jupyter_lab, make_notebook([setup, AGAIN]))
    page.run_cell(0)
    page.wait_idle()
    page.wait_for(lambda: page.output_buttons("Send").count() > 0, "the Send button")
    page.type_text(prompt)
    step = page.wait_for(
        lambda: (s := page.eval(_STEP)) and s["label"] == "Thinking" and s["answer"] and s,
        "the finished Thinking section and the answer", timeout=90)

    # the request is the recorded one: same model, prompt, reasoning options, streamed
    [sent] = [r["body"] for r in replay.responses_requests()]
    assert sent["model"] == body["model"] and sent["stream"] is True
    assert sent["reasoning"] == body["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert [m["content"] for m in sent["input"] if m.get("role") == "user"] == [prompt]

    # the summary, whole, as text: its **headings** stay asterisks, no element was made of them
    assert step["text"] == summary, step
    assert step["elements"] == 0 and "**Exploring prime numbers**" in step["text"]
    # closed by default, above the answer, and the answer is there
    # (a closed <details> keeps its text in innerText here: what is seen is checkVisibility and height)
    assert step["open"] is False and step["shown"] and not step["visible"], step
    assert step["height"] < 40, step  # one line: the "Thinking" label
    assert step["above"], step
    assert step["answer"] == answer == "3", step
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chat = page.page.locator(".nbagent-chat").first
    chat.screenshot(path=str(ARTIFACTS / "responses_view.png"))

    # opened with a click, the summary reads as it was sent
    page.page.locator(".nbagent-chat details.nbagent-thinking summary").first.click()
    opened = page.wait_for(lambda: (s := page.eval(_STEP)) and s["visible"] and s, "the opened summary", timeout=30)
    assert opened["open"] is True and opened["height"] > 150 and opened["text"] == summary, opened
    chat.screenshot(path=str(ARTIFACTS / "responses_view-thinking-open.png"))

    # a new view of the stored thread: the summary again, in a closed Thinking section, as text
    page.run_cell(1)
    page.wait_idle()
    again = page.wait_for(lambda: page.eval(_HISTORY), "the stored thread's Thinking section", timeout=60)
    assert again["open"] is False and again["strong"] == 0, again
    assert "**Exploring prime numbers**" in again["text"] and "**Final count of primes**" in again["text"], again
    assert len(replay.responses_requests()) == 1  # the history came from the store, not the model
    assert "Traceback" not in page.output_text()
    assert page.console_errors(ignore=KNOWN_CONSOLE_NOISE["lab"]) == []
