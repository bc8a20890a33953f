"""The chat view's behaviour without widgets: a `ChatController` drives real runs (shipped fake
models, `MemoryStore`) and reports to `Screen`, a `ChatLayout` that writes down what it is told.
Everything goes through the controller's public methods, as the view's buttons do."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from nbagent import Agent, Decisions, PendingCall, Tool, tool
from nbagent.messages import Message, UserMessage
from nbagent.models import FunctionModel, tool_call
from nbagent.store.memory import MemoryStore
from nbagent.widgets._calls import validate_args
from nbagent.widgets._controller import ChatController

refunds: list[tuple[int, float]] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    refunds.clear()


@tool(requires_approval=True)
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    refunds.append((order, amount))
    return f"refunded {amount} on order {order}"


@tool
async def slow(seconds: float) -> str:
    """Wait a while."""
    await asyncio.sleep(seconds)
    return "slept"


ask_user = Tool.client("ask_user", "Ask the person a question.",
                       {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]})


def answer(messages: list[Message], request: Any) -> Any:
    """Calls the tools the user's message names; then says what the tools said."""
    last = messages[-1]
    if last.kind == "user":
        text = last.content  # type: ignore[union-attr]
        if text.startswith("two refunds"):
            return [tool_call("refund", order=1, amount=5.0), tool_call("refund", order=2, amount=7.0)]
        if text.startswith("refund"):
            return tool_call("refund", order=42, amount=9.5)
        if text.startswith("ask"):
            return tool_call("ask_user", question="Which colour?")
        if text.startswith("slow"):
            return tool_call("slow", seconds=30.0)
        return f"You said: {text}"
    results = []
    for m in reversed(messages):
        if m.kind != "tool-result":
            break
        results.insert(0, m.content.split("\n")[0])  # type: ignore[union-attr]  # (a denial: its reason)
    return "The tool said: " + " | ".join(results)


def make_agent(store: MemoryStore | None = None) -> Agent:
    return Agent(FunctionModel(answer), tools=[refund, slow, ask_user], store=store or MemoryStore())


class Screen:
    """A `ChatLayout` (and its `RunLayout`) that writes down what the controller shows."""

    def __init__(self) -> None:
        self.status = ""
        self.error = False
        self.note = ""
        self.running = False
        self.bulk = False
        self.always_allowed: list[str] = []
        self.history: list[Message] = []
        self.usage_labels: list[str] = []
        self.tally: Any = None
        self.conversation: list[Message] = []
        self.queue: list[str] = []
        self.sent: list[str] = []
        self.streamed: dict[int, str] = {}
        self.answers: list[str] = []
        self.rows: dict[str, dict[str, Any]] = {}
        self.runs = 0

    @property
    def run_log(self) -> Screen:
        return self

    # ChatLayout
    def show_history(self, messages: Sequence[Message], skip_call_ids: Sequence[str], *,
                     replayed: Sequence[int] = (), subruns: Any = None) -> None:
        self.history = list(messages)

    def show_usage(self, tally: Any, *, token_budget: int | None = None, cost_budget: float | None = None) -> None:
        self.usage_labels.append("running" if tally.running else "idle")
        self.tally = tally

    def show_conversation(self, messages: Sequence[Message], subruns: Any = None) -> None:
        self.conversation = list(messages)

    def unsend(self, message: UserMessage) -> None:
        self.sent.remove(message.content)

    def show_status(self, text: str, error: bool, note: str) -> None:
        self.status, self.error, self.note = text, error, note

    def show_running(self, running: bool) -> None:
        self.running = running

    def show_bulk(self, show: bool) -> None:
        self.bulk = show

    def show_always_allowed(self, tools: Sequence[str]) -> None:
        self.always_allowed = list(tools)

    def show_queue(self, messages: Sequence[UserMessage]) -> None:
        self.queue = [m.content for m in messages]

    def show_sent(self, message: UserMessage) -> None:
        self.sent.append(message.content)

    # RunLayout
    def run_started(self) -> None:
        self.runs += 1
        self.streamed = {}

    def stream(self, step: int, delta: str, *, reasoning: bool = False) -> None:
        self.streamed[step] = self.streamed.get(step, "") + delta

    def reset_step(self, step: int) -> None:
        self.streamed.pop(step, None)

    def show_answer(self, step: int, message: Any) -> None:
        if message.text:
            self.answers.append(message.text)

    def finish_streams(self) -> None:
        pass

    def add_call(self, call_id: str, name: str, args: Any, group: object) -> None:
        self.rows[call_id] = {"name": name, "args": args, "group": group, "status": "queued", "pending": None}

    def update_call(self, call_id: str, status: str, result: str | None = None, *,
                    is_error: bool = False, duration_s: float | None = None, message: Any = None) -> None:
        self.rows[call_id].update(status=status, result=result, message=message)

    def set_call_args(self, call_id: str, args: Any) -> None:
        self.rows[call_id]["args"] = args

    def show_pending(self, pending: PendingCall, unavailable: str | None = None) -> None:
        self.rows[pending.id].update(status="waits", pending=pending, unavailable=unavailable)

    def lock_call(self, call_id: str) -> None:
        self.rows[call_id]["status"] = "locked"


async def controller_for(agent: Agent, thread: str) -> tuple[ChatController, Screen]:
    screen = Screen()
    controller = ChatController(agent, thread, screen)
    controller.load()
    await controller.wait_loaded()
    return controller, screen


def spy_starts(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The `resume=` of every `agent.start` from now on."""
    starts: list[Any] = []
    original = agent.start

    def spy(*args: Any, **kwargs: Any) -> Any:
        starts.append(kwargs.get("resume"))
        return original(*args, **kwargs)

    monkeypatch.setattr(agent, "start", spy)
    return starts


async def settle(turns: int = 20) -> None:
    """Let the loop run what was handed to it (notices of runs elsewhere come through it)."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def until_running(controller: ChatController) -> None:
    for _ in range(200):
        if any(c.status == "running" for c in controller.board.calls.values()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no call started running")


# ----------------------------------------------------------------------------------- runs
async def test_a_message_runs_and_the_screen_follows_it() -> None:
    controller, screen = await controller_for(make_agent(), "c-run")
    assert controller.send(UserMessage("hello")) is True
    assert controller.handle is not None and screen.running and screen.status == "running…"
    result = await controller.wait()
    assert result is not None and result.output == "You said: hello" and controller.result is result
    assert screen.sent == ["hello"] and screen.answers == ["You said: hello"]
    assert controller.handle is None and not screen.running and screen.status == ""


async def test_ask_checks_the_prompt_and_sends_it() -> None:
    from nbagent import InvalidPromptError

    controller, screen = await controller_for(make_agent(), "c-ask")
    with pytest.raises(InvalidPromptError):
        controller.ask(["what?", b"not an image"])
    assert screen.sent == [] and controller.handle is None
    handle = controller.ask("hi")
    assert handle is controller.handle and handle is not None
    assert (await handle).output == "You said: hi"


async def test_stop_cancels_the_run_and_the_calls_it_left_running() -> None:
    controller, screen = await controller_for(make_agent(), "c-stop")
    controller.send(UserMessage("slow please"))
    await until_running(controller)
    controller.stop()
    result = await controller.wait()
    assert result.status == "cancelled" and screen.status == "cancelled"
    [row] = screen.rows.values()
    assert row["status"] == "cancelled"


async def test_no_loop_loads_the_thread_but_cannot_run() -> None:
    store = MemoryStore()
    await make_agent(store).run("hello", thread="c-noloop")

    def in_a_script() -> tuple[ChatController, Screen]:
        screen = Screen()
        controller = ChatController(make_agent(store), "c-noloop", screen)  # no running loop here
        controller.load()  # loads at once
        return controller, screen

    controller, screen = await asyncio.to_thread(in_a_script)
    assert [m.kind for m in screen.history] == ["user", "assistant"]
    assert screen.usage_labels == ["idle"] and screen.tally.thread.requests == screen.tally.turn.requests == 1
    controller.send(UserMessage("again"))
    assert screen.error and "no running event loop" in screen.status and controller.handle is None


# ----------------------------------------------------------------------------------- decisions
async def test_a_paused_run_waits_then_one_approval_resumes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent()
    controller, screen = await controller_for(agent, "c-approve")
    controller.send(UserMessage("refund please"))
    result = await controller.wait()
    assert result.status == "paused" and screen.status == "waiting for you: 1 tool call"
    [call] = controller.board.waiting
    assert call.name == "refund" and call.pending is screen.rows[call.id]["pending"]
    starts = spy_starts(agent, monkeypatch)
    controller.decide(call.id, "approve")
    assert call.decided and screen.rows[call.id]["status"] in ("locked", "running", "done")
    result = await controller.wait()
    [resume] = starts
    [approved] = resume.items
    assert approved.action == "approve" and approved.shown is call.pending  # bound to what was shown
    assert result.output == "The tool said: refunded 9.5 on order 42" and refunds == [(42, 9.5)]
    assert screen.rows[call.id]["status"] == "done" and controller.board.waiting == []


async def test_approve_all_shows_for_two_or_more_and_sends_one_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent()
    controller, screen = await controller_for(agent, "c-all")
    controller.send(UserMessage("refund one"))
    await controller.wait()
    assert not screen.bulk
    controller.decide(controller.board.waiting[0].id, "deny", "no")
    await controller.wait()
    controller.send(UserMessage("two refunds"))
    await controller.wait()
    assert screen.bulk and len(controller.board.approvals) == 2
    starts = spy_starts(agent, monkeypatch)
    controller.decide_all("deny", "not today")
    assert not screen.bulk
    result = await controller.wait()
    [resume] = starts
    assert [(d.action, d.reason) for d in resume.items] == [("deny", "not today")] * 2
    assert result.output == "The tool said: denied by the user: not today | denied by the user: not today"
    assert refunds == []


async def test_always_allow_approves_every_shown_call_of_the_tool_and_later_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent()
    controller, _ = await controller_for(agent, "c-always")
    controller.send(UserMessage("two refunds"))
    await controller.wait()
    first, second = controller.board.waiting
    starts = spy_starts(agent, monkeypatch)
    controller.decide(first.id, "always")
    assert first.decided and second.decided and "refund" in controller.board.decisions.always_allowed
    result = await controller.wait()
    [resume] = starts
    assert [d.action for d in resume.items] == ["approve", "approve"] and resume.always_allowed == ("refund",)
    assert result.status == "completed" and sorted(refunds) == [(1, 5.0), (2, 7.0)]
    controller.send(UserMessage("refund more"))
    assert (await controller.wait()).status == "completed" and refunds[-1] == (42, 9.5)  # no approval asked


async def test_a_call_decided_twice_counts_once() -> None:
    controller, _ = await controller_for(make_agent(), "c-twice")
    controller.send(UserMessage("refund"))
    await controller.wait()
    [call] = controller.board.waiting
    controller.decide(call.id, "deny", "no")
    controller.decide(call.id, "approve")  # already decided: ignored
    result = await controller.wait()
    assert result.output == "The tool said: denied by the user: no" and refunds == []


async def test_a_client_tool_gets_the_persons_answer() -> None:
    controller, screen = await controller_for(make_agent(), "c-client")
    controller.send(UserMessage("ask me"))
    await controller.wait()
    [call] = controller.board.waiting
    assert call.status == "needs answer" and not screen.bulk
    controller.decide(call.id, "result", "blue")
    assert (await controller.wait()).output == "The tool said: blue"


async def test_edited_arguments_are_validated_then_run() -> None:
    from nbagent.exceptions import InvalidArgumentsError

    controller, _ = await controller_for(make_agent(), "c-edit")
    controller.send(UserMessage("refund"))
    await controller.wait()
    [call] = controller.board.waiting
    with pytest.raises(InvalidArgumentsError):
        validate_args(controller.agent.tools, "refund", {"order": 42, "amount": "lots"})
    validate_args(controller.agent.tools, "refund", {"order": 42, "amount": 1.25})
    controller.decide(call.id, "edit", {"order": 42, "amount": 1.25})
    result = await controller.wait()
    assert refunds == [(42, 1.25)] and "refunded 1.25" in result.output


async def test_a_paused_thread_is_decided_by_a_new_controller_after_a_restart() -> None:
    store = MemoryStore()
    first, _ = await controller_for(make_agent(store), "c-restart")
    first.send(UserMessage("refund"))
    await first.wait()
    controller, screen = await controller_for(make_agent(store), "c-restart")  # no RunResult in memory
    [call] = controller.board.waiting
    assert screen.rows[call.id]["group"] == "stored" and screen.status == "waiting for you: 1 tool call"
    assert [m.kind for m in screen.history] == ["user", "assistant"]
    controller.decide(call.id, "approve")
    assert (await controller.wait()).status == "completed" and refunds == [(42, 9.5)]


async def test_a_second_view_follows_a_decision_made_in_the_first_and_a_late_click_says_so() -> None:
    store = MemoryStore()
    one, _ = await controller_for(make_agent(store), "c-two-views")
    one.send(UserMessage("two refunds"))
    await one.wait()
    other, screen = await controller_for(make_agent(store), "c-two-views")  # a second view
    first, second = other.board.waiting
    one.decide(first.id, "deny", "no")  # decided in the first view: only the second call waits now
    assert (await one.wait()).status == "paused"
    await settle()
    assert screen.rows[first.id]["status"] == "denied"  # the other view followed, without a click
    assert [c.id for c in other.board.waiting] == [second.id]
    other.decide(first.id, "approve")  # a late click on the decided call
    assert not screen.error and screen.note.startswith("refund was already denied by ")
    assert "your decision was not sent" in screen.note and other.handle is None
    assert screen.rows[second.id]["status"] == "waits" and refunds == []
    other.decide(second.id, "approve")
    result = await other.wait()
    assert refunds == [(2, 7.0)] and result.output == "The tool said: denied by the user: no | refunded 7.0 on order 2"
    await settle()
    assert one.board.calls[second.id].status == "done"  # and the first view followed the second's run


# ----------------------------------------------------------------------------------- the queue
async def test_messages_sent_during_a_run_are_queued_then_run_one_each_in_order() -> None:
    controller, screen = await controller_for(make_agent(), "c-queue")
    controller.send(UserMessage("slow first"))
    await until_running(controller)
    assert controller.send(UserMessage("second")) is False and controller.send(UserMessage("third")) is False
    assert screen.queue == ["second", "third"] and controller.queue.texts == ["second", "third"]
    assert screen.note == "2 messages queued: sent when this run ends (one run each)"
    controller.stop()
    await controller.wait()
    assert controller.queue.on_hold and screen.queue == ["second", "third"]  # Stop: on hold
    assert "on hold" in screen.note
    assert controller.send() is True  # Send with an empty box
    result = await controller.wait()
    assert screen.sent == ["slow first", "second", "third"] and screen.queue == []
    assert result.output == "You said: third" and screen.note == ""


async def test_a_queued_message_waits_for_the_decisions() -> None:
    controller, screen = await controller_for(make_agent(), "c-queue-wait")
    controller.send(UserMessage("refund"))
    await controller.wait()
    assert controller.busy and controller.send(UserMessage("and then hello")) is False
    assert screen.note == "1 message queued: sent after you decide the waiting tool calls"
    assert (await controller.wait()).status == "paused"  # not sent by itself
    controller.decide(controller.board.waiting[0].id, "approve")
    result = await controller.wait()
    assert [m.kind for m in result.messages] == ["user", "assistant", "tool-result", "assistant", "user", "assistant"]
    assert result.output == "You said: and then hello" and refunds == [(42, 9.5)]


async def test_a_queued_message_that_cannot_start_goes_back_on_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent()
    controller, screen = await controller_for(agent, "c-queue-refused")
    controller.send(UserMessage("slow"))
    await until_running(controller)
    controller.send(UserMessage("second"))
    original = agent.start

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("cannot start now")

    monkeypatch.setattr(agent, "start", refuse)
    controller.stop()
    await controller.wait()
    assert controller.queue.on_hold  # the run was stopped
    assert controller.send() is False  # Send: the queue goes on, but its first message cannot start
    assert screen.error and screen.status == "could not send the queued message: RuntimeError: cannot start now"
    assert controller.queue.texts == ["second"] and screen.queue == ["second"]
    monkeypatch.setattr(agent, "start", original)
    assert controller.send() is True
    assert (await controller.wait()).output == "You said: second"


async def test_clear_queue_drops_the_messages_and_says_so() -> None:
    controller, screen = await controller_for(make_agent(), "c-clear")
    controller.send(UserMessage("slow"))
    await until_running(controller)
    controller.send(UserMessage("two"))
    controller.send(UserMessage("three"))
    assert controller.clear_queue() == ["two", "three"]
    assert screen.queue == [] and screen.status == "dropped 2 queued messages (not sent)"
    controller.stop()
    await controller.wait()
    assert screen.sent == ["slow"]


# ----------------------------------------------------------------------------------- threads
async def test_schedule_from_another_thread_runs_on_the_loop() -> None:
    controller, screen = await controller_for(make_agent(), "c-thread")
    ran: list[str] = []

    def work() -> None:
        ran.append(threading.current_thread().name)
        raise ValueError("boom")

    worker = threading.Thread(target=controller.schedule, args=(work,), name="subshell")
    worker.start()
    worker.join(5)
    for _ in range(50):
        if ran:
            break
        await asyncio.sleep(0.01)
    assert ran == [threading.main_thread().name]
    assert screen.error and screen.status == "ValueError: boom"  # shown, not lost


def test_the_queue_the_calls_and_the_controller_never_import_ipywidgets() -> None:
    code = ("import sys, nbagent.widgets._queue, nbagent.widgets._calls, nbagent.widgets._controller, "
            "nbagent.widgets._follow, nbagent.widgets._tally, nbagent.widgets._transcript; "
            "assert 'ipywidgets' not in sys.modules, 'ipywidgets was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_decisions_name_the_shown_calls() -> None:
    from nbagent.widgets._calls import DecisionBatch

    batch = DecisionBatch()
    a, b = PendingCall("a", "refund", {"order": 1}), PendingCall("b", "refund", {"order": 2})
    c = PendingCall("c", "ask_user", {"question": "?"}, reason="client")
    assert all(batch.show(p) for p in (a, b, c))
    assert batch.decide("nope", "approve") == [] and batch.take() is None
    assert batch.decide("a", "always") == ["a", "b"]  # every shown approval of the tool
    assert not batch.show(a)  # decided while the run was still going: the decision stays
    assert batch.decide("c", "result", "blue") == ["c"]
    decisions = batch.take()
    assert isinstance(decisions, Decisions) and not batch
    assert [(d.call_id, d.action) for d in decisions.items] == [("a", "approve"), ("b", "approve"), ("c", "result")]
    assert decisions.items[0].shown is a and decisions.always_allowed == ("refund",)
    assert decisions.items[2].value == "blue" and batch.shown == {}
