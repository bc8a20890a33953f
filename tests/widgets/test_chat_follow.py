"""A view stays true to its thread when the thread moves on without it: a resume from code or from
another view, a run elsewhere while the person types, another process that decided first, a
blocking tool that outlives its stopped run, the footer's numbers, and a waiting call whose tool is
not registered here. A `ChatController` reports to the `Screen` of test_chat_controller; real runs
of the shipped fakes on a `MemoryStore`."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from nbagent import Agent, tool
from nbagent.messages import Message, UserMessage
from nbagent.models import FunctionModel, tool_call
from nbagent.store.memory import MemoryStore
from nbagent.widgets._controller import ChatController
from tests.widgets.test_chat_controller import Screen, controller_for, make_agent, refunds, settle, until_running


@pytest.fixture(autouse=True)
def _clear() -> None:
    refunds.clear()


async def paused_view(thread: str, store: MemoryStore | None = None,
                      prompt: str = "refund please") -> tuple[Agent, ChatController, Screen]:
    agent = make_agent(store)
    controller, screen = await controller_for(agent, thread)
    controller.send(UserMessage(prompt))
    assert (await controller.wait()).status == "paused"
    return agent, controller, screen


# -------------------------------------------------------------------------- a resume from elsewhere
async def test_a_resume_from_code_updates_the_view_and_a_late_click_says_who_decided() -> None:
    agent, view, screen = await paused_view("f-code")
    [call] = view.board.waiting
    result = await agent.resume(thread="f-code", approve=[call.id], decided_by="ada")  # a later cell
    assert result.status == "completed"
    await settle()
    row = screen.rows[call.id]
    assert row["status"] == "done" and row["result"] == "refunded 9.5 on order 42"
    assert view.board.waiting == [] and not screen.bulk
    assert screen.answers[-1] == "The tool said: refunded 9.5 on order 42"  # the answer shows up too
    assert screen.status == "" and not view.busy
    assert screen.conversation == result.messages  # the saved copy follows
    view.decide(call.id, "approve")  # the button that was on screen a moment ago
    assert not screen.error and view.handle is None and refunds == [(42, 9.5)]  # nothing ran twice
    assert screen.note.startswith("refund was already approved by ada at ")
    assert "your decision was not sent" in screen.note


async def test_resume_sync_in_a_cell_updates_the_view_once_the_cell_returns() -> None:
    agent, view, screen = await paused_view("f-sync")
    [call] = view.board.waiting
    # a blocking cell: nbagent runs it on its private thread; the view hears it on its own loop
    result = await asyncio.to_thread(lambda: agent.resume_sync(thread="f-sync", deny={call.id: "not today"}))
    assert result.output == "The tool said: denied by the user: not today"
    await settle()
    assert screen.rows[call.id]["status"] == "denied" and view.board.waiting == []


async def test_a_message_sent_while_a_run_goes_on_elsewhere_waits_for_it() -> None:
    gate = asyncio.Event()

    @tool
    async def wait_for_gate() -> str:
        """Waits until the test opens the gate."""
        await gate.wait()
        return "opened"

    def answer(messages: list[Message], request: Any) -> Any:
        last = messages[-1]
        if last.kind == "user":
            return tool_call("wait_for_gate") if last.content == "gate" else f"You said: {last.content}"
        return "The tool said: " + last.content.split("\n")[0]  # type: ignore[union-attr]  # (a denial: its reason)

    agent = Agent(FunctionModel(answer), tools=[wait_for_gate], store=MemoryStore())
    view, screen = await controller_for(agent, "f-busy")
    handle = agent.start("gate", thread="f-busy")  # from code, not from the view
    await until_running(view)
    assert screen.sent == ["gate"] and "started in code or in another view" in screen.status
    assert view.busy and view.send(UserMessage("hello")) is False  # queued: the thread is busy
    assert screen.queue == ["hello"] and "sent when this run ends" in screen.note
    gate.set()
    await handle
    await settle()
    assert screen.rows[next(iter(screen.rows))]["status"] == "done"
    result = await view.wait()  # the queued message went out once the other run ended
    assert result is not None and result.output == "You said: hello" and screen.sent == ["gate", "hello"]


async def test_a_decision_made_here_but_overtaken_elsewhere_is_dropped_and_said(
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent, view, screen = await paused_view("f-overtaken", prompt="two refunds")
    first, second = view.board.waiting
    late: list[tuple[Any, ...]] = []
    schedule = view.schedule

    def slow_mail(fn: Any, *args: Any) -> None:  # the run's notices reach the view late (a busy kernel)
        if fn == view.follower.on_notice and args[1].kind != "run-started":
            late.append((fn, *args))
        else:
            schedule(fn, *args)

    monkeypatch.setattr(view, "schedule", slow_mail)
    await agent.resume(thread="f-overtaken", approve=[first.id, second.id], decided_by="ada")  # from code
    await settle()
    assert view.follower.foreign is not None and [c.id for c in view.board.waiting] == [first.id, second.id]
    view.decide(second.id, "deny", "no")  # the person clicks before the news arrives: kept, not sent
    assert second.id in view.board.decisions and view.handle is None
    for fn, *args in late:
        fn(*args)
    assert view.board.decisions.take() is None  # dropped, not sent as a second resume
    assert screen.rows[second.id]["status"] == "done" and sorted(refunds) == [(1, 5.0), (2, 7.0)]
    assert screen.note == ("refund was already decided elsewhere (in code or another view): it is running now; "
                           "your decision was not sent")
    assert view.handle is None and not view.busy


async def test_another_process_decided_first_a_click_reads_the_store_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import nbagent._run.loop

    store = MemoryStore()
    _, view, screen = await paused_view("f-process", store, prompt="two refunds")
    first, _ = view.board.waiting
    with monkeypatch.context() as elsewhere:  # another process: its runs are not heard here
        elsewhere.setattr(nbagent._run.loop, "publish", lambda *args: None)
        await make_agent(store).resume(thread="f-process", deny={first.id: "no"}, decided_by="bob")
    await settle()
    assert screen.rows[first.id]["status"] == "waits"  # this view cannot know yet
    view.decide_all("approve")  # both, in one resume: refused, one of them is decided
    result = await view.wait()
    assert screen.rows[first.id]["status"] == "denied"  # the store's word
    assert "refund was already denied by bob at " in screen.note and "went out again" in screen.note
    assert not screen.error and "UnknownCallError" not in screen.status + screen.note
    assert result is not None and result.status == "completed" and refunds == [(2, 7.0)]  # the other one ran


async def test_a_message_refused_because_another_process_left_calls_waiting_is_queued_after_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import nbagent._run.loop

    store = MemoryStore()
    view, screen = await controller_for(make_agent(store), "f-pending")
    with monkeypatch.context() as elsewhere:
        elsewhere.setattr(nbagent._run.loop, "publish", lambda *args: None)
        await make_agent(store).run("refund elsewhere", thread="f-pending")
    view.send(UserMessage("hello"))
    await view.wait()
    assert screen.sent == [] and screen.queue == ["hello"]  # not in the conversation: back in the queue
    assert "tool calls waiting" in screen.note and "queued and sent after" in screen.note
    [call] = view.board.waiting  # shown from the store, with its buttons
    view.decide(call.id, "approve")
    result = await view.wait()
    assert result is not None and result.output == "You said: hello" and screen.sent == ["hello"]


async def test_a_message_to_a_thread_another_process_is_running_goes_back_to_the_queue_on_hold() -> None:
    import socket

    from nbagent.store.meta import ThreadMeta

    store = MemoryStore()
    await make_agent(store).run("hello", thread="f-running")
    view, screen = await controller_for(make_agent(store), "f-running")
    loaded = await store.load("f-running")
    assert loaded is not None
    other = ThreadMeta(status="running", run_id="run_elsewhere", owner={"host": socket.gethostname(), "pid": 1})
    await store.append("f-running", version=loaded.version, step=loaded.step, meta=other)  # pid 1 is alive
    view.send(UserMessage("again"))
    await view.wait()
    assert screen.error and screen.status.startswith("not sent: thread 'f-running' is being run right now")
    assert screen.sent == [] and screen.queue == ["again"] and view.queue.on_hold


# ----------------------------------------------------------------- a blocking tool outlives its run
async def test_stop_during_a_blocking_tool_says_it_still_runs_then_shows_how_it_ended() -> None:
    started, release = threading.Event(), threading.Event()
    booked: list[str] = []

    @tool
    def book(city: str) -> str:
        """Books a table (a blocking function: its thread cannot be interrupted)."""
        started.set()
        release.wait(10)
        booked.append(city)
        return f"booked in {city}"

    def answer(messages: list[Message], request: Any) -> Any:
        return tool_call("book", city="Rome") if messages[-1].kind == "user" else "after"

    agent = Agent(FunctionModel(answer), tools=[book], store=MemoryStore())
    view, screen = await controller_for(agent, "f-blocking")
    _, other_screen = await controller_for(agent, "f-blocking")  # a second view follows it too
    view.send(UserMessage("book"))
    await asyncio.to_thread(started.wait, 5)
    view.stop()
    result = await view.wait()
    assert result is not None and result.status == "cancelled"
    [row] = screen.rows.values()
    assert row["status"] == "still running" and "cannot be interrupted and is still running" in row["result"]
    assert "book cannot be interrupted" in screen.status and "still running" in screen.status
    await settle()
    assert [r["status"] for r in other_screen.rows.values()] == ["still running"]
    release.set()
    for _ in range(300):
        await asyncio.sleep(0.01)
        if row["status"] != "still running":
            break
    assert row["status"] == "done after stop" and row["result"] == "booked in Rome" and booked == ["Rome"]
    assert "book finished after the stop" in screen.note and "not known" in screen.note
    assert [r["status"] for r in other_screen.rows.values()] == ["done after stop"]
    stored = await agent.store.load("f-blocking")
    assert stored is not None and [e.status for e in stored.ledger.values()] == ["finished"]


# --------------------------------------------------------------------------------------- the footer
async def test_the_footer_counts_this_turn_across_its_resumes_and_the_whole_thread() -> None:
    store = MemoryStore()
    await make_agent(store).run("hello", thread="f-usage")  # one call before the view opened
    view, _ = await controller_for(make_agent(store), "f-usage")
    tally = view.tally
    assert (tally.turn.requests, tally.thread.requests, tally.running) == (1, 1, False)
    view.send(UserMessage("refund please"))
    assert (tally.turn.requests, tally.running) == (0, True)  # a new message: the turn starts at 0 at once
    await view.wait()
    assert (tally.turn.requests, tally.thread.requests, tally.run.requests) == (1, 2, 1)
    view.decide(view.board.waiting[0].id, "approve")
    await view.wait()
    # the resume after Approve continues the turn (and is a run of its own for the budget)
    assert (tally.turn.requests, tally.thread.requests, tally.run.requests) == (2, 3, 1)
    view.send(UserMessage("hello again"))
    await view.wait()
    assert (tally.turn.requests, tally.thread.requests) == (1, 4)
    reopened, _ = await controller_for(make_agent(store), "f-usage")  # counted the same from the store
    assert (reopened.tally.turn.requests, reopened.tally.thread.requests) == (1, 4)


def test_the_footer_line_says_what_it_counts() -> None:
    from nbagent.usage import ModelCallUsage
    from nbagent.widgets._tally import UsageTally, footer_html

    tally = UsageTally()
    assert footer_html(tally) == ""  # nothing yet
    row = ModelCallUsage("run_1", "t", 1, time.time(), "test", "m", input_tokens=100, output_tokens=20,
                         cost_total=0.5)
    tally.loaded([row], turn_from_step=0)
    tally.run_started(new_turn=True)
    html = footer_html(tally, token_budget=1000)
    assert "this turn (running): 0 model calls" in html and "thread: 1 model call · 120 tokens · cost $0.500" in html
    assert "per run: token budget 0 / 1,000 (0%)" in html
    tally.add(row)  # reported twice (e.g. by the run and by a notice): counted once
    tally.add(ModelCallUsage("run_2", "t", 2, time.time(), "test", "m", input_tokens=10, output_tokens=5))
    tally.run_ended()
    html = footer_html(tally, token_budget=1000)
    assert "last turn: 1 model call | tokens in 10 · cached 0 · out 5 | cost n/a" in html
    assert "thread: 2 model calls · 135 tokens · cost $0.500" in html and "token budget 15 / 1,000" in html


# -------------------------------------------------------------------- a tool that is not registered
async def test_a_waiting_call_whose_tool_is_not_registered_offers_no_approve_and_says_why() -> None:
    store = MemoryStore()
    await make_agent(store).run("two refunds", thread="f-missing")
    restarted = Agent(FunctionModel(lambda m, r: "ok"), store=store)  # the tool's cell was not run again
    view, screen = await controller_for(restarted, "f-missing")
    first, second = view.board.waiting
    assert "refund is not a tool of this agent in this kernel" in screen.rows[first.id]["unavailable"]
    assert "Deny answers the model without it" in screen.rows[first.id]["unavailable"]
    assert view.board.approvals == [] and not screen.bulk  # no Approve all for calls that cannot run
    view.decide(first.id, "deny", "tool gone")
    view.decide(second.id, "deny")
    result = await view.wait()
    assert result is not None and [m.status for m in result.messages if m.kind == "tool-result"] == ["denied"] * 2
