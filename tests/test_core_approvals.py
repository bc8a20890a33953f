"""Approvals and client tools: pausing, per-call decisions bound to the arguments shown, and
the errors of a resume that cannot apply.

Bad input fails at resume time, before anything runs. Only the shipped fakes and `MemoryStore`.
"""

from typing import Any

import pytest
from pydantic import BaseModel

from nbagent import (
    Agent,
    ArgumentsMismatchError,
    InvalidArgumentsError,
    NotResumableError,
    PendingCall,
    PendingCallsError,
    RunResult,
    Tool,
    UnknownCallError,
    UserError,
    tool,
)
from nbagent.messages import message_from_dict
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import MemoryStore
from tests.helpers import shape


class Shop:
    """Tools that count how often they really ran."""

    def __init__(self) -> None:
        self.refunds: list[tuple[str, float]] = []
        self.lookups: list[str] = []

        @tool(requires_approval=True)
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.refunds.append((order_id, amount))
            return f"refunded {amount:g} on {order_id}"

        @tool
        def lookup(order_id: str) -> str:
            """Look up an order."""
            self.lookups.append(order_id)
            return f"order {order_id}: 2 items"

        self.refund, self.lookup = refund, lookup

    def agent(self, *answers: Any, store: MemoryStore | None = None, **kwargs: Any) -> Agent:
        return Agent(ScriptedModel(answers), tools=[self.refund, self.lookup],
                     store=store or MemoryStore(), **kwargs)


def echo_last_result(messages: list[Any], request: Any) -> str:
    """A model answer that repeats the last tool result."""
    return f"model saw: {messages[-1].content}"


async def paused(shop: Shop, **kwargs: Any) -> tuple[Agent, RunResult]:
    agent = shop.agent(
        [tool_call("refund", order_id="42", amount=10.0, id="r1"),
         tool_call("lookup", order_id="42", id="l1")],
        echo_last_result,
        **kwargs,
    )
    result = await agent.run("Refund order 42", thread="t")
    return agent, result


async def test_a_call_needing_approval_pauses_and_siblings_run_once() -> None:
    shop = Shop()
    agent, result = await paused(shop)

    assert result.status == "paused"
    assert result.output is None
    assert [(p.id, p.name, p.args, p.reason) for p in result.pending] == [
        ("r1", "refund", {"order_id": "42", "amount": 10.0}, "approval")
    ]
    assert result.pending[0].description == "Refund an order."
    assert shop.refunds == [] and shop.lookups == ["42"]
    assert shape(result.messages) == [
        ("user", "Refund order 42"),
        ("assistant", None, [("refund", {"order_id": "42", "amount": 10.0}),
                             ("lookup", {"order_id": "42"})]),
        ("tool-result", "lookup", "order 42: 2 items", False),
    ]

    done = await agent.resume(result, approve=["r1"])
    assert done.status == "completed"
    assert shop.refunds == [("42", 10.0)] and shop.lookups == ["42"]  # the sibling never ran again
    assert done.output == "model saw: refunded 10 on 42"
    assert shape(done.new_messages) == [
        ("tool-result", "refund", "refunded 10 on 42", False),
        ("assistant", "model saw: refunded 10 on 42", []),
    ]


async def test_deny_with_a_reason_the_model_sees() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    done = await agent.resume(result, deny={"r1": "the customer already got a voucher"})
    assert done.status == "completed"
    assert shop.refunds == []
    denied = done.messages[-2]
    assert (denied.call_id, denied.is_error, denied.status) == ("r1", True, "denied")
    assert denied.content == (
        "denied by the user: the customer already got a voucher\n"
        "refund was not run. Do not call it again with the same arguments: that call is denied without asking. "
        "Take the reason into account, or ask the user what to do instead.")
    assert done.output == "model saw: " + denied.content


async def test_deny_without_a_reason() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    done = await agent.resume(result, deny=["r1"])
    assert done.messages[-2].content.startswith("denied by the user (no reason given)\nrefund was not run.")


async def test_edit_runs_the_tool_with_validated_new_arguments() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    with pytest.raises(InvalidArgumentsError, match="amount"):
        await agent.resume(result, edit={"r1": {"order_id": "42", "amount": "lots"}})
    with pytest.raises(InvalidArgumentsError, match="must be a dict"):
        await agent.resume(result, edit={"r1": ["42", 5]})  # type: ignore[dict-item]
    assert shop.refunds == []  # a rejected edit runs nothing and leaves the run paused

    done = await agent.resume(result, edit={"r1": {"order_id": "42", "amount": 5}})
    assert done.status == "completed"
    assert shop.refunds == [("42", 5.0)]
    edited = done.messages[-2]
    # the result is the tool's own text; the edit is recorded beside it (the view shows it there)
    assert edited.content == "refunded 5 on 42"
    assert (edited.edited_args, edited.decision) == ({"order_id": "42", "amount": 5}, "edited")
    # the model is still told what really ran, before the result
    note = '[The user changed the arguments before approving; the tool ran with: {"order_id": "42", "amount": 5}]\n'
    assert edited.model_text() == note + "refunded 5 on 42"
    from nbagent.models.anthropic._wire import wire_messages
    from nbagent.models.openai._wire import WireCache

    (tool_message,) = [m for m in WireCache().wire_messages(done.messages, True) if m.get("tool_call_id") == "r1"]
    assert tool_message["content"] == note + "refunded 5 on 42"
    turns, _ = wire_messages(done.messages)
    (block,) = [b for t in turns for b in (t["content"] if isinstance(t["content"], list) else [])
                if b.get("type") == "tool_result" and b["tool_use_id"] == "r1"]
    assert block["content"] == note + "refunded 5 on 42"
    # stored and read back (threads written before keep the note in their text)
    assert message_from_dict(edited.to_dict()) == edited
    assert message_from_dict({**edited.to_dict(), "edited_args": None}).model_text() == "refunded 5 on 42"


async def test_always_allow_approves_pending_calls_and_persists_for_the_thread() -> None:
    shop = Shop()
    store = MemoryStore()
    agent = shop.agent(
        tool_call("refund", order_id="1", amount=1.0, id="a"),
        "first done",
        tool_call("refund", order_id="2", amount=2.0, id="b"),
        "second done",
        tool_call("refund", order_id="3", amount=3.0, id="c"),
        store=store,
    )
    first = await agent.run("refund 1", thread="t")
    assert first.status == "paused"
    allowed = await agent.resume(first, always_allow=["refund"])
    assert allowed.status == "completed" and shop.refunds == [("1", 1.0)]

    second = await agent.run("refund 2", thread="t")  # same thread: no pause
    assert second.status == "completed" and second.output == "second done"
    assert shop.refunds == [("1", 1.0), ("2", 2.0)]

    other = await agent.run("refund 3", thread="other")  # another thread asks again
    assert other.status == "paused" and other.pending[0].id == "c"

    with pytest.raises(UserError, match="unknown tool 'nope'"):
        await agent.resume(other, always_allow=["nope"])


async def test_requires_approval_can_depend_on_the_arguments() -> None:
    ran: list[float] = []

    @tool(requires_approval=lambda args: args.amount > 100)
    def refund(order_id: str, amount: float) -> str:
        """Refund."""
        ran.append(amount)
        return "ok"

    answer = [tool_call("refund", order_id="1", amount=50, id="small"),
              tool_call("refund", order_id="2", amount=500, id="big")]
    agent = Agent(ScriptedModel([answer, "done"]), tools=[refund], store=MemoryStore())
    result = await agent.run("refunds")
    assert result.status == "paused"
    assert [p.id for p in result.pending] == ["big"]
    assert ran == [50.0]
    done = await agent.resume(result, approve=result.pending)
    assert done.status == "completed" and ran == [50.0, 500.0]


async def test_a_failing_approval_policy_asks_for_approval() -> None:
    def policy(args: Any) -> bool:
        raise RuntimeError("policy bug")

    @tool(requires_approval=policy)
    def act() -> str:
        """Act."""
        return "acted"

    result = await Agent(ScriptedModel([tool_call("act"), "x"]), tools=[act], store=MemoryStore()).run("go")
    assert result.status == "paused"


async def test_undecided_calls_stay_pending() -> None:
    shop = Shop()
    answer = [tool_call("refund", order_id="1", amount=1.0, id="a"),
              tool_call("refund", order_id="2", amount=2.0, id="b")]
    agent = shop.agent(answer, "done")
    result = await agent.run("two refunds")
    assert [p.id for p in result.pending] == ["a", "b"]
    half = await agent.resume(result, approve=["a"])
    assert half.status == "paused"
    assert [p.id for p in half.pending] == ["b"]
    assert shop.refunds == [("1", 1.0)]
    done = await agent.resume(half, deny={"b": "no"})
    assert done.status == "completed" and shop.refunds == [("1", 1.0)]


async def test_resume_by_thread_with_a_new_agent_object() -> None:
    """After a kernel restart: a new Agent on the same store continues the thread by its id."""
    shop = Shop()
    store = MemoryStore()
    await paused(shop, store=store)
    fresh = Shop()
    later = fresh.agent(echo_last_result, store=store)
    done = await later.resume(thread="t", approve=["r1"])
    assert done.status == "completed"
    assert fresh.refunds == [("42", 10.0)] and fresh.lookups == []


# ---------------------------------------------------------------------- decisions bound to id + args
async def test_a_decision_for_other_arguments_is_refused() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    shown = result.pending[0]
    forged = PendingCall(shown.id, shown.name, {"order_id": "42", "amount": 9999.0})
    with pytest.raises(ArgumentsMismatchError, match="9999"):
        await agent.resume(result, approve=[forged])
    with pytest.raises(ArgumentsMismatchError):
        await agent.resume(thread="t", deny={shown.id: "x"}, approve=[forged])
    assert shop.refunds == []

    # A RunResult whose pending call shows other arguments than the stored one: refused by id too.
    result.pending[0] = PendingCall(shown.id, shown.name, {"order_id": "43", "amount": 10.0})
    with pytest.raises(ArgumentsMismatchError):
        await agent.resume(result, approve=["r1"])
    assert shop.refunds == []

    ok = await agent.resume(thread="t", approve=[shown])
    assert ok.status == "completed" and shop.refunds == [("42", 10.0)]


async def test_unknown_call_id() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    with pytest.raises(UnknownCallError, match=r"no call 'nope' is waiting.*r1 \(refund\)"):
        await agent.resume(result, approve=["nope"])
    with pytest.raises(UnknownCallError):
        await agent.resume(result, deny={"l1": "already ran"})  # ran before the pause


async def test_two_decisions_for_one_call_are_refused() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    with pytest.raises(UserError, match="more than one decision"):
        await agent.resume(result, approve=["r1"], deny={"r1": "no"})


async def test_resuming_a_completed_run_is_refused() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    done = await agent.resume(result, approve=["r1"])
    with pytest.raises(NotResumableError, match="completed"):
        await agent.resume(done)
    with pytest.raises(NotResumableError, match="completed"):
        await agent.resume(result, approve=["r1"])  # the old paused result: it is done now
    assert shop.refunds == [("42", 10.0)]
    with pytest.raises(NotResumableError, match="not in the store"):
        await agent.resume(thread="never-seen")
    with pytest.raises(UserError):
        await agent.resume()


async def test_a_new_prompt_while_paused_is_refused() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    with pytest.raises(PendingCallsError, match="r1"):
        await agent.run("something else", thread="t")
    # The refused prompt was not added: the paused run still resumes cleanly.
    done = await agent.resume(result, approve=["r1"])
    assert done.status == "completed"
    assert [m.content for m in done.messages if m.kind == "user"] == ["Refund order 42"]


# ---------------------------------------------------------------------- client tools
class AskUser(BaseModel):
    question: str


ask_user = Tool.client("ask_user", "Ask the person a question.", params=AskUser)


async def test_client_tool_pauses_and_resume_supplies_the_result() -> None:
    model = ScriptedModel([tool_call("ask_user", question="Favourite colour?", id="q1"), echo_last_result])
    agent = Agent(model, tools=[ask_user], store=MemoryStore())
    result = await agent.run("Pick a colour for me")
    assert result.status == "paused"
    (pending,) = result.pending
    assert (pending.id, pending.name, pending.args, pending.reason) == (
        "q1", "ask_user", {"question": "Favourite colour?"}, "client")

    with pytest.raises(UserError, match="client tool"):
        await agent.resume(result, approve=["q1"])

    done = await agent.resume(result, results={"q1": "blue"})
    assert done.status == "completed"
    assert done.output == "model saw: blue"
    assert shape(done.new_messages)[0] == ("tool-result", "ask_user", "blue", False)


async def test_client_tool_results_are_shown_as_json() -> None:
    model = ScriptedModel([tool_call("ask_user", question="Which?", id="q1"), echo_last_result])
    agent = Agent(model, tools=[ask_user], store=MemoryStore())
    result = await agent.run("go")
    done = await agent.resume(result, results={"q1": {"choice": 2}})
    assert done.output == 'model saw: {"choice": 2}'


async def test_results_for_a_server_tool_are_refused() -> None:
    shop = Shop()
    agent, result = await paused(shop)
    with pytest.raises(UserError, match="approve or deny"):
        await agent.resume(result, results={"r1": "fake"})
    assert shop.refunds == []


async def test_client_tool_arguments_are_validated_before_pausing() -> None:
    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            return tool_call("ask_user", text="no question field")
        return "gave up"

    agent = Agent(FunctionModel(answer), tools=[ask_user], store=MemoryStore())
    result = await agent.run("go")
    assert result.status == "completed"
    bad = result.messages[2]
    assert bad.is_error and "question: Field required" in bad.content


async def test_approval_and_client_events_in_a_stream() -> None:
    shop = Shop()
    answer = [tool_call("refund", order_id="1", amount=1.0, id="r"),
              tool_call("ask_user", question="?", id="q")]
    agent = Agent(ScriptedModel([answer, "done"]), tools=[shop.refund, ask_user], store=MemoryStore())
    kinds = []
    last = None
    async for event in agent.stream("go"):
        kinds.append(event.kind)
        last = event
    assert kinds[-3:] == ["approval-requested", "client-call-requested", "run-paused"]
    assert last is not None and last.result.status == "paused"
    events = [e async for e in agent.resume_stream(last.result, approve=["r"], results={"q": "yes"})]
    assert events[-1].kind == "run-completed"
    finished = [e.result.content for e in events if e.kind == "tool-call-finished"]
    assert sorted(finished) == ["refunded 1 on 1", "yes"]


async def test_pending_lists_what_waits_on_a_stored_thread_for_a_new_agent() -> None:
    store = MemoryStore()
    ran: list[str] = []

    @tool(requires_approval=True)
    def book(city: str) -> str:
        """Book."""
        ran.append(city)
        return f"booked {city}"

    model = ScriptedModel([tool_call("book", city="Rome"), "Booked."])
    paused = await Agent(model, tools=[book], store=store).run("book Rome", thread="t")
    fresh = Agent(model, tools=[book], store=store)  # as after a kernel restart
    waiting = await fresh.pending("t")
    assert [(p.name, p.args) for p in waiting] == [("book", {"city": "Rome"})]
    assert waiting[0].id == paused.pending[0].id
    done = await fresh.resume(thread="t", approve=waiting)
    assert (done.status, done.output, ran) == ("completed", "Booked.", ["Rome"])
    assert await fresh.pending("t") == []
    assert await fresh.pending("no-such-thread") == []


async def test_tools_in_order_defers_later_calls_until_the_waiting_one_is_decided() -> None:
    order: list[str] = []

    @tool(requires_approval=True)
    def first(x: str) -> str:
        """First."""
        order.append("first")
        return "1"

    @tool
    def second(x: str) -> str:
        """Second."""
        order.append("second")
        return "2"

    model = ScriptedModel([[tool_call("first", x="a"), tool_call("second", x="b")], "ok"])
    agent = Agent(model, tools=[first, second], tools_in_order=True, store=MemoryStore())
    result = await agent.run("go")
    assert result.status == "paused" and order == []
    result = await agent.resume(result, approve=result.pending)
    assert result.status == "completed" and order == ["first", "second"]


async def test_result_records_start_and_end_times() -> None:
    result = await Agent(ScriptedModel(["hi"]), store=MemoryStore()).run("hello")
    assert result.started_at is not None and result.ended_at is not None
    assert 0 <= result.duration_s < 5


async def test_decisions_are_recorded_with_who_and_when_on_the_results() -> None:
    @tool(requires_approval=True)
    def act(x: str) -> str:
        """Act."""
        return x

    model = ScriptedModel([[tool_call("act", x="a"), tool_call("act", x="b"), tool_call("act", x="c")],
                           "done", tool_call("act", x="d"), "done again"])
    agent = Agent(model, tools=[act], store=MemoryStore())
    paused = await agent.run("go", thread="t")
    a, b, c = paused.pending
    done = await agent.resume(paused, approve=[a], deny={b.id: "no"}, edit={c.id: {"x": "C"}},
                              always_allow=[], decided_by="ada")
    results = {m.call_id: m for m in done.messages if m.kind == "tool-result"}
    assert [(results[p.id].decision, results[p.id].decided_by) for p in (a, b, c)] == [
        ("approved", "ada"), ("denied", "ada"), ("edited", "ada")]
    assert all(results[p.id].decided_at for p in (a, b, c))
    second = await agent.run("again", thread="t")
    assert second.status == "paused"
    third = await agent.resume(second, always_allow=["act"])
    last = [m for m in third.messages if m.kind == "tool-result"][-1]
    assert (last.decision, last.decided_by) == ("always-allowed", None)
    stored = await agent.store.load("t")  # the record survives the store round trip
    assert sorted(m.decision for m in stored.messages if m.kind == "tool-result") == [
        "always-allowed", "approved", "denied", "edited"]
