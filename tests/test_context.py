"""The context window: the gauge (`result.context`), result caps with `read_result`, and
compaction (summary and clear_results), with fake models; the real-server sessions are in
tests/test_context_sessions.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import warnings

import pytest

from nbagent import Agent, Compaction, CompactionEvent, ContextUsage, UserError, tool
from nbagent.context import PARTS, cut_result, scale_parts, visible
from nbagent.exceptions import ContextOverflowError, ServerError
from nbagent.messages import CompactionMessage, ToolCall, ToolResultMessage, UserMessage
from nbagent.models.function import FunctionModel
from nbagent.store.sqlite import SQLiteStore


def test_gauge_text_fraction_and_parts() -> None:
    usage = ContextUsage(48_640, 128_000, scale_parts({"system": 1, "tools": 1, "history": 2,
                                                      "tool_results": 3, "latest": 1}, 48_640), step=3, threshold=0.8)
    assert str(usage) == "context 38 % of 128k"
    assert usage.fraction == pytest.approx(0.38)
    assert sum(usage.by_part.values()) == 48_640 and list(usage.by_part) == list(PARTS)
    assert not usage.over_threshold
    assert ContextUsage(110_000, 128_000, threshold=0.8).over_threshold
    assert str(ContextUsage(1_234, None, estimated=True)) == "context ~1.23k tokens"
    assert "tool results: " in usage.describe()


def test_scale_parts_adds_up_exactly() -> None:
    for total in (0, 1, 7, 999, 123_457):
        assert sum(scale_parts({"system": 3, "tools": 5, "history": 7, "tool_results": 11, "latest": 13},
                               total).values()) == total
    assert scale_parts({}, 10)["latest"] == 10


def test_cut_result_keeps_head_and_tail_and_says_how_to_read_the_rest() -> None:
    text = "".join(f"{i:05d}\n" for i in range(5000))  # 30,000 characters
    cut = cut_result(text, 1000, "call_1")
    assert cut is not None and len(cut) < 1400
    assert cut.startswith(text[:700]) and cut.endswith(text[-300:])
    assert "29,000 of 30,000 characters not shown" in cut
    assert 'read_result(call_id="call_1", offset=700' in cut
    assert cut_result("short", 1000, "c") is None


def test_compaction_is_checked() -> None:
    for bad in ({"at": 0}, {"at": 1.5}, {"at": True}, {"keep_last": -1}, {"policy": "forget"}, {"summary_words": 0}):
        with pytest.raises(UserError):
            Compaction(**bad)  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"compaction must be an nbagent\.Compaction"):
        Agent("test", compaction=0.8)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="max_result_fraction"):
        Agent("test", max_result_fraction=2)


def rows_tool():
    @tool
    def get_rows(n: int) -> str:
        """Rows of the table.

        Args:
            n: how many rows.
        """
        return "\n".join(f"row {i}: " + "x" * 60 for i in range(n))

    return get_rows


def calling(name: str, **args):
    """A fake model's function: call `name` once per user message, then answer."""

    def answer(messages, request):
        if not request.tools:  # a compaction summary request
            return f"SUMMARY of {len(messages)} messages"
        last = messages[-1]
        if last.kind == "user":
            return ToolCall.of(name, args)
        return f"done: {last.content[:20]}"

    return answer


def test_result_context_after_a_run() -> None:
    model = FunctionModel(calling("get_rows", n=3), context_window=10_000)
    agent = Agent(model, tools=[rows_tool()], system="Be brief.", store="memory")
    result = agent.run_sync("three rows please")
    context = result.context
    assert isinstance(context, ContextUsage) and context.window == 10_000
    assert context.tokens == result.usage.calls[-1].input_tokens  # the provider's count of the last request
    assert sum(context.by_part.values()) == context.tokens and not context.estimated
    assert context.by_part["tool_results"] > 0 and context.by_part["system"] > 0
    assert context.fraction == pytest.approx(context.tokens / 10_000)
    assert str(context).startswith("context ") and context.step == 2


def test_long_result_is_cut_to_the_window_kept_whole_and_readable() -> None:
    reads = []

    def answer(messages, request):
        last = messages[-1]
        names = [d["name"] for d in request.tools]
        if last.kind == "user":
            assert "read_result" not in names  # offered only once a result was cut
            return ToolCall.of("get_rows", {"n": 400})
        if last.name == "get_rows":
            assert "read_result" in names
            assert "not shown" in last.content and len(last.content) < 2_000
            return ToolCall.of("read_result", {"call_id": last.call_id, "offset": 1_000, "limit": 300})
        reads.append(last.content)
        return "read it"

    agent = Agent(FunctionModel(answer, context_window=4_000), tools=[rows_tool()], store="memory")
    result = agent.run_sync("rows")  # cap: 10 % of 4,000 tokens = 1,600 characters
    assert result.status == "completed", result.error
    stored = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    whole = "\n".join(f"row {i}: " + "x" * 60 for i in range(400))
    assert stored[0].full_content == whole and stored[0].whole_text == whole
    assert reads[0].startswith("[characters 1,000 to 1,300 of ") and reads[0].endswith(whole[1000:1300])
    assert stored[1].full_content is None  # read_result's own answer is never cut again
    # the whole result survives the store
    loaded = asyncio.run(agent.store.load(result.thread))
    assert next(m for m in loaded.messages if isinstance(m, ToolResultMessage)).full_content == whole


def test_tool_max_result_tokens_and_no_cap() -> None:
    @tool(max_result_tokens=50)
    def small(n: int) -> str:
        """Text."""
        return "y" * 1_000

    seen = {}

    def answer(messages, request):
        if messages[-1].kind == "user":
            return ToolCall.of("small", {"n": 1})
        seen["content"] = messages[-1].content
        return "ok"

    Agent(FunctionModel(answer), tools=[small], store="memory").run_sync("go")  # no window: the tool's own cap
    assert len(seen["content"]) < 600 and "not shown" in seen["content"]
    Agent(FunctionModel(calling("get_rows", n=400), context_window=4_000), tools=[rows_tool()],
          max_result_fraction=None, store="memory").run_sync("rows")
    with pytest.raises(UserError, match="max_result_tokens"):
        tool(max_result_tokens=0)(rows_tool().function)  # type: ignore[arg-type]


def session(model: FunctionModel, turns: int, **agent_options) -> list:
    agent = Agent(model, tools=[rows_tool()], store=agent_options.pop("store", "memory"), **agent_options)
    events: list = []
    thread = None
    for turn in range(turns):
        result = agent.run_sync(f"turn {turn}: give me 20 rows", thread=thread)
        assert result.status == "completed", result.error
        thread = result.thread
        events.append(result)
    return events


def test_summary_compaction_keeps_requests_small_and_the_thread_whole() -> None:
    model = FunctionModel(calling("get_rows", n=20), context_window=3_000)
    results = session(model, 30, compaction=Compaction(at=0.6, keep_last=4))
    messages = results[-1].messages
    records = [m for m in messages if isinstance(m, CompactionMessage)]
    assert records, "no compaction happened"
    assert sum(1 for m in messages if isinstance(m, UserMessage)) == 30  # every message kept
    sizes = [r.usage.calls[-1].input_tokens for r in results]
    assert max(sizes[10:]) <= 1.5 * max(sizes[:10]) + 200  # flat, not growing
    summaries = [r for r in model.requests if not r.tools]
    assert len(summaries) == len(records)
    for request in model.requests:
        if request.tools:  # every call of a sent request has its result
            calls = {c.id for m in request.messages if m.kind == "assistant" for c in m.tool_calls}
            results_ = {m.call_id for m in request.messages if m.kind == "tool-result"}
            assert calls == results_
    last = model.requests[-1]
    assert "SUMMARY of" in last.messages[0].content  # the summary rides with the system prompt
    assert last.messages[1].kind == "user"
    purposes = [row.purpose for r in results for row in r.usage.calls]
    assert purposes.count("compaction") == len(records)
    assert records[0].replaced > 0 and records[0].saved > 0 and records[0].trigger == "threshold"
    assert "compacted" in records[0].describe() and "saved" in records[0].describe()


def test_native_compaction_asks_a_model_that_can_and_leaves_the_rest_to_nbagent() -> None:
    """``Compaction.native()``: a model that can ask its provider (``native_context``) gets the
    request's ``context_management`` and nbagent leaves the threshold to the provider; an agent
    whose model can do neither that nor ``compact`` is refused with a clear error."""
    from nbagent.context import NativeContext

    assert Compaction.native(at=0.5, keep_last=4).native_request(8_000) == NativeContext(4_000, 2)
    assert Compaction.native(keep_last=0).native_request(None) == NativeContext(None, 1)
    assert Compaction().native_request(8_000) is None
    plain = FunctionModel(calling("get_rows", n=20), context_window=3_000)
    with pytest.raises(UserError, match=r"Compaction.native\(\) needs a model whose provider"):
        Agent(plain, compaction=Compaction.native(at=0.6, keep_last=4))

    class Managing(FunctionModel):
        native_context = True

    managed = Managing(calling("get_rows", n=20), context_window=3_000)
    results = session(managed, 20, compaction=Compaction.native(at=0.6, keep_last=4))
    assert not any(isinstance(m, CompactionMessage) for m in results[-1].messages)  # left to the provider
    assert {r.context_management for r in managed.requests} == {NativeContext(1_800, 2)}


def test_anthropic_requests_ask_for_tool_result_clearing_behind_its_beta() -> None:
    from nbagent.context import NativeContext
    from nbagent.models import AnthropicModel
    from nbagent.models.base import ModelRequest

    model = AnthropicModel("claude-haiku-4-5", api_key="sk-test", settings={"extra_headers": {"Anthropic-Beta": "x-1"},
                                                                            "extra_body": {"y": 1}})
    assert model.native_context
    params = model.request_params(ModelRequest([UserMessage("hi")], context_management=NativeContext(160_000, 3)),
                                  stream=True)
    assert params["extra_headers"] == {"anthropic-beta": "x-1,context-management-2025-06-27"}
    assert params["extra_body"] == {"y": 1, "context_management": {"edits": [{
        "type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 3},
        "trigger": {"type": "input_tokens", "value": 160_000}}]}}
    plain = model.request_params(ModelRequest([UserMessage("hi")]), stream=False)
    assert "context_management" not in plain["extra_body"] and plain["extra_headers"] == {"Anthropic-Beta": "x-1"}


async def test_compaction_event_and_usage_row_in_the_stream() -> None:
    model = FunctionModel(calling("get_rows", n=20), context_window=800)
    agent = Agent(model, tools=[rows_tool()], store="memory", compaction=Compaction(at=0.5, keep_last=2))
    thread = None
    seen = []
    for turn in range(10):
        async for event in agent.stream(f"turn {turn}", thread=thread):
            seen.append(event)
            if event.kind == "run-started":
                thread = event.thread
    compactions = [e for e in seen if isinstance(e, CompactionEvent)]
    assert compactions and compactions[0].usage is not None and compactions[0].usage.purpose == "compaction"
    at = seen.index(compactions[0])
    assert seen[at + 1].kind == "usage" and seen[at + 1].call.purpose == "compaction"
    gauges = [e.context for e in seen if e.kind == "usage" and e.context is not None]
    assert gauges and all(g.window == 800 for g in gauges)
    assert seen[-1].result.context == gauges[-1]


def test_clear_results_policy_makes_no_model_call() -> None:
    model = FunctionModel(calling("get_rows", n=20), context_window=3_000)
    results = session(model, 20, compaction=Compaction.clear_results(at=0.6, keep_last=4))
    records = [m for m in results[-1].messages if isinstance(m, CompactionMessage)]
    assert records and all(r.policy == "clear_results" and r.cleared for r in records)
    assert all(r.tools for r in model.requests)  # no summary call
    stubs = [m for m in model.requests[-1].messages
             if m.kind == "tool-result" and "cleared to save context" in m.content]
    assert stubs and all(s.full_content for s in stubs)
    assert "read_result" in [d["name"] for d in model.requests[-1].tools]


def overflowing(window: int):
    """A fake that refuses a request over `window` (its own word count) as OpenAI does."""

    def answer(messages, request):
        size = sum(len(str(getattr(m, "content", "") or getattr(m, "text", "") or "").split()) for m in messages)
        if size > window:
            raise ContextOverflowError(f"maximum context length is {window} tokens", status_code=400,
                                       provider="function", tokens=size, limit=window)
        return calling("get_rows", n=20)(messages, request)

    return answer


def test_overflow_without_compaction_fails_and_names_the_fix() -> None:
    agent = Agent(FunctionModel(overflowing(600)), tools=[rows_tool()], store="memory")
    thread = None
    for turn in range(40):
        result = agent.run_sync(f"turn {turn}", thread=thread)
        thread = result.thread
        if result.status != "completed":
            break
    assert result.status == "failed"
    assert "Agent(compaction=Compaction(...))" in (result.error or "")
    assert isinstance(result.exception, ContextOverflowError)


def test_overflow_with_compaction_compacts_once_and_retries() -> None:
    # The window is unknown to nbagent: only the refusal can trigger the compaction.
    model = FunctionModel(overflowing(600))
    results = session(model, 40, compaction=Compaction(keep_last=4))
    records = [m for m in results[-1].messages if isinstance(m, CompactionMessage)]
    assert records and {r.trigger for r in records} == {"overflow"}


def test_failed_summary_at_the_threshold_sends_the_request_whole() -> None:
    def answer(messages, request):
        if not request.tools:
            raise ServerError("summarizer down", status_code=500, provider="function", retryable=False)
        return calling("get_rows", n=20)(messages, request)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session(FunctionModel(answer, context_window=1_200), 12, compaction=Compaction(at=0.5, keep_last=4))
    assert any("could not be compacted" in str(w.message) for w in caught)


@pytest.mark.parametrize("empty", ["", " \n\t ", "tool-call"])
def test_an_empty_summary_is_a_failed_compaction_not_a_record(empty: str) -> None:
    """A summarizer that answers with no text (empty, blank, only a tool call) fails the
    compaction like a raising one: a warning, the turns sent whole, its billed row kept, and the
    next threshold tries again (here the third summary call writes one)."""
    summaries = []

    def answer(messages, request):
        if not request.tools:
            summaries.append(len(summaries))
            if len(summaries) < 3:
                return ToolCall.of("get_rows", {"n": 1}) if empty == "tool-call" else empty
        return calling("get_rows", n=20)(messages, request)

    model = FunctionModel(answer, context_window=1_200)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = session(model, 12, compaction=Compaction(at=0.5, keep_last=4))
    failed = [str(w.message) for w in caught if "could not be compacted" in str(w.message)]
    assert len(failed) == 2 and all("wrote no summary" in text for text in failed), failed
    records = [m for r in results for m in r.messages if isinstance(m, CompactionMessage)]
    assert records and all(r.content.startswith("SUMMARY of") for r in records)
    assert not any("wrote nothing" in json.dumps([m.to_dict() for m in r.messages]) for r in model.requests)
    rows = [row for r in results for row in r.usage.calls if row.purpose == "compaction"]
    assert len(rows) == len(summaries) >= 3  # a billed call is a row, the empty ones too
    first_summary = next(i for i, r in enumerate(model.requests) if not r.tools)
    sent = model.requests[first_summary + 1]  # the request the failed compaction left whole
    assert sent.tools and next(m.content for m in sent.messages if m.kind == "user") == "turn 0: give me 20 rows"


def test_a_refused_summary_keeps_its_billed_row() -> None:
    """A summary answer the provider stopped (billed, with its error) fails the compaction with
    that error, and its usage row is kept, as the loop keeps a refused answer's row."""
    from nbagent.exceptions import ContentFilterError
    from nbagent.messages import AssistantMessage
    from nbagent.models.base import ModelResponse
    from nbagent.usage import TokenCounts

    def answer(messages, request):
        if not request.tools:
            return ModelResponse(AssistantMessage(text="", finish_reason="content_filter"),
                                 TokenCounts(input_tokens=900, output_tokens=0),
                                 error=ContentFilterError("stopped by the filter", provider="function"))
        return calling("get_rows", n=20)(messages, request)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = session(FunctionModel(answer, context_window=1_200), 8, compaction=Compaction(at=0.5, keep_last=4))
    assert any("ContentFilterError: stopped by the filter" in str(w.message) for w in caught)
    rows = [row for r in results for row in r.usage.calls if row.purpose == "compaction"]
    assert rows and all(row.input_tokens == 900 for row in rows)
    assert not any(isinstance(m, CompactionMessage) for m in results[-1].messages)


def test_visible_applies_records() -> None:
    messages = [UserMessage("a"), UserMessage("b"), CompactionMessage("S", upto=1), UserMessage("c")]
    view = visible(messages)
    assert view.summary == "S" and [m.content for m in view.messages] == ["b", "c"]
    assert visible(messages[:2]).messages is not None


def test_a_native_record_sends_the_providers_items_in_place_of_the_messages_and_is_stored_whole() -> None:
    from nbagent.messages import AssistantMessage, message_from_dict

    items = [{"type": "message", "role": "user", "id": "msg_1", "content": [{"type": "input_text", "text": "a"}]},
             {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-opaque"}]
    record = CompactionMessage("", "native", upto=2, replaced=2, items=items)
    messages = [UserMessage("a"), AssistantMessage(text="A"), UserMessage("b"), record, AssistantMessage(text="B")]
    view = visible(messages)
    assert view.summary is None and view.upto == 2
    first, *rest = view.messages
    assert isinstance(first, AssistantMessage) and first.thinking_blocks == items and first.text is None
    assert [m.content if m.kind == "user" else m.text for m in rest] == ["b", "B"]  # no anchor: the items hold it
    again = message_from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record and again.items == items
    assert "items" not in CompactionMessage("S", upto=1).to_dict()  # other records are stored as before


async def test_a_resumed_thread_sends_what_the_first_process_would_have(tmp_path) -> None:
    path = tmp_path / "t.db"
    model = FunctionModel(calling("get_rows", n=20), context_window=3_000)
    options = {"compaction": Compaction(at=0.6, keep_last=4)}
    agent = Agent(model, tools=[rows_tool()], store=SQLiteStore(path), **options)
    thread = None
    for turn in range(15):
        thread = (await agent.run(f"turn {turn}", thread=thread)).thread
    before = model.requests[-1]
    # another process: the same store, a new agent
    model2 = FunctionModel(calling("get_rows", n=20), context_window=3_000)
    agent2 = Agent(model2, tools=[rows_tool()], store=SQLiteStore(path), **options)
    await agent2.run("turn 15", thread=thread)
    first = model2.requests[0]
    assert first.messages[0].content == before.messages[0].content  # the same summary, from the store
    assert [json.dumps(m.to_dict()) for m in first.messages[1:len(before.messages)]][:3] == \
        [json.dumps(m.to_dict()) for m in before.messages[1:]][:3]


def test_a_new_run_on_the_thread_sizes_its_first_request_from_the_last_one(tmp_path) -> None:
    """Each chat turn is a run of its own: its first request starts from the thread's last
    measured one (stored with its usage row), so a provider that counts far more tokens than the
    rule (numbers, a small tokenizer) still triggers compaction before the window overflows."""
    from nbagent.models.base import ModelResponse
    from nbagent.models.function import to_response

    def dense(messages, request):  # reports 10x the fake's word count, as a digit-splitting tokenizer might
        text = "SUMMARY of the rows" if not request.tools else "noted"
        response = to_response(text, request, "dense")
        usage = dataclasses.replace(response.usage, input_tokens=response.usage.input_tokens * 10)
        return ModelResponse(response.message, usage, model="dense")

    def agent_on(path):
        return Agent(FunctionModel(dense, context_window=8_000), tools=[rows_tool()], store=SQLiteStore(path),
                     compaction=Compaction(at=0.6, keep_last=2))

    rows = " ".join(f"{i} {i * 7} {i * 13}" for i in range(20))  # 60 words: 600 "tokens"
    thread = None
    for turn in range(16):  # one model call a run, a new agent object each turn: the base comes from the store
        result = agent_on(tmp_path / "t.db").run_sync(f"turn {turn}: {rows}", thread=thread)
        assert result.status == "completed", result.error
        thread = result.thread
    stored = asyncio.run(SQLiteStore(tmp_path / "t.db").load(thread)).usage
    assert any(r.purpose == "compaction" for r in stored)
    sent = [r.input_tokens for r in stored if r.purpose == "run"]
    assert max(sent) < 8_000, sent


def test_every_kind_of_result_is_cut_to_the_window_and_kept_whole() -> None:
    """str, JSON, a DataFrame's text, an MCP tool's content and the text beside an image: each is
    cut to the window's cap for the model, and kept whole in the store."""
    import base64
    from types import SimpleNamespace as NS

    import pandas as pd

    from nbagent.images import Image
    from nbagent.mcp._adapt import result_value
    from tests.mcp_servers.kitchen import PNG

    words = " ".join(f"word{i}" for i in range(3_000))
    mcp = result_value(NS(content=[NS(type="text", text=words),
                                   NS(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")],
                          structured_content=None, is_error=False), [])
    values = {
        "text": words,
        "json": {"rows": [{"id": i, "city": f"city{i}"} for i in range(400)]},
        "frame": pd.DataFrame({"city": [f"a long city name {i}" for i in range(60)], "note": ["x" * 80] * 60}),
        "mcp": mcp,
        "image_and_text": [words, Image(PNG, "image/png")],
    }

    @tool
    def fetch(kind: str) -> object:
        """A result of a kind."""
        return values[kind]

    def answer(messages, request):
        done = [m for m in messages if m.kind == "tool-result"]
        if len(done) < len(values):
            return ToolCall.of("fetch", {"kind": list(values)[len(done)]})
        return "seen"

    agent = Agent(FunctionModel(answer, context_window=2_000), tools=[fetch], store="memory")
    result = agent.run_sync("fetch them all")  # cap: 10 % of 2,000 tokens
    assert result.status == "completed", result.error
    stored = {m.call_id: m for m in asyncio.run(agent.store.load(result.thread)).messages
              if isinstance(m, ToolResultMessage)}
    assert len(stored) == len(values)
    for m in stored.values():
        assert m.full_content is not None, m.content[:80]
        assert "not shown" in m.content and len(m.content) < len(m.full_content) // 2
        assert m.content.startswith(m.full_content[:100]) and m.content.endswith(m.full_content[-100:])
    kinds = dict(zip(values, stored.values(), strict=True))
    assert json.loads(kinds["json"].full_content)["rows"][399]["city"] == "city399"
    assert "a long city name 0" in kinds["frame"].full_content
    assert [len(kinds[k].images) for k in ("mcp", "image_and_text")] == [1, 1]  # images are not cut away


async def test_the_static_render_and_the_view_show_a_cut_result_whole() -> None:
    from nbagent.display.html import render_result_html

    model = FunctionModel(calling("get_rows", n=400), context_window=4_000)
    agent = Agent(model, tools=[rows_tool()], store="memory")
    result = await agent.run("rows", thread="t-cut")
    cut = next(m for m in result.messages if isinstance(m, ToolResultMessage))
    assert cut.full_content is not None and "row 200: " not in cut.content  # the model read a cut
    assert "row 200: " in render_result_html(result)
    live = agent.chat(thread="t-live")
    live.message_box.value = "rows"
    live.buttons["Send"].click()
    for _ in range(10):
        await asyncio.sleep(0)
    await live.wait()
    assert "row 200: " in widget_text(live)
    stored = agent.chat(thread="t-cut")
    await stored.wait_loaded()
    assert "row 200: " in stored.history.value


def widget_text(root) -> str:
    """Every string value of a widget and its children, as the front end gets them."""
    out, todo = [], [root]
    while todo:
        w = todo.pop()
        if isinstance(getattr(w, "value", None), str):
            out.append(w.value)
        todo.extend(getattr(w, "children", ()) or ())
    return "\n".join(out)


def test_the_gauge_counts_each_message_and_the_tool_definitions_once_per_run(monkeypatch) -> None:
    """The estimate of each request reuses what earlier requests of the run counted (the gauge's
    cost stays flat as the thread grows), and gives the same parts as counting afresh."""
    from nbagent._run import window
    from nbagent.context import request_parts

    counted: list[object] = []
    tools_counted: list[object] = []
    real_message, real_tools = window.message_tokens, window.tools_tokens
    monkeypatch.setattr(window, "message_tokens", lambda m, count: counted.append(m) or real_message(m, count))
    monkeypatch.setattr(window, "tools_tokens", lambda t, *a: tools_counted.append(t) or real_tools(t, *a))

    def answer(messages, request):
        results = sum(m.kind == "tool-result" for m in messages)
        return ToolCall.of("get_rows", {"n": 3}) if results < 5 else "done"

    model = FunctionModel(answer, context_window=100_000)
    result = Agent(model, tools=[rows_tool()], system="Be brief.", store="memory").run_sync("rows")
    assert result.status == "completed" and len(model.requests) == 6
    sent = result.messages[:-1]  # the final answer is in no request
    assert len(counted) == len({id(m) for m in counted}) == len(sent)  # each message once, not once a request
    assert len(tools_counted) == 1
    last = model.requests[-1]
    stored = json.loads(result.usage.calls[-1].context)
    assert stored["estimate"] == sum(request_parts("Be brief.", None, last.messages[1:], last.tools).values())


async def test_a_call_waiting_for_approval_is_never_compacted_away() -> None:
    """A long thread over the threshold pauses on a call that needs approval: no compaction runs
    while it waits, and after the approval the call, its result and the latest user message are
    all sent (a compaction, if any, only replaces what came before)."""

    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        return f"refunded order {order}"

    def answer(messages, request):
        if not request.tools:
            return "SUMMARY of the earlier turns"
        last = messages[-1]
        if last.kind == "user":
            if "refund" in last.content:
                return ToolCall.of("refund", {"order": 7})
            return ToolCall.of("get_rows", {"n": 20})
        return f"done: {last.content[:20]}"

    model = FunctionModel(answer, context_window=1_000)
    agent = Agent(model, tools=[rows_tool(), refund], store="memory", compaction=Compaction(at=0.6, keep_last=2))
    thread = None
    for turn in range(12):
        thread = (await agent.run(f"turn {turn}: give me 20 rows", thread=thread)).thread
    paused = await agent.run("now refund order 7", thread=thread)
    assert paused.status == "paused" and [p.name for p in paused.pending] == ["refund"]
    records = sum(m.kind == "compaction" for m in paused.messages)
    asked = len(model.requests)
    done = await agent.resume(paused, approve=paused.pending)
    assert done.status == "completed", done.error
    last = [r for r in model.requests[asked:] if r.tools][-1]  # the request after the approval
    kinds = [m.kind for m in last.messages]
    assert kinds[-3:] == ["user", "assistant", "tool-result"], kinds  # the turn whole, in order
    user, call, result = last.messages[-3:]
    assert user.content == "now refund order 7" and call.tool_calls[0].name == "refund"
    assert result.call_id == call.tool_calls[0].id and result.content == "refunded order 7"
    assert records >= 1 and sum(m.kind == "compaction" for m in done.messages) >= records


def test_a_request_is_what_was_sent_not_the_thread_as_it_grows_after() -> None:
    """Without a system prompt or compaction, a request's messages are a copy: a function model
    (or a test reading ``model.requests``) sees what was sent, and cannot change the thread."""
    seen = []

    def answer(messages, request):
        seen.append(len(messages))
        messages.append(UserMessage("a model function's own scratch"))  # must not reach the thread
        return ToolCall.of("get_rows", {"n": 1}) if seen == [1] else "done"

    model = FunctionModel(answer)
    result = Agent(model, tools=[rows_tool()], store="memory").run_sync("rows")
    assert result.status == "completed" and seen == [1, 3]
    assert [len(r.messages) for r in model.requests] == [2, 4]  # with the scratch each function added
    assert [m.kind for m in result.messages] == ["user", "assistant", "tool-result", "assistant"]


def test_read_result_pages_follow_the_model_window_as_each_run_finds_it() -> None:
    """An agent's runs share the config that offers ``read_result`` while the model's window stays
    the same; once the window is known (the bundled local model learns it when its server starts)
    the next run's pages are cut to its share of it."""
    whole = "x" * 5_000

    @tool
    def dump() -> str:
        """All the rows."""
        return whole

    def answer(messages: list[object], request: object) -> object:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return ToolCall.of("dump", {})
        assert isinstance(last, ToolResultMessage)
        if last.name == "dump":
            return ToolCall.of("read_result", {"call_id": last.call_id, "limit": 100_000})
        return str(last.content.count("x"))

    model = FunctionModel(answer)
    agent = Agent(model, tools=[dump], store="memory")
    assert [agent.run_sync("rows").output for _ in range(2)] == ["5000", "5000"]  # window unknown: 20,000 a page
    model.context_window = 1_000  # 10 % of it: 100 tokens, 400 characters
    assert agent.run_sync("rows").output == "400"
    model.context_window = None
    assert agent.run_sync("rows").output == "5000"
