"""Long sessions against real servers (issue #25's tests): `OpenAIModel` against the small-window
server of tests/wire/window_server.py, a 100-turn session whose tool returns a 3,000-row
DataFrame, with compaction on (it completes) and off (it fails naming the fix); a kill -9 of a
process in the middle of a compaction, then a resume in another; and the same overflow,
compaction and retry with `AnthropicModel` against the Anthropic-shaped server of
tests/wire/anthropic_window_server.py.

The crash's child process is this file run as a script (``python tests/test_context_sessions.py
DB PORT WINDOW [anthropic]``, WINDOW 0: not known): it runs turns on thread ``t`` of a SQLite file against the
parent's server until it is killed; its tool appends its call id to the file named by
``NBAGENT_TEST_MARKERS`` each time it runs (the resuming process's tool too).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # the child: make `nbagent` and `tests` importable
    sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from nbagent import Agent, Compaction, RunContext, tool  # noqa: E402
from nbagent._run.execute import FRAME_COLUMNS, FRAME_ROWS  # noqa: E402
from nbagent.exceptions import ContextOverflowError  # noqa: E402
from nbagent.messages import CompactionMessage, Message, ToolResultMessage, UserMessage  # noqa: E402
from nbagent.models import AnthropicModel, OpenAIModel  # noqa: E402
from nbagent.store import SQLiteStore  # noqa: E402
from tests.wire.anthropic_window_server import AnthropicWindowServer, anthropic_paired  # noqa: E402
from tests.wire.window_server import WindowServer, paired  # noqa: E402

WINDOW = 4_000
ROWS = 3_000
TURNS = 100
PRICES = {"window": {"input": 1.0, "output": 1.0}}


@tool
def sales(n: int) -> pd.DataFrame:
    """The sales of one store, a row a day.

    Args:
        n: the store's number.
    """
    return pd.DataFrame({"day": [f"2026-{i % 12 + 1:02d}-{i % 28 + 1:02d}" for i in range(ROWS)],
                         "store": [n] * ROWS, "amount": [round(17.5 * i + n, 2) for i in range(ROWS)]})


def prompt(turn: int) -> str:
    return f"turn {turn}: show me the sales of store {turn}"


def window_model(server: WindowServer, window: int | None = WINDOW) -> OpenAIModel:
    return OpenAIModel("window", base_url=server.base_url, api_key="sk-test", provider="window",
                       context_window=window)


async def session(agent: Agent, turns: int, thread: str | None = None) -> list[Any]:
    """Run `turns` chat turns on one thread; stop at the first one that does not complete."""
    results = []
    for turn in range(turns):
        result = await agent.run(prompt(turn), thread=thread)
        results.append(result)
        thread = result.thread
        if result.status != "completed":
            break
    return results


def frame_text(n: int) -> str:
    """What the model reads of `sales(n)`: its first and last rows and its shape."""
    return sales.function(n).to_string(max_rows=FRAME_ROWS, min_rows=FRAME_ROWS, max_cols=FRAME_COLUMNS,
                                       max_colwidth=50, show_dimensions=True)


async def check_session(db: Path, results: list[Any], server: Any, threshold: bool) -> list[CompactionMessage]:
    """What a 100-turn session with compaction must show, on the wire and in the store (either
    server: both keep `requests`, `sizes`, `refused`, `window`); returns the compaction records."""
    messages = results[-1].messages
    records = [m for m in messages if isinstance(m, CompactionMessage)]
    assert len(records) >= 5, "a 100-turn session must have compacted repeatedly"
    assert server.max_prompt_tokens <= server.window
    if threshold:
        assert server.refused == 0 and {r.trigger for r in records} == {"threshold"}
    else:  # each refusal: a compaction (its summary request, no tools), then the retry, which fits
        assert server.refused == len(records) and {r.trigger for r in records} == {"overflow"}
        refused = [i for i, size in enumerate(server.sizes) if size > server.window]
        for i in refused:
            summary, retry = server.requests[i + 1], server.requests[i + 2]
            assert not summary.get("tools") and server.sizes[i + 1] <= server.window
            assert retry.get("tools") and server.sizes[i + 2] < server.sizes[i]
    assert sum(not body.get("tools") for body in server.requests) == len(records)  # one summary each
    # the store holds every message, as the run handed them out
    loaded = await SQLiteStore(db).load(results[-1].thread)
    assert loaded is not None
    assert [m.to_dict() for m in loaded.messages] == [m.to_dict() for m in messages]
    kinds = Counter(m.kind for m in loaded.messages)
    assert kinds == {"user": TURNS, "assistant": 2 * TURNS, "tool-result": TURNS, "compaction": len(records)}
    assert [m.content for m in loaded.messages if isinstance(m, UserMessage)] == [prompt(t) for t in range(TURNS)]
    results_ = [m for m in loaded.messages if isinstance(m, ToolResultMessage)]
    assert [m.whole_text for m in results_] == [frame_text(t) for t in range(TURNS)]  # kept whole, even when cut
    assert all(f"[{ROWS} rows x 3 columns]" in m.content for m in results_)
    assert Counter(row.purpose for row in loaded.usage) == {"run": 2 * TURNS, "compaction": len(records)}
    return records


# ---------------------------------------------------------------------------------- 100 turns
@pytest.mark.parametrize("known", [True, False], ids=["window-known", "window-unknown"])
async def test_a_100_turn_session_with_a_dataframe_tool_completes(tmp_path: Path, known: bool) -> None:
    """Window known: compaction at the threshold keeps every request inside it. Window unknown
    to nbagent: only the server's real ``context_length_exceeded`` 400 triggers a compaction
    and a retry, and the session goes on."""
    with WindowServer(window=WINDOW) as server:
        model = window_model(server, WINDOW if known else None)
        agent = Agent(model, tools=[sales], store=SQLiteStore(tmp_path / "t.db"), prices=PRICES,
                      compaction=Compaction(at=0.7, keep_last=4))
        started = time.perf_counter()
        try:
            results = await session(agent, TURNS)
        finally:
            await model.aclose()
        elapsed = time.perf_counter() - started
    assert [r.status for r in results] == ["completed"] * TURNS, results[-1].error
    assert [r.output for r in results] == [f"turn done: {prompt(t)[:40]}" for t in range(TURNS)]
    # every request the server got had each tool call paired with its result
    assert server.requests and all(paired(body) for body in server.requests)
    records = await check_session(tmp_path / "t.db", results, server, known)
    # the last request: the summary rides with the system prompt, the turn's messages whole
    last = server.requests[-1]["messages"]
    assert last[0]["role"] == "system" and "SUMMARY(" in last[0]["content"]
    users = [m["content"] for m in last if m["role"] == "user"]
    assert users[-1] == prompt(TURNS - 1) and len(users) <= 10  # the older ones are in the summary
    assert [m["role"] for m in last[-3:]] == ["user", "assistant", "tool"]
    print(f"\n100 turns ({'known' if known else 'unknown'} window): {elapsed:.2f} s, {len(server.requests)} "
          f"requests, {len(records)} compactions, {server.refused} refused, max {server.max_prompt_tokens} tokens")


async def test_a_streamed_session_compacts_on_the_streamed_refusal(tmp_path: Path) -> None:
    """Streamed (as the chat view runs), the refusal comes as the stream's HTTP 400: the same
    compaction and retry, the text deltas of every turn delivered once."""
    with WindowServer(window=WINDOW) as server:
        model = window_model(server, None)
        agent = Agent(model, tools=[sales], store=SQLiteStore(tmp_path / "t.db"), prices=PRICES,
                      compaction=Compaction(keep_last=4))
        thread, texts, kinds = None, [], Counter()
        try:
            for turn in range(40):
                async for event in agent.stream(prompt(turn), thread=thread):
                    kinds[event.kind] += 1
                    if event.kind == "run-started":
                        thread, texts = event.thread, [*texts, ""]
                    elif event.kind == "text-delta":
                        texts[-1] += event.delta
                assert event.result.status == "completed", event.result.error
        finally:
            await model.aclose()
    assert all(body.get("stream") for body in server.requests if body.get("tools"))
    assert texts == [f"turn done: {prompt(t)[:40]}" for t in range(40)]
    assert server.refused >= 2 and kinds["compaction"] == server.refused
    assert all(paired(body) for body in server.requests) and server.max_prompt_tokens <= WINDOW
    loaded = await SQLiteStore(tmp_path / "t.db").load(thread)
    assert loaded is not None and Counter(m.kind for m in loaded.messages)["user"] == 40


async def test_the_same_session_without_compaction_fails_and_names_the_fix(tmp_path: Path) -> None:
    with WindowServer(window=WINDOW) as server:
        model = window_model(server)
        agent = Agent(model, tools=[sales], store=SQLiteStore(tmp_path / "t.db"), prices=PRICES)
        try:
            results = await session(agent, TURNS)
        finally:
            await model.aclose()
    failed = results[-1]
    assert len(results) < TURNS // 2 and [r.status for r in results[:-1]] == ["completed"] * (len(results) - 1)
    assert failed.status == "failed" and isinstance(failed.exception, ContextOverflowError)
    assert "Agent(compaction=Compaction(...))" in (failed.error or "")
    assert f"maximum context length is {WINDOW} tokens" in (failed.error or "")
    assert server.refused == 1 and server.sizes[-1] > WINDOW  # refused once, not retried
    assert all(paired(body) for body in server.requests)
    loaded = await SQLiteStore(tmp_path / "t.db").load(failed.thread)
    assert loaded is not None and not any(m.kind == "compaction" for m in loaded.messages)
    users = [m.content for m in loaded.messages if isinstance(m, UserMessage)]
    assert users == [prompt(t) for t in range(len(results))]


# ---------------------------------------------------------------------------------- kill -9
@tool
def charge(ctx: RunContext[Any], n: int) -> str:
    """Charge store n's card (must never run twice for one call).

    Args:
        n: the store's number.
    """
    with open(os.environ["NBAGENT_TEST_MARKERS"], "a") as marks:
        marks.write(f"{ctx.call_id}\n")
    return f"charged store {n}: " + " ".join(f"{n * 1000 + i}" for i in range(150))


def crash_agent(db: Path, port: int, window: int | None, provider: str = "openai") -> Agent:
    """The agent of the child and of the process that resumes its thread: the same options."""
    model: OpenAIModel | AnthropicModel
    if provider == "anthropic":
        model = AnthropicModel("claude-haiku-4-5", base_url=f"http://127.0.0.1:{port}", api_key="sk-test",
                               context_window=window, max_retries=0)
    else:
        model = OpenAIModel("window", base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", provider="window",
                            context_window=window, max_retries=0)
    return Agent(model, tools=[charge], store=SQLiteStore(db), prices=PRICES,
                 compaction=Compaction(at=0.6, keep_last=4))


def child(db: str, port: str, window: str, provider: str = "openai") -> None:
    """Run turns on thread ``t`` until killed (or 60 turns); `window` "0": not known."""
    agent = crash_agent(Path(db), int(port), int(window) or None, provider)
    for turn in range(60):
        result = agent.run_sync(prompt(turn), thread="t")
        print(f"turn {turn} {result.status}", flush=True)


def is_summary(body: dict[str, Any]) -> bool:
    return not body.get("tools")


def after_summary(body: dict[str, Any]) -> bool:
    """The first kind of request a compaction changes: a model call with the summary in it."""
    messages = body.get("messages") or []
    return bool(body.get("tools")) and bool(messages) and "SUMMARY(" in (messages[0].get("content") or "")


def stored_call_ids(messages: list[Message]) -> list[str]:
    return [m.call_id for m in messages if isinstance(m, ToolResultMessage)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("hold", "window"), [(is_summary, WINDOW), (after_summary, WINDOW), (is_summary, None)],
                         ids=["during-the-summary", "after-the-record", "during-an-overflow-summary"])
async def test_kill_9_during_a_compaction_then_resume(tmp_path: Path, hold: Any, window: int | None) -> None:
    """The child is killed while the server holds the summary request (the compaction is in
    flight: no record yet), or the first request after it (the record is committed), or the
    summary request of a compaction a ``context_length_exceeded`` refusal triggered (the window
    not known). Resumed in this process, the thread sends what the child would have, runs no
    tool twice and loses nothing."""
    db, markers = tmp_path / "t.db", tmp_path / "markers"
    markers.touch()
    with WindowServer(window=WINDOW) as server:
        server.hold(hold)
        env = {**os.environ, "NBAGENT_TEST_MARKERS": str(markers), "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, __file__, str(db), str(server.port), str(window or 0)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while server.held == 0:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the child never reached a compaction"
                await asyncio.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        crashed = len(server.requests) - 1
        held = server.requests[crashed]
        assert hold(held) and not any(hold(b) for b in server.requests[:crashed])
        done = out.splitlines()
        assert done and all(line.endswith(" completed") for line in done)
        before = await SQLiteStore(db).load("t")
        assert before is not None
        ran_before = markers.read_text().split()
        server.release()

        os.environ["NBAGENT_TEST_MARKERS"] = str(markers)  # this process's tools mark the same file
        try:
            agent = crash_agent(db, server.port, window)
            resumed = await agent.resume(thread="t")
            later = [await agent.run(prompt(t), thread="t") for t in range(len(done) + 1, len(done) + 4)]
            await agent.model.aclose()  # type: ignore[attr-defined]
        finally:
            del os.environ["NBAGENT_TEST_MARKERS"]
    assert resumed.status == "completed", resumed.error
    assert all(r.status == "completed" for r in later), [r.error for r in later]

    # the resumed process sends the request the child was killed waiting for (after the request
    # the server refused, sent again and refused again, when a refusal set off the compaction)
    first = crashed + 1
    if window is None:
        assert server.sizes[crashed - 1] > WINDOW and server.requests[first] == server.requests[crashed - 1]
        first += 1
    assert server.requests[first] == held
    if hold is is_summary:  # then the compaction it finished applies to the next request
        assert after_summary(server.requests[first + 1])
    assert all(paired(body) for body in server.requests)

    # nothing ran twice, and every call that ran has its result stored
    loaded = await SQLiteStore(db).load("t")
    assert loaded is not None
    marked = markers.read_text().split()
    assert marked[:len(ran_before)] == ran_before
    assert Counter(marked).most_common(1)[0][1] == 1, "a tool ran twice"
    assert stored_call_ids(loaded.messages) == marked
    # nothing was lost: what the child had committed is the thread's beginning, every turn once
    assert [m.to_dict() for m in loaded.messages[:len(before.messages)]] == [m.to_dict() for m in before.messages]
    users = [m.content for m in loaded.messages if isinstance(m, UserMessage)]
    assert users == [prompt(t) for t in range(len(done) + 1)] + [prompt(t) for t in range(len(done) + 1, len(done) + 4)]
    records = [m for m in loaded.messages if isinstance(m, CompactionMessage)]
    assert records and len([b for b in server.requests if is_summary(b)]) == len(records) + (hold is is_summary)
    print(f"\nkilled {hold.__name__} at request {crashed + 1}, after {len(done)} turns; resumed: {resumed.status}")


# ---------------------------------------------------------------------------------- Anthropic
RECORDED_TOO_LONG = Path(__file__).parent / "wire" / "anthropic_messages" / "anthropic_error_400_prompt_too_long.json"


def anthropic_model(server: AnthropicWindowServer, window: int | None) -> AnthropicModel:
    return AnthropicModel("claude-haiku-4-5", base_url=server.url, api_key="sk-test", context_window=window,
                          max_retries=0)


def test_the_anthropic_server_refuses_as_the_recorded_api_does() -> None:
    import anthropic

    recorded = json.loads(RECORDED_TOO_LONG.read_text())["response"]["body"]
    with AnthropicWindowServer(window=100) as server:
        sdk = anthropic.Anthropic(base_url=server.url, api_key="sk-test", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as caught:
            sdk.messages.create(model="claude-haiku-4-5", max_tokens=10,
                                messages=[{"role": "user", "content": "word " * 200}])
        answer = sdk.messages.create(model="claude-haiku-4-5", max_tokens=10,
                                     messages=[{"role": "user", "content": "hi there"}])
        sdk.close()
    body = caught.value.body
    assert caught.value.status_code == 400
    assert body.keys() == recorded.keys() and body["error"].keys() == recorded["error"].keys()
    assert body["error"]["message"] == f"prompt is too long: {server.sizes[0]} tokens > 100 maximum"
    assert answer.content[0].text.startswith("SUMMARY(1 messages, ")
    assert answer.usage.input_tokens == server.sizes[1]


@pytest.mark.parametrize("window", [WINDOW, None], ids=["window-known", "window-200k"])
async def test_a_100_turn_anthropic_session_compacts_and_retries(tmp_path: Path, window: int | None) -> None:
    """`AnthropicModel` against the Anthropic-shaped server. Window known: compaction at the
    threshold. Not given: the model takes claude-haiku-4-5's 200k window, the server serves
    4,000 tokens, and each ``prompt is too long`` 400 is met by a compaction and a retry."""
    with AnthropicWindowServer(window=WINDOW) as server:
        model = anthropic_model(server, window)
        assert model.context_window == (window or 200_000)
        agent = Agent(model, tools=[sales], store=SQLiteStore(tmp_path / "t.db"),
                      compaction=Compaction(at=0.7, keep_last=4))
        started = time.perf_counter()
        try:
            results = await session(agent, TURNS)
        finally:
            await model.aclose()
        elapsed = time.perf_counter() - started
    assert [r.status for r in results] == ["completed"] * TURNS, results[-1].error
    assert [r.output for r in results] == [f"turn done: {prompt(t)[:40]}" for t in range(TURNS)]
    assert server.unpaired == 0 and all(anthropic_paired(body) for body in server.requests)
    records = await check_session(tmp_path / "t.db", results, server, window is not None)
    last = server.requests[-1]
    assert "SUMMARY(" in last["system"][0]["text"]
    prompts = [b["text"] for m in last["messages"] if m["role"] == "user"
               for b in ([{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"])
               if b.get("type") == "text"]
    assert prompts[-1] == prompt(TURNS - 1) and len(prompts) <= 10
    print(f"\nAnthropic, 100 turns ({'known' if window else '200k'} window): {elapsed:.2f} s, "
          f"{len(server.requests)} requests, {len(records)} compactions, {server.refused} refused")


async def test_a_100_turn_anthropic_session_with_the_apis_own_tool_result_clearing(tmp_path: Path) -> None:
    """``Compaction.native()``: each request asks the API to clear old tool results past `at` of
    the window (with the beta header); the server clears them, the gauge reads its count after the
    edit, and nbagent's own summary runs only when a request is refused even so."""
    with AnthropicWindowServer(window=WINDOW) as server:
        model = anthropic_model(server, WINDOW)
        agent = Agent(model, tools=[sales], store=SQLiteStore(tmp_path / "t.db"),
                      compaction=Compaction.native(at=0.7, keep_last=4))
        try:
            results = await session(agent, TURNS)
        finally:
            await model.aclose()
    assert [r.status for r in results] == ["completed"] * TURNS, results[-1].error
    assert server.unpaired == 0 and all(anthropic_paired(body) for body in server.requests)
    edit = {"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 2},
            "trigger": {"type": "input_tokens", "value": int(0.7 * WINDOW)}}
    asked = [body for body in server.requests if body.get("tools")]
    assert asked and all(body["context_management"] == {"edits": [edit]} for body in asked)
    assert not any("context_management" in body for body in server.requests if not body.get("tools"))
    cleared = [n for n in server.cleared if n]
    assert len(cleared) > TURNS  # the server cleared results in most requests of the session
    messages = results[-1].messages
    records = [m for m in messages if isinstance(m, CompactionMessage)]
    assert {r.trigger for r in records} <= {"overflow"} and len(records) == server.refused
    assert results[-1].context.tokens == server.sizes[-1]  # the gauge: the API's count after clearing
    loaded = await SQLiteStore(tmp_path / "t.db").load(results[-1].thread)
    assert loaded is not None and [m.to_dict() for m in loaded.messages] == [m.to_dict() for m in messages]
    assert [m.whole_text for m in loaded.messages if isinstance(m, ToolResultMessage)] == [
        frame_text(t) for t in range(TURNS)]  # the thread keeps every result whole
    print(f"\nnative clearing, 100 turns: {len(server.requests)} requests, {len(cleared)} cleared, "
          f"{len(records)} summaries, {server.refused} refused")


@pytest.mark.timeout(120)
async def test_kill_9_during_an_anthropic_compaction_then_resume(tmp_path: Path) -> None:
    """`AnthropicModel`: the child is killed while the server holds a compaction's summary request;
    resumed in this process, the thread sends that request again, runs no tool twice and loses
    nothing."""
    db, markers = tmp_path / "t.db", tmp_path / "markers"
    markers.touch()
    with AnthropicWindowServer(window=WINDOW) as server:
        server.hold(is_summary)
        env = {**os.environ, "NBAGENT_TEST_MARKERS": str(markers), "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, __file__, str(db), str(server.port), str(WINDOW), "anthropic"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while server.held == 0:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the child never reached a compaction"
                await asyncio.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        crashed = len(server.requests) - 1
        held = server.requests[crashed]
        done = out.splitlines()
        assert is_summary(held) and done and all(line.endswith(" completed") for line in done)
        before = await SQLiteStore(db).load("t")
        assert before is not None and not any(m.kind == "compaction" for m in before.messages)
        ran_before = markers.read_text().split()
        server.release()
        os.environ["NBAGENT_TEST_MARKERS"] = str(markers)
        try:
            agent = crash_agent(db, server.port, WINDOW, "anthropic")
            resumed = await agent.resume(thread="t")
            later = [await agent.run(prompt(t), thread="t") for t in range(len(done) + 1, len(done) + 4)]
            await agent.model.aclose()  # type: ignore[attr-defined]
        finally:
            del os.environ["NBAGENT_TEST_MARKERS"]
    assert resumed.status == "completed" and all(r.status == "completed" for r in later), resumed.error
    assert server.requests[crashed + 1] == held  # the summary request the child was killed waiting for
    assert server.unpaired == 0 and all(anthropic_paired(body) for body in server.requests)
    loaded = await SQLiteStore(db).load("t")
    assert loaded is not None
    marked = markers.read_text().split()
    assert marked[:len(ran_before)] == ran_before and Counter(marked).most_common(1)[0][1] == 1, "a tool ran twice"
    assert stored_call_ids(loaded.messages) == marked
    assert [m.to_dict() for m in loaded.messages[:len(before.messages)]] == [m.to_dict() for m in before.messages]
    users = [m.content for m in loaded.messages if isinstance(m, UserMessage)]
    assert users == [prompt(t) for t in range(len(done) + 1)] + [prompt(t) for t in range(len(done) + 1, len(done) + 4)]
    assert any(m.kind == "compaction" for m in loaded.messages)


async def test_an_anthropic_session_without_compaction_fails_and_names_the_fix(tmp_path: Path) -> None:
    with AnthropicWindowServer(window=WINDOW) as server:
        model = anthropic_model(server, None)
        agent = Agent(model, tools=[sales], store=SQLiteStore(tmp_path / "t.db"))
        try:
            results = await session(agent, TURNS)
        finally:
            await model.aclose()
    failed = results[-1]
    assert failed.status == "failed" and isinstance(failed.exception, ContextOverflowError)
    assert "Agent(compaction=Compaction(...))" in (failed.error or "")
    assert f"prompt is too long: {server.sizes[-1]} tokens > {WINDOW} maximum" in (failed.error or "")
    assert server.refused == 1 and len(results) < TURNS // 2


if __name__ == "__main__":
    child(*sys.argv[1:5])
