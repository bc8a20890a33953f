"""Guards (`nbagent.guards`): the prompt, a call's arguments, a tool's result and an answer are
checked before anything happens to them, and a guard that fails counts as a block.

What a user notices: a blocked prompt reaches no model, runs no tool and costs nothing, and is
never sent again (a restart included); a parallel guard that trips cancels the first call and
runs no tool of its answer, and the tokens already spent stay counted; a held answer shows no
text until its output guards pass, and a blocked one never does; every check is in
``result.guard_checks``. The peers' regressions have tests named after them (openai-agents #889,
#991, PR #2688, #4068; aisix #204). The models are `ScriptedModel` / `FunctionModel`; tool guards
on MCP tools, the python tool and agents as tools: tests/test_guards_tools.py; `pii()`:
tests/test_guards_pii.py.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, NotResumableError, tool
from nbagent.guards import Guard, GuardContext, Judgement, block, retry, rewrite
from nbagent.messages import AssistantMessage, ToolCall, UserMessage
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import MemoryStore, SQLiteStore

SENT: list[str] = []


@tool
async def send_email(to: list[str], body: str) -> str:
    """Send an email.

    Args:
        to: the recipients.
        body: the text.
    """
    SENT.append(body)
    return f"sent to {len(to)}"


@tool
async def lookup(customer: str) -> str:
    """A customer's record."""
    return f"{customer}: Jane Doe, jane@example.com, card 4111 1111 1111 1111"


@pytest.fixture(autouse=True)
def _clear_sent() -> None:
    SENT.clear()


def no_ids(text: str, ctx: GuardContext) -> Any:
    return block("a customer id") if "C-" in text else None


async def no_ids_async(text: str, ctx: GuardContext) -> Any:
    await asyncio.sleep(0)
    return block("a customer id") if "C-" in text else None


def sent_texts(model: FunctionModel) -> list[list[str]]:
    """What each request sent: the text of every message."""
    return [[getattr(m, "content", None) or getattr(m, "text", None) or "" for m in r.messages] for r in model.requests]


# ---------------------------------------------------------------------- input
@pytest.mark.parametrize("check", [no_ids, no_ids_async], ids=["sync", "async"])
async def test_openai_agents_889_991_a_blocked_prompt_reaches_no_model_and_runs_no_tool(check: Any) -> None:
    model = ScriptedModel([tool_call("send_email", to=["a@x.org"], body="hi"), "done"])
    agent = Agent(model, tools=[send_email], guards=[Guard.input(check, name="ids")], store=MemoryStore())
    result = await agent.run("refund C-1234 and email them")
    assert (result.status, result.stop_reason, result.output) == ("stopped", "guard", None)
    assert model.requests == [] and SENT == []
    assert result.usage.requests == 0 and result.usage.total_tokens == 0
    trip = result.guard_trip
    assert trip is not None and (trip.guard, trip.stage, trip.verdict, trip.reason) == ("ids", "input", "block",
                                                                                       "a customer id")
    [prompt] = result.messages
    assert prompt.content == "refund C-1234 and email them" and prompt.blocked == "ids: a customer id"  # type: ignore[union-attr]


async def test_a_blocked_prompt_is_never_sent_in_a_later_turn() -> None:
    model = ScriptedModel(["hello"])
    agent = Agent(model, guards=[Guard.input(no_ids)], store=MemoryStore())
    first = await agent.run("my id is C-99", thread="t")
    second = await agent.run("hi", thread="t")
    assert second.status == "completed"
    assert sent_texts(model) == [["hi"]]
    assert [m.kind for m in second.messages] == ["user", "user", "assistant"]
    assert first.messages[0].blocked  # type: ignore[union-attr]


async def test_restart_between_a_trip_and_the_next_turn(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    blocked = Agent(ScriptedModel([]), guards=[Guard.input(no_ids, name="ids")], store=SQLiteStore(path))
    result = await blocked.run("account C-7 please", thread="t")
    assert result.status == "stopped"
    # A new process: the store read from the file, an agent with no guards at all.
    model = ScriptedModel(["fine"])
    later = Agent(model, store=SQLiteStore(path))
    again = await later.run("what can you do?", thread="t")
    assert again.status == "completed" and sent_texts(model) == [["what can you do?"]]
    stored = await SQLiteStore(path).load("t")
    assert stored is not None and stored.messages[0].blocked == "ids: a customer id"  # type: ignore[union-attr]
    assert stored.meta.status == "completed"


async def test_a_blocked_turn_cannot_be_resumed() -> None:
    agent = Agent(ScriptedModel([]), guards=[Guard.input(no_ids)], store=MemoryStore())
    stopped = await agent.run("C-2", thread="u")
    with pytest.raises(NotResumableError, match="stopped by a guard"):
        await agent.resume(thread=stopped.thread)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_an_input_rewrite_is_what_the_model_reads_and_the_store_keeps(asynchronous: bool) -> None:
    def mask(text: str) -> Any:
        return rewrite(text.replace("C-1234", "[customer]"), "masked an id")

    async def mask_async(text: str) -> Any:
        return mask(text)

    store = MemoryStore()
    model = ScriptedModel(["ok"])
    agent = Agent(model, guards=[Guard.input(mask_async if asynchronous else mask)], store=store)
    result = await agent.run("refund C-1234", thread="t")
    assert result.status == "completed"
    assert sent_texts(model) == [["refund [customer]"]]
    stored = await store.load("t")
    assert stored is not None and stored.messages[0].content == "refund [customer]"  # type: ignore[union-attr]
    assert [(c.verdict, c.reason) for c in result.guard_checks] == [("rewrite", "masked an id")]


async def test_input_guards_run_in_order_and_a_rewrite_feeds_the_next() -> None:
    seen: list[str] = []

    def first(text: str) -> Any:
        seen.append(text)
        return rewrite(text.upper())

    def second(text: str) -> Any:
        seen.append(text)
        return None

    model = ScriptedModel(["ok"])
    result = await Agent(model, guards=[Guard.input(first), Guard.input(second)], store=MemoryStore()).run("abc")
    assert seen == ["abc", "ABC"] and sent_texts(model) == [["ABC"]]
    assert [c.guard for c in result.guard_checks] == ["first", "second"]


async def test_a_caller_s_user_message_is_not_changed_by_a_rewrite() -> None:
    mine = UserMessage("secret C-1")
    agent = Agent(ScriptedModel(["ok"]), guards=[Guard.input(lambda t: rewrite("masked"))], store=MemoryStore())
    await agent.run(mine)
    assert mine.content == "secret C-1"


# ---------------------------------------------------------------------- fail closed
async def test_a_raising_guard_blocks_and_names_the_error() -> None:
    def broken(text: str) -> Any:
        raise KeyError("lookup table")

    model = ScriptedModel(["never"])
    result = await Agent(model, guards=[Guard.input(broken)], store=MemoryStore()).run("hi")
    assert result.status == "stopped" and model.requests == []
    assert result.guard_trip is not None
    assert result.guard_trip.reason == "the check failed (blocked): KeyError: 'lookup table'"


async def test_a_hanging_guard_blocks_at_its_timeout() -> None:
    async def hangs(text: str) -> Any:
        await asyncio.sleep(60)

    model = ScriptedModel(["never"])
    agent = Agent(model, guards=[Guard.input(hangs, timeout_s=0.05)], store=MemoryStore())
    result = await asyncio.wait_for(agent.run("hi"), 5)
    assert result.status == "stopped" and model.requests == []
    assert result.guard_trip is not None and "timeout_s of 0.05 s" in result.guard_trip.reason
    assert 0.04 < result.guard_trip.latency_s < 2


async def test_a_slow_sync_guard_counts_as_a_block_too() -> None:
    def slow(text: str) -> Any:
        import time

        time.sleep(0.06)

    result = await Agent(ScriptedModel(["x"]), guards=[Guard.input(slow, timeout_s=0.01)],
                         store=MemoryStore()).run("hi")
    assert result.status == "stopped" and "timeout_s" in result.guard_trip.reason  # type: ignore[union-attr]


async def test_a_guard_returning_something_else_blocks() -> None:
    result = await Agent(ScriptedModel(["x"]), guards=[Guard.input(lambda t: True)], store=MemoryStore()).run("hi")
    assert result.status == "stopped"
    assert "returned bool, not None or a verdict" in result.guard_trip.reason  # type: ignore[union-attr]


async def test_retry_is_for_output_guards_only() -> None:
    result = await Agent(ScriptedModel(["x"]), guards=[Guard.input(lambda t: retry("again"))],
                         store=MemoryStore()).run("hi")
    assert result.status == "stopped" and "retry is for output guards only" in result.guard_trip.reason  # type: ignore[union-attr]


def test_bad_guards_fail_when_the_agent_is_made() -> None:
    with pytest.raises(Exception, match="only an input guard can be parallel"):
        Guard(no_ids, "output", parallel=True)
    with pytest.raises(Exception, match="timeout_s"):
        Guard.input(no_ids, timeout_s=0)
    with pytest.raises(Exception, match="list of tool names"):
        Guard.tool_args(no_ids, tools="send_email")
    with pytest.raises(Exception, match="guards= takes"):
        Agent(ScriptedModel([]), guards=[no_ids])  # type: ignore[list-item]


# ---------------------------------------------------------------------- parallel input
def slow_block(seconds: float, reason: str = "off topic") -> Any:
    async def judge(text: str) -> Any:
        await asyncio.sleep(seconds)
        return block(reason)

    return judge


def slow_allow(seconds: float) -> Any:
    async def judge(text: str) -> Any:
        await asyncio.sleep(seconds)

    return judge


async def test_openai_agents_991_parallel_trip_after_the_answer_runs_no_tool_of_it() -> None:
    store = MemoryStore()
    model = ScriptedModel([tool_call("send_email", to=["all@x.org"], body="mass"), "done"])
    agent = Agent(model, tools=[send_email], guards=[Guard.input(slow_block(0.1), name="topic", parallel=True)],
                  store=store)
    result = await agent.run("spam everyone", thread="t")
    assert result.status == "stopped" and result.stop_reason == "guard" and SENT == []
    assert len(model.requests) == 1  # the call it raced was made (and answered) ...
    [row] = result.usage.calls
    assert row.usage_reported and row.tool_calls == 1  # ... and its real usage is kept
    stored = await store.load("t")
    assert stored is not None
    assert [m.kind for m in stored.messages] == ["user"]  # the answer is not kept
    assert stored.messages[0].blocked == "topic: off topic"  # type: ignore[union-attr]
    assert [r.purpose for r in stored.usage] == ["run"]


async def test_parallel_guards_that_allow_cost_no_wait_after_the_call() -> None:
    model = ScriptedModel([tool_call("send_email", to=["a@x.org"], body="one"), "done"])
    agent = Agent(model, tools=[send_email], guards=[Guard.input(slow_allow(0.05), parallel=True)],
                  store=MemoryStore())
    result = await agent.run("email a")
    assert result.status == "completed" and SENT == ["one"]
    assert [(c.stage, c.verdict) for c in result.guard_checks] == [("input", "allow")]


def slow_stream(deltas: int, pause: float, record: dict[str, Any]) -> Any:
    async def stream(messages: list[Any], info: Any) -> AsyncIterator[Any]:
        record["started"] = True
        try:
            for i in range(deltas):
                await asyncio.sleep(pause)
                record["sent"] = i + 1
                yield f"word{i} "
            yield tool_call("send_email", to=["all@x.org"], body="from the stream")
        except BaseException as exc:
            record["stopped_by"] = type(exc).__name__
            raise
        finally:
            record["closed"] = True

    return stream


async def test_openai_agents_pr_2688_a_parallel_trip_cancels_the_streaming_call_and_runs_no_tool() -> None:
    record: dict[str, Any] = {}
    model = FunctionModel(stream_function=slow_stream(200, 0.01, record))
    store = MemoryStore()
    agent = Agent(model, tools=[send_email], guards=[Guard.input(slow_block(0.08), parallel=True)], store=store)
    events = [e async for e in agent.stream("spam everyone", thread="t")]
    kinds = [e.kind for e in events]
    assert kinds[-1] == "run-stopped" and "guard-tripped" in kinds
    assert "text-delta" not in kinds and "tool-call-started" not in kinds and SENT == []
    for _ in range(100):  # the model's stream is closed (at once, or when its generator is finalized)
        if record.get("closed"):
            break
        gc.collect()
        await asyncio.sleep(0.01)
    assert record.get("closed") and record["sent"] < 200, record  # cut off, not read to the end
    result = events[-1].result  # type: ignore[union-attr]
    [row] = result.usage.calls
    # The provider reports usage at the end of a stream: none came, so the row is nbagent's estimate.
    assert (row.finish_reason, row.usage_reported, row.purpose) == ("cancelled", False, "run")
    assert row.input_tokens > 0 and row.output_tokens > 0
    stored = await store.load("t")
    assert stored is not None and [r.finish_reason for r in stored.usage] == ["cancelled"]
    assert stored.messages[0].blocked  # type: ignore[union-attr]


async def test_a_parallel_trip_cancels_a_call_that_is_not_streamed() -> None:
    started: list[bool] = []

    async def slow_answer(messages: list[Any], info: Any) -> Any:
        started.append(True)
        await asyncio.sleep(5)
        return tool_call("send_email", to=["x@y.org"], body="late")

    model = FunctionModel(slow_answer)
    agent = Agent(model, tools=[send_email], guards=[Guard.input(slow_block(0.05), parallel=True)],
                  store=MemoryStore())
    result = await asyncio.wait_for(agent.run("go"), 3)
    assert result.status == "stopped" and started == [True] and SENT == []
    [row] = result.usage.calls
    assert row.finish_reason == "cancelled" and not row.usage_reported


async def test_a_parallel_guard_cannot_rewrite() -> None:
    model = ScriptedModel(["answer"])
    agent = Agent(model, guards=[Guard.input(lambda t: rewrite("other"), parallel=True)], store=MemoryStore())
    result = await agent.run("hi")
    assert result.status == "stopped"
    assert "cannot rewrite" in result.guard_trip.reason  # type: ignore[union-attr]


async def test_parallel_guards_hold_the_first_answer_until_they_allow_it() -> None:
    model = FunctionModel(stream_function=slow_stream(5, 0.001, {}))
    agent = Agent(model, tools=[send_email], guards=[Guard.input(slow_allow(0.05), parallel=True)], max_steps=2,
                  store=MemoryStore())
    events = [e async for e in agent.stream("go")]
    kinds = [e.kind for e in events]
    assert kinds.index("text-held") < kinds.index("text-delta") < kinds.index("tool-call-started")
    first = next(e for e in events if e.kind == "text-delta")
    assert first.delta == "word0 word1 word2 word3 word4 "  # type: ignore[union-attr]
    # Once they allowed, the next answer streams as it comes: a delta at a time, nothing held.
    second = [e for e in events if e.kind in ("text-delta", "text-held") and e.step == 2]
    assert [e.kind for e in second] == ["text-delta"] * 5


async def test_stopping_a_run_before_its_parallel_guards_spoke_keeps_the_prompt_blocked() -> None:
    store = MemoryStore()
    model = FunctionModel(stream_function=slow_stream(100, 0.05, {}))
    agent = Agent(model, guards=[Guard.input(slow_allow(10), name="judge", parallel=True)], store=store)
    handle = agent.start("hi", thread="t")
    await asyncio.sleep(0.1)
    handle.cancel()
    result = await handle.wait()
    assert result.status == "cancelled"
    stored = await store.load("t")
    assert stored is not None and stored.messages[0].blocked == "'judge': not checked: the run was stopped first"  # type: ignore[union-attr]


# ---------------------------------------------------------------------- output
async def test_aisix_204_a_streamed_answer_an_output_guard_blocks_is_never_shown() -> None:
    store = MemoryStore()
    secret = "the key is sk-proj-" + "a" * 40
    model = ScriptedModel([secret, "second answer"])
    agent = Agent(model, guards=[Guard.output(lambda t: block("a key") if "sk-" in t else None, name="keys")],
                  store=store)
    events = [e async for e in agent.stream("what is the key?", thread="t")]
    kinds = [e.kind for e in events]
    assert "text-delta" not in kinds and "reasoning-delta" not in kinds
    assert kinds[-1] == "run-stopped" and "guard-tripped" in kinds and "text-held" in kinds
    assert not any("sk-" in repr(e) for e in events if e.kind != "run-stopped")
    result = events[-1].result  # type: ignore[union-attr]
    assert result.output is None and result.guard_trip.stage == "output"
    assert not any("sk-" in json.dumps(m.to_dict()) for m in result.messages)
    stored = await store.load("t")
    assert stored is not None and not any("sk-" in json.dumps(m.to_dict()) for m in stored.messages)
    assert stored.messages[-1].blocked == "keys: a key"  # type: ignore[union-attr]
    # The next turn never sends it.
    nxt = await agent.run("and now?", thread="t")
    assert nxt.output == "second answer"
    assert sent_texts(model)[1] == ["what is the key?", "and now?"]


async def test_a_held_answer_is_released_as_the_output_guards_leave_it() -> None:
    model = ScriptedModel(["call me at 555-0100 please"])
    agent = Agent(model, guards=[Guard.output(lambda t: rewrite(t.replace("555-0100", "[phone]")))],
                  store=MemoryStore())
    events = [e async for e in agent.stream("hi")]
    deltas = [e for e in events if e.kind == "text-delta"]
    assert [d.delta for d in deltas] == ["call me at [phone] please"]  # type: ignore[union-attr]
    assert deltas[0].snapshot == "call me at [phone] please"  # type: ignore[union-attr]
    assert events[-1].result.output == "call me at [phone] please"  # type: ignore[union-attr]
    kinds = [e.kind for e in events]
    assert kinds.index("text-held") < kinds.index("text-delta") < kinds.index("model-response")


async def test_text_that_comes_with_tool_calls_is_checked_too() -> None:
    said = AssistantMessage(text="emailing jane@example.com now", tool_calls=[
        ToolCall.of("send_email", {"to": ["jane@example.com"], "body": "hi"})])
    model = ScriptedModel([said])
    guard = Guard.output(lambda t: block("an address in the text") if "@" in t else None)
    result = await Agent(model, tools=[send_email], guards=[guard], store=MemoryStore()).run("go")
    assert result.status == "stopped" and SENT == []  # the whole answer is refused, its calls with it
    assert result.messages[-1].tool_calls == []  # type: ignore[union-attr]


async def test_an_output_retry_asks_again_within_output_retries() -> None:
    model = ScriptedModel(["rude answer", "polite answer"])
    guard = Guard.output(lambda t: retry("be polite") if "rude" in t else None, name="tone")
    result = await Agent(model, guards=[guard], store=MemoryStore()).run("hi")
    assert (result.status, result.output) == ("completed", "polite answer")
    second = sent_texts(model)[1]
    assert second[0] == "hi" and "guard 'tone' refused it: be polite" in second[-1]
    assert "rude answer" not in " ".join(second)
    assert [c.verdict for c in result.guard_checks] == ["retry", "allow"]


async def test_an_output_retry_past_output_retries_blocks() -> None:
    model = ScriptedModel(["rude"] * 3)
    agent = Agent(model, guards=[Guard.output(lambda t: retry("be polite"))], output_retries=1, store=MemoryStore())
    result = await agent.run("hi")
    assert result.status == "stopped" and len(model.requests) == 2
    assert result.guard_trip is not None and result.guard_trip.reason == "be polite (asked again 1 times: blocked)"


@dataclass
class Refund:
    order: str
    amount: float


async def test_a_structured_answer_is_checked_as_the_type() -> None:
    seen: list[Any] = []

    def cap(value: Any) -> Any:
        seen.append(value)
        return rewrite(Refund(value.order, min(value.amount, 100))) if isinstance(value, Refund) else None

    model = ScriptedModel([tool_call("final_result", result={"order": "A-1", "amount": 900})])
    result = await Agent(model, output_type=Refund, guards=[Guard.output(cap)], store=MemoryStore()).run("refund")
    assert result.output == Refund("A-1", 100) and seen == [Refund("A-1", 900)]


async def test_a_structured_answer_retry_goes_back_as_the_tool_s_error() -> None:
    model = ScriptedModel([tool_call("final_result", result={"order": "A-1", "amount": 900}),
                           tool_call("final_result", result={"order": "A-1", "amount": 50})])

    def cap(value: Any) -> Any:
        return retry("at most 100") if isinstance(value, Refund) and value.amount > 100 else None

    result = await Agent(model, output_type=Refund, guards=[Guard.output(cap)], store=MemoryStore()).run("refund")
    assert result.output == Refund("A-1", 50)
    [refused] = [m for m in result.messages if m.kind == "tool-result" and m.is_error]
    assert "refused by guard 'cap': at most 100" in refused.content  # type: ignore[union-attr]


async def test_a_structured_answer_given_as_text_is_checked_as_the_type() -> None:
    model = ScriptedModel(['{"order": "A-1", "amount": 900}'])
    guard = Guard.output(lambda v: block("too much") if isinstance(v, Refund) and v.amount > 100 else None)
    result = await Agent(model, output_type=Refund, guards=[guard], store=MemoryStore()).run("refund")
    assert result.status == "stopped" and result.output is None


# ---------------------------------------------------------------------- tool arguments and results
async def test_a_blocked_call_does_not_run_the_model_reads_why_and_the_run_goes_on() -> None:
    model = ScriptedModel([tool_call("send_email", to=[f"u{i}@x.org" for i in range(50)], body="sale"), "ok"])

    def no_mass_mail(args: dict[str, Any], ctx: GuardContext) -> Any:
        assert ctx.tool == "send_email" and ctx.stage == "tool_args"
        return block(f"{len(args['to'])} recipients (at most 10)") if len(args["to"]) > 10 else None

    agent = Agent(model, tools=[send_email], guards=[Guard.tool_args(no_mass_mail, tools=["send_email"])],
                  store=MemoryStore())
    events = [e async for e in agent.stream("mail everyone")]
    result = events[-1].result  # type: ignore[union-attr]
    assert result.status == "completed" and SENT == []
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.status == "denied" and res.is_error
    assert res.content.startswith("blocked by guard 'no_mass_mail': 50 recipients (at most 10)")
    [trip] = [e for e in events if e.kind == "guard-tripped"]
    assert trip.stops is False and trip.check.call_id == res.call_id  # type: ignore[union-attr]
    assert result.guard_trip is None


async def test_a_blocked_call_asks_nobody_and_a_rewritten_one_shows_what_will_run() -> None:
    @tool(requires_approval=True)
    async def wire(account: str, amount: int) -> str:
        """Wire money."""
        SENT.append(f"{account}:{amount}")
        return "wired"

    def limits(args: dict[str, Any]) -> Any:
        if args["account"] == "offshore":
            return block("not an allowed account")
        return rewrite({**args, "amount": min(args["amount"], 500)}, "capped at 500") if args["amount"] > 500 else None

    model = ScriptedModel([[tool_call("wire", id="a", account="offshore", amount=10),
                            tool_call("wire", id="b", account="acme", amount=9000)], "done"])
    agent = Agent(model, tools=[wire], guards=[Guard.tool_args(limits)], store=MemoryStore())
    paused = await agent.run("pay")
    assert [(p.id, p.args) for p in paused.pending] == [("b", {"account": "acme", "amount": 500})]
    done = await agent.resume(paused, approve=["b"])
    assert done.status == "completed" and SENT == ["acme:500"]
    calls = [c for m in done.messages if m.kind == "assistant" for c in m.tool_calls]
    assert calls[1].args == {"account": "acme", "amount": 500}  # the thread keeps what ran


async def test_a_result_guard_redacts_before_the_model_and_the_store_see_it() -> None:
    store = MemoryStore()
    model = ScriptedModel([tool_call("lookup", customer="C-1"), "done"])

    def redact_rows(result: str, ctx: GuardContext) -> Any:
        assert ctx.args == {"customer": "C-1"}
        return rewrite(result.replace("jane@example.com", "[email]"))

    agent = Agent(model, tools=[lookup], guards=[Guard.tool_result(redact_rows, tools=["lookup"])], store=store)
    result = await agent.run("who is C-1?", thread="t")
    assert "jane@example.com" not in json.dumps(sent_texts(model))
    stored = await store.load("t")
    assert stored is not None
    assert not any("jane@example.com" in json.dumps(m.to_dict()) for m in stored.messages)
    assert result.status == "completed"


async def test_a_blocked_result_is_withheld_as_an_error() -> None:
    model = ScriptedModel([tool_call("lookup", customer="C-1"), "done"])
    guard = Guard.tool_result(lambda r: block("holds a card number") if "4111" in r else None)
    result = await Agent(model, tools=[lookup], guards=[guard], store=MemoryStore()).run("who?")
    [res] = [m for m in result.messages if m.kind == "tool-result"]
    assert res.is_error and res.content.startswith("result withheld by guard")  # type: ignore[union-attr]
    assert "4111" not in json.dumps(sent_texts(model))


async def test_tool_guards_apply_only_to_their_tools() -> None:
    model = ScriptedModel([tool_call("lookup", customer="C-1"), "done"])
    guard = Guard.tool_result(lambda r: block("no"), tools=["send_email"])
    result = await Agent(model, tools=[lookup, send_email], guards=[guard], store=MemoryStore()).run("who?")
    assert result.guard_checks == [] and result.status == "completed"


# ---------------------------------------------------------------------- audit
async def test_openai_agents_4068_every_check_is_kept_when_a_guard_trips() -> None:
    def fine(text: str) -> Any:
        return None

    agent = Agent(ScriptedModel([]), guards=[Guard.input(fine), Guard.input(no_ids, name="ids")], store=MemoryStore())
    result = await agent.run("C-1")
    assert [(c.guard, c.stage, c.verdict) for c in result.guard_checks] == [("fine", "input", "allow"),
                                                                              ("ids", "input", "block")]
    assert all(c.latency_s >= 0 for c in result.guard_checks)
    assert result.guard_trip is result.guard_checks[-1]
    events = [e async for e in agent.stream("C-2")]
    assert [e.kind for e in events] == ["run-started", "guard-tripped", "run-stopped"]
    assert events[-1].result.guard_checks[-1].reason == "a customer id"  # type: ignore[union-attr]


async def test_a_judge_agent_is_a_guard_and_its_usage_joins_the_run_as_guard() -> None:
    store = MemoryStore()
    judge = Agent(ScriptedModel([tool_call("final_result", result={"allowed": False, "reason": "medical advice"})]),
                  output_type=Judgement, store=MemoryStore(), name="policy")
    model = ScriptedModel(["never"])
    agent = Agent(model, guards=[Guard.input(judge)], store=store)
    result = await agent.run("what dose should I take?", thread="t")
    assert result.status == "stopped" and model.requests == []
    assert result.guard_trip is not None and (result.guard_trip.guard, result.guard_trip.reason) == (
        "policy", "medical advice")
    assert [r.purpose for r in result.usage.calls] == ["guard"]
    assert result.usage.calls[0].run_id == result.run_id
    stored = await store.load("t")
    assert stored is not None and [r.purpose for r in stored.usage] == ["guard"]


@pytest.mark.parametrize(("answer", "allowed"), [("ALLOW", True), ("BLOCK: spam", False), ("maybe", False)])
async def test_a_text_judge_answers_allow_or_block(answer: str, allowed: bool) -> None:
    judge = Agent(ScriptedModel([answer]), store=MemoryStore())
    model = ScriptedModel(["fine"])
    result = await Agent(model, guards=[Guard.output(judge, name="judge")], store=MemoryStore()).run("hi")
    assert (result.status == "completed") is allowed
    if answer == "BLOCK: spam":
        assert result.guard_trip.reason == "spam"  # type: ignore[union-attr]


async def test_three_allow_all_guards_cost_nothing_visible() -> None:
    model = ScriptedModel([tool_call("send_email", to=["a@b.org"], body="x"), "done"])
    allow = [Guard.input(lambda t: None), Guard.tool_args(lambda a: None), Guard.output(lambda t: None)]
    result = await Agent(model, tools=[send_email], guards=allow, store=MemoryStore()).run("go")
    assert result.status == "completed" and SENT == ["x"]
    assert [c.stage for c in result.guard_checks] == ["input", "tool_args", "output"]


async def test_continuing_a_thread_whose_last_turn_a_guard_stopped_asks_no_model() -> None:
    store = MemoryStore()
    model = ScriptedModel([f"the key is sk-proj-{'z' * 30}"])
    agent = Agent(model, guards=[Guard.output(lambda t: block("a key") if "sk-" in t else None)], store=store)
    await agent.run("key?", thread="t")
    again = await Agent(ScriptedModel([]), store=store).run(thread="t")  # continue, no prompt, no guards
    assert (again.status, again.stop_reason, again.steps) == ("stopped", "guard", 0)


async def test_a_parallel_guard_is_waited_for_before_a_summary_call_would_read_the_prompt() -> None:
    from nbagent import Compaction

    summaries: list[str] = []

    def answer(messages: list[Any], request: Any) -> Any:
        if not request.tools:  # the summary call
            summaries.append(messages[-1].content)
            return "summary"
        return "answer " + "x " * 200

    model = FunctionModel(answer, context_window=400)
    agent = Agent(model, compaction=Compaction(at=0.5, keep_last=1), store=MemoryStore())
    for i in range(3):
        await agent.run(f"question {i} " + "y " * 60, thread="t")
    guarded = Agent(model, compaction=Compaction(at=0.5, keep_last=1), store=agent.store,
                    guards=[Guard.input(slow_block(0.05, "secret"), parallel=True)])
    before, calls = len(summaries), len(model.requests)
    assert before > 0  # the thread is long enough that a compaction comes before each call
    result = await guarded.run("the secret is C-99 " + "y " * 60, thread="t")
    assert result.status == "stopped" and result.guard_trip is not None
    assert len(summaries) == before and len(model.requests) == calls  # no summary, no call: nothing read it
    assert result.usage.requests == 0


async def test_a_retried_model_call_holds_its_new_attempt_too() -> None:
    from nbagent.exceptions import RateLimitError

    attempts = [0]

    async def stream(messages: list[Any], request: Any) -> Any:
        attempts[0] += 1
        yield "partial "
        if attempts[0] == 1:
            raise RateLimitError("slow down", status_code=429, retry_after=0)
        yield "whole answer"

    agent = Agent(FunctionModel(stream_function=stream), guards=[Guard.output(lambda t: None)], store=MemoryStore())
    events = [e async for e in agent.stream("hi")]
    kinds = [e.kind for e in events]
    assert kinds.count("text-held") == 2 and kinds.count("text-delta") == 1
    assert [e.delta for e in events if e.kind == "text-delta"] == ["partial whole answer"]  # type: ignore[union-attr]
