"""Ways a run used to break, each now a clear, typed outcome with nothing lost.

Each test failed on nbagent 0.1: a tool raising SystemExit/KeyboardInterrupt (a hang under
``run_sync``), lone surrogates in model text, tool results and prompts, deeply nested tool
arguments, state that is not JSON, call ids a server reuses in every answer, and Stop during a
blocking tool.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import pytest

from nbagent import Agent, InvalidPromptError, UserError, tool
from nbagent.display.html import pretty_args, render_result_html
from nbagent.messages import AssistantMessage, ToolCall
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.models.base import ModelResponse
from nbagent.store import MemoryStore, SQLiteStore
from nbagent.usage import TokenCounts


def _answer(message: AssistantMessage) -> ModelResponse:
    return ModelResponse(message, TokenCounts(1, 0, 0, 1, 0), model="m")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()])
def test_a_tool_raising_systemexit_or_keyboardinterrupt_gives_an_error_result(
    kind: str, exc: BaseException
) -> None:
    def body() -> str:
        raise exc

    async def abody() -> str:
        raise exc

    bad = tool(body if kind == "sync" else abody, name="bad")
    agent = Agent(ScriptedModel([tool_call("bad", id="c1"), "handled", "again"]), tools=[bad], store=MemoryStore())
    result = agent.run_sync("go")  # used to hang (sync) or raise out of the run (async)
    assert result.status == "completed" and result.output == "handled"
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.is_error and res.content.startswith(type(exc).__name__)
    # and the loop behind run_sync still works
    assert agent.run_sync("again").status == "completed"


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_lone_surrogates_never_crash_a_run_or_lose_a_tool_result(store_kind: str, tmp_path: Any) -> None:
    calls: list[str] = []

    @tool
    def list_dir() -> str:
        """List a directory."""
        calls.append("ran")
        return "file-\udcff.txt"  # os.fsdecode() of a non-UTF-8 name

    def fn(messages: list[Any], request: Any) -> ModelResponse:
        if messages[-1].kind == "user":
            return _answer(AssistantMessage(text="look \ud800", reasoning="think \udfff",
                                            tool_calls=[ToolCall("c1", "list_dir", "{}")]))
        return _answer(AssistantMessage(text="done \U0001F600 \ud83d\ude00"))  # a pair split in two

    store = MemoryStore() if store_kind == "memory" else SQLiteStore(tmp_path / "t.db")
    agent = Agent(FunctionModel(fn), tools=[list_dir], store=store)
    result = agent.run_sync("go", thread="t")
    assert result.status == "completed" and calls == ["ran"]
    assert result.output == "done \U0001F600 \U0001F600"  # the split pair is joined
    loaded = asyncio.run(store.load("t"))
    assert loaded is not None
    [res] = [m for m in loaded.messages if m.kind == "tool-result"]
    assert res.content == "file-\ufffd.txt" and not res.is_error
    assert loaded.ledger["c1"].status == "finished"
    first = loaded.messages[1]
    assert first.kind == "assistant" and first.text == "look \ufffd" and first.reasoning == "think \ufffd"


def test_a_prompt_with_a_lone_surrogate_is_an_invalid_prompt() -> None:
    agent = Agent(ScriptedModel(["x"]), store=MemoryStore())
    with pytest.raises(InvalidPromptError, match="lone surrogate"):
        agent.run_sync("bad \udc80 text")
    with pytest.raises(InvalidPromptError, match="prompt part 1"):
        agent.run_sync(["ok", "bad \udc80"])


def test_deeply_nested_arguments_are_an_invalid_arguments_result() -> None:
    @tool
    def take(data: list) -> str:  # type: ignore[type-arg]
        """Take data."""
        return "took"

    deep = "[" * 50_000 + "]" * 50_000
    model = ScriptedModel([[ToolCall("c1", "take", '{"data": ' + deep + "}")], "ok"])
    agent = Agent(model, tools=[take], store=MemoryStore())
    result = agent.run_sync("go")
    assert result.status == "completed"
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.is_error and res.content.startswith("invalid arguments")
    assert len(render_result_html(result)) < 200_000 and pretty_args(deep)  # the summary renders too


class Plain:
    def __init__(self) -> None:
        self.items = ["tea"]


def test_state_that_is_not_json_is_refused_at_run_start() -> None:
    agent = Agent(ScriptedModel(["x"]), store=MemoryStore())
    with pytest.raises(UserError, match=r"state .*Plain.* cannot be stored"):
        agent.run_sync("go", state=Plain())  # used to be stored as null, silently


def test_call_ids_reused_across_answers_are_made_unique() -> None:
    """A server that names every call ``call_0``: each result must stay with its own call."""

    @tool
    def flaky(n: int) -> str:
        """Fails for n=1."""
        if n == 1:
            raise ValueError("first one fails")
        return f"ok {n}"

    model = ScriptedModel([[ToolCall("call_0", "flaky", '{"n": 1}')], [ToolCall("call_0", "flaky", '{"n": 2}')], "end"])
    agent = Agent(model, tools=[flaky], store=MemoryStore())
    result = agent.run_sync("go")
    calls = [c for m in result.messages if m.kind == "assistant" for c in m.tool_calls]
    assert len({c.id for c in calls}) == 2
    by_id = {m.call_id: m for m in result.messages if m.kind == "tool-result"}
    assert [by_id[c.id].is_error for c in calls] == [True, False]
    html = render_result_html(result)
    assert "first one fails" in html
    pytest.importorskip("pandas")
    import nbagent

    frame = nbagent.tool_calls_frame(result)
    assert frame["status"].tolist() == ["failed", "done"]


@pytest.mark.timeout(30)
def test_stop_during_a_blocking_tool_records_what_is_known_then_the_real_outcome() -> None:
    started, release = threading.Event(), threading.Event()
    effects: list[str] = []

    @tool
    def slow() -> str:
        """Blocks."""
        started.set()
        release.wait(10)
        effects.append("done")
        return "side effect done"

    store = MemoryStore()
    agent = Agent(ScriptedModel([tool_call("slow", id="c1"), "after"]), tools=[slow], store=store)

    async def main() -> Any:
        handle = agent.start("go", thread="t")
        while not started.is_set():
            await asyncio.sleep(0.01)
        handle.cancel()
        result = await handle
        release.set()
        for _ in range(200):  # the function ends after the run: its real outcome is recorded then
            loaded = await store.load("t")
            if loaded is not None and loaded.ledger["c1"].status == "finished":
                break
            await asyncio.sleep(0.02)
        return result

    result = asyncio.run(main())
    assert result.status == "cancelled"
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.status == "interrupted" and "still running" in res.content and "not known" in res.content
    assert effects == ["done"]
    loaded = asyncio.run(store.load("t"))
    assert loaded is not None and loaded.ledger["c1"].status == "finished"
    assert time.time() - loaded.ledger["c1"].time < 30




_RUNNER = r"""
import sys, time
from pathlib import Path
from nbagent import Agent, tool
from nbagent.models import ScriptedModel, tool_call
from nbagent.store import SQLiteStore

marker = Path(sys.argv[2])

@tool
def charge(amount: float) -> str:
    '''Charge a card.'''
    marker.write_text("started")
    time.sleep(float(sys.argv[3]))
    return f"charged {amount}"

agent = Agent(ScriptedModel([tool_call("charge", amount=5.0, id="c1"), "Charged."]), tools=[charge],
              store=SQLiteStore(sys.argv[1]))
result = agent.run_sync("charge me", thread="t")
print(result.status, result.output)
"""


def _start_runner(tmp_path: Any, seconds: float) -> tuple[Any, Any]:
    import subprocess

    marker = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER, str(tmp_path / "t.db"), str(marker), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not marker.exists():
        assert proc.poll() is None and time.time() < deadline, "the runner did not reach its tool"
        time.sleep(0.02)
    return proc, marker


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_resuming_a_thread_another_live_process_runs_is_refused_and_its_result_kept(tmp_path: Any) -> None:
    from nbagent import ConflictError

    proc, _ = _start_runner(tmp_path, 2.0)
    agent = Agent(ScriptedModel(["never"]), tools=[], store=SQLiteStore(tmp_path / "t.db"))
    with pytest.raises(ConflictError, match="is being run right now"):
        agent.resume_sync(thread="t")  # used to record "interrupted" and make the runner lose its result
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "completed Charged."
    loaded = asyncio.run(agent.store.load("t"))
    assert loaded is not None and loaded.ledger["c1"].status == "finished"
    [res] = [m for m in loaded.messages if m.kind == "tool-result"]
    assert res.content == "charged 5.0"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_thread_whose_process_died_can_still_be_recovered(tmp_path: Any) -> None:
    import os
    import signal

    proc, _ = _start_runner(tmp_path, 30.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)
    agent = Agent(ScriptedModel(["Checked."]), tools=[], store=SQLiteStore(tmp_path / "t.db"))
    result = agent.resume_sync(thread="t")
    assert result.status == "completed"
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.status == "interrupted"


def test_a_stored_thread_with_reused_call_ids_shows_each_result_with_its_own_call() -> None:
    """Threads written before ids were made unique: the readers pair results by position."""
    from nbagent.display.html import messages_html
    from nbagent.messages import ToolResultMessage, UserMessage

    messages = [
        UserMessage("go"),
        AssistantMessage(tool_calls=[ToolCall("call_0", "flaky", '{"n": 1}')]),
        ToolResultMessage("call_0", "flaky", "ValueError: first one fails", True, "failed", 0.1),
        AssistantMessage(tool_calls=[ToolCall("call_0", "flaky", '{"n": 2}')]),
        ToolResultMessage("call_0", "flaky", "ok 2", False, "done", 0.1),
        AssistantMessage(text="end"),
    ]
    html = messages_html(messages)
    assert html.index("first one fails") < html.index("ok 2")
    assert html.count("first one fails") == 1
