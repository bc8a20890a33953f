"""The chat view without a kernel: build views, drive runs with the shipped fake models, click
buttons with ``Button.click()``, and assert decisions, rows, traits and widget traffic."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pytest
from ipywidgets.widgets.widget import _instances

from nbagent import Agent, Decisions, PendingCall, Tool, tool
from nbagent.messages import Message, ToolResultMessage
from nbagent.models import FunctionModel, tool_call
from nbagent.models.base import ReasoningText
from nbagent.store.memory import MemoryStore
from nbagent.widgets import ChatView, StreamText
from nbagent.widgets.stream import ThinkingText, Throttle

from .test_widgets_static import assert_inert


# ----------------------------------------------------------------------------------- helpers
async def settle(turns: int = 10) -> None:
    """Let callbacks scheduled with call_soon_threadsafe (the button handlers' work) run."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def click(button: widgets.Button) -> None:
    button.click()
    await settle()


def trailing_results(messages: list[Message]) -> list[ToolResultMessage]:
    out = []
    for m in reversed(messages):
        if m.kind != "tool-result":
            break
        out.append(m)
    return list(reversed(out))  # type: ignore[arg-type]


def echo_answer(messages: list[Message], request: Any) -> Any:
    """Calls tools named in the user's message; then echoes the tool results in its answer."""
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
    # (the first line of each result: for a denial, the reason; the lines after it tell the model not to retry)
    return "The tool said: " + " | ".join(r.content.split("\n")[0] for r in trailing_results(messages))


refund_calls: list[tuple[int, float]] = []


@tool(requires_approval=True)
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    refund_calls.append((order, amount))
    return f"refunded {amount} on order {order}"


@tool
async def slow(seconds: float) -> str:
    """Wait a while."""
    await asyncio.sleep(seconds)
    return "slept"


ask_user = Tool.client("ask_user", "Ask the person a question.",
                       {"type": "object", "properties": {"question": {"type": "string"}},
                        "required": ["question"]})


def make_agent(store: MemoryStore | None = None, **kwargs: Any) -> Agent:
    return Agent(FunctionModel(echo_answer), tools=[refund, slow, ask_user], store=store or MemoryStore(),
                 **kwargs)


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    refund_calls.clear()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[widgets.Widget, dict[str, Any], int]]:
    """Every comm message the widgets would send: (widget, message, bytes)."""
    log: list[tuple[widgets.Widget, dict[str, Any], int]] = []
    original = widgets.Widget._send

    def record(self: widgets.Widget, msg: dict[str, Any], buffers: Any = None) -> None:
        size = len(json.dumps(msg, default=str)) + sum(len(b) for b in buffers or ())
        log.append((self, msg, size))
        original(self, msg, buffers)

    monkeypatch.setattr(widgets.Widget, "_send", record)
    return log


def all_widgets(root: widgets.Widget) -> list[widgets.Widget]:
    """The root and every widget its state refers to (children, layouts, ...)."""
    seen: dict[str, widgets.Widget] = {}
    todo = [root]
    while todo:
        w = todo.pop()
        if w.model_id in seen:
            continue
        seen[w.model_id] = w
        text = json.dumps(w.get_state(), default=str)
        for ref in set(__import__("re").findall(r"IPY_MODEL_([0-9a-f]+)", text)):
            if ref in _instances and ref not in seen:
                todo.append(_instances[ref])
    return list(seen.values())


def view_text(view: ChatView) -> str:
    """Everything the view shows as text/HTML (history, streams, rows, status, footer)."""
    parts = []
    for w in all_widgets(view):
        state = w.get_state()
        for key in ("value", "text", "html", "description"):
            if isinstance(state.get(key), str):
                parts.append(state[key])
    return "\n".join(parts)


async def ask(view: ChatView, prompt: str) -> Any:
    view.message_box.value = prompt
    await click(view.buttons["Send"])
    return await view.wait()


def press_enter(box: widgets.Text) -> None:
    """What the front end sends when Enter is pressed in a text box."""
    box._handle_msg({"content": {"data": {"method": "custom", "content": {"event": "submit"}}}, "buffers": []})


def waiting_rows(view: ChatView) -> list[Any]:
    return [r for r in view.rows.values() if r.status in ("needs approval", "needs answer") and not r.decided]


# ----------------------------------------------------------------------------------- streaming
async def test_streamed_answer_ends_as_sanitized_markdown(sent: list[Any]) -> None:
    async def stream(messages: list[Message], request: Any) -> Any:
        for piece in ["Hello ", "**wor", "ld** ", "<img src=x onerror=alert(1)>", " `code`"]:
            await asyncio.sleep(0.001)
            yield piece

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore())
    view = agent.chat(thread="t-stream")
    assert isinstance(view, ChatView)
    result = await ask(view, "hi")
    assert result.status == "completed"
    [st] = [w for w in all_widgets(view) if isinstance(w, StreamText)]
    assert st.text == "Hello **world** <img src=x onerror=alert(1)> `code`"
    assert "<strong>world</strong>" in st.html and "<code>code</code>" in st.html
    assert "<img" not in st.html and "&lt;img src=x onerror=alert(1)&gt;" in st.html
    appends = [m["content"]["a"] for w, m, _ in sent
               if w is st and m.get("method") == "custom" and "a" in m["content"]]
    # while streaming only new text is sent (what is not sent yet arrives with the final sync)
    assert appends and st.text.startswith("".join(appends))
    assert "you" in view_text(view) and "hi" in view_text(view)


async def test_enter_in_message_box_sends() -> None:
    view = make_agent().chat(thread="t-enter")
    await view.wait_loaded()
    view.message_box.value = "hello there"
    press_enter(view.message_box)
    await settle()
    result = await view.wait()
    assert result is not None and result.output == "You said: hello there"
    assert view.message_box.value == ""
    # the message box is the last text box of the view
    boxes = [w for w in all_widgets(view) if isinstance(w, (widgets.Text, widgets.Textarea))]
    order = [w for w in _walk(view) if w in boxes]
    assert order[-1] is view.message_box


async def test_the_views_own_widgets_have_read_only_public_names() -> None:
    view = make_agent().chat(thread="t-names")
    await view.wait_loaded()
    assert list(view.buttons) == ["Send", "Stop", "Approve all", "Deny all", "Confirm deny all", "Cancel",
                                  "Clear queue"]
    assert all(isinstance(b, widgets.Button) and b.description == label for label, b in view.buttons.items())
    shown = _walk(view)
    for w in (*view.buttons.values(), view.message_box, view.status_line, view.footer, view.history,
              view.run_log, view.queue_box, view.deny_all_box, view.deny_all_reason):
        assert w in shown
    with pytest.raises(TypeError):
        view.buttons["Send"] = widgets.Button()  # type: ignore[index]
    with pytest.raises(AttributeError):
        view.message_box = widgets.Text()  # type: ignore[misc]


def _walk(w: widgets.Widget) -> list[widgets.Widget]:
    out = [w]
    for child in getattr(w, "children", ()):
        out.extend(_walk(child))
    return out


def test_throttle_coalesces_to_20_per_second_with_fake_clock() -> None:
    now = [0.0]
    timers: list[list[Any]] = []

    class Handle:
        def __init__(self, entry: list[Any]) -> None:
            self.entry = entry

        def cancel(self) -> None:
            self.entry[2] = True

    def call_later(delay: float, fn: Any) -> Handle:
        entry = [now[0] + delay, fn, False]
        timers.append(entry)
        return Handle(entry)

    def advance(dt: float) -> None:
        now[0] += dt
        for entry in sorted(list(timers), key=lambda e: e[0]):
            if entry[0] <= now[0] + 1e-12:
                timers.remove(entry)
                if not entry[2]:
                    entry[1]()

    st = StreamText(clock=lambda: now[0], call_later=call_later)
    sent: list[tuple[float, str]] = []
    st.send = lambda content, buffers=None: sent.append((now[0], content["a"]))  # type: ignore[method-assign]
    pieces = [f"tok{i} " for i in range(4000)]
    for piece in pieces:  # 4,000 deltas at 1,000 per second: 4 s of streaming
        st.append(piece)
        advance(0.001)
    advance(1.0)
    assert "".join(a for _, a in sent) == "".join(pieces)
    assert len(sent) <= 4.0 / 0.05 + 2
    # no second has more than 20 (+1 for the leading flush) updates
    per_second: dict[int, int] = {}
    for t, _ in sent:
        per_second[int(t)] = per_second.get(int(t), 0) + 1
    assert max(per_second.values()) <= 21
    st.finish()
    assert st.text == "".join(pieces) and st.html.startswith("<p>tok0")


def test_throttle_first_poke_is_immediate_then_spaced() -> None:
    calls: list[float] = []
    scheduled: list[float] = []
    now = [10.0]
    t = Throttle(lambda: calls.append(now[0]), 0.05, clock=lambda: now[0],
                 call_later=lambda d, fn: (scheduled.append(d), fn)[1])
    t.poke()
    assert scheduled == [0.0]


async def test_streaming_rate_is_at_most_20_updates_per_second_on_a_real_loop(sent: list[Any]) -> None:
    async def stream(messages: list[Message], request: Any) -> Any:
        for i in range(600):
            await asyncio.sleep(0.002)
            yield f"w{i} "

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore())
    view = agent.chat(thread="t-rate")
    await view.wait_loaded()
    t0 = time.monotonic()
    await ask(view, "go")
    elapsed = time.monotonic() - t0
    [st] = [w for w in all_widgets(view) if isinstance(w, StreamText)]
    custom = [m for w, m, _ in sent if w is st and m.get("method") == "custom"]
    assert 2 <= len(custom) <= elapsed * 20 + 2
    assert st.text == "".join(f"w{i} " for i in range(600))


async def test_model_retry_clears_partial_text() -> None:
    from nbagent import Retry
    from nbagent.exceptions import error_for_status

    attempts = [0]

    async def stream(messages: list[Message], request: Any) -> Any:
        attempts[0] += 1
        yield "partial "
        if attempts[0] == 1:
            raise error_for_status(503, "overloaded")
        yield "final answer"

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore(),
                  retry=Retry(attempts=2, initial_delay=0.0, jitter=0.0))
    view = agent.chat(thread="t-retry")
    result = await ask(view, "hi")
    assert result.status == "completed"
    [st] = [w for w in all_widgets(view) if isinstance(w, StreamText)]
    assert st.text == "partial final answer"


# ----------------------------------------------------------------------------------- approvals
async def test_a_call_that_ran_while_another_waits_is_shown_above_it() -> None:
    """06_mcp_tools: the model asked for add_note (needs approval) and list_notes (read-only) in
    one answer; list_notes ran at once and said "(no notes yet)". Its row sat below add_note's
    later "saved" row, which read as if the save had failed. Rows read in the order calls ran."""
    notes: list[str] = []

    @tool(requires_approval=True)
    def add_note(title: str) -> str:
        """Add a note."""
        notes.append(title)
        return f"saved {title!r}"

    @tool
    def list_notes() -> str:
        """List the notes."""
        return ", ".join(notes) or "(no notes yet)"

    def answer(messages: list[Message], request: Any) -> Any:
        if messages[-1].kind == "user":
            return [tool_call("add_note", title="milk"), tool_call("list_notes")]
        return "ok"

    agent = Agent(FunctionModel(answer), tools=[add_note, list_notes], store=MemoryStore())
    view = agent.chat(thread="t-order")
    assert (await ask(view, "save milk")).status == "paused"
    [table] = [w for w in all_widgets(view) if w.__class__.__name__ == "ToolTable"]
    names = [r.name for r in table.children[1:]]
    assert names == ["list_notes", "add_note"], names  # the call that ran first is first
    [row] = waiting_rows(view)
    await click(row.buttons["Approve"])
    assert (await view.wait()).status == "completed"
    assert [(r.name, r.status) for r in table.children[1:]] == [("list_notes", "done"), ("add_note", "done")]


async def test_approval_row_shows_full_args_and_approve_runs_the_tool() -> None:
    view = make_agent().chat(thread="t-approve")
    result = await ask(view, "refund please")
    assert result.status == "paused"
    [row] = waiting_rows(view)
    assert row.status == "needs approval"
    assert "&quot;order&quot;: 42" in row.html.value and "&quot;amount&quot;: 9.5" in row.html.value
    assert "<details>" not in row.html.value.split("needs approval")[0]  # full arguments, not truncated
    assert {"Approve", "Deny", "Edit", "Always allow", "Confirm deny", "Approve edited"} <= set(row.buttons)
    assert row.buttons["Always allow"].description == "Always allow refund"
    assert "waiting for you: 1 tool call" in view.status_line.value
    await click(row.buttons["Approve"])
    assert row.decided and row.buttons["Approve"].disabled
    result = await view.wait()
    assert result.status == "completed"
    assert result.output == "The tool said: refunded 9.5 on order 42"
    assert refund_calls == [(42, 9.5)]
    assert row.status == "done" and "refunded 9.5" in row.html.value
    assert "The tool said: refunded 9.5 on order 42" in view_text(view)


async def test_decisions_carry_the_pending_call_objects_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent()
    view = agent.chat(thread="t-bind")
    await ask(view, "two refunds")
    rows = waiting_rows(view)
    assert len(rows) == 2
    shown = {r.call_id: r.pending for r in rows}
    starts: list[Decisions] = []
    original = agent.start

    def spy(*args: Any, **kwargs: Any) -> Any:
        starts.append(kwargs.get("resume"))
        return original(*args, **kwargs)

    monkeypatch.setattr(agent, "start", spy)
    view.rows[rows[0].call_id].deny_reason.value = "no"
    await click(rows[0].buttons["Deny"])
    await click(rows[0].buttons["Confirm deny"])
    await view.wait()
    [resume] = starts
    [denied] = resume.items
    assert (denied.action, denied.call_id, denied.reason) == ("deny", rows[0].call_id, "no")
    assert denied.shown == shown[rows[0].call_id]
    assert denied.shown is shown[rows[0].call_id]
    await click(rows[1].buttons["Approve"])
    await view.wait()
    [approved] = starts[1].items
    assert approved.action == "approve"
    assert approved.shown == shown[rows[1].call_id]  # the same call, re-shown after the deny run
    assert isinstance(approved.shown, PendingCall)
    assert view.result.status == "completed"
    assert "denied by the user: no" in view.result.output


async def test_deny_with_a_reason_reaches_the_model() -> None:
    view = make_agent().chat(thread="t-deny")
    await ask(view, "refund it")
    [row] = waiting_rows(view)
    deny_box = row.buttons["Confirm deny"]
    await click(row.buttons["Deny"])
    assert row.deny_reason.layout.display != "none" or deny_box.layout.display != "none"
    row.deny_reason.value = "too expensive <b>really</b>"
    await click(row.buttons["Confirm deny"])
    result = await view.wait()
    assert result.status == "completed"
    assert result.output == "The tool said: denied by the user: too expensive <b>really</b>"
    assert refund_calls == []
    assert row.status == "denied"
    assert "too expensive &lt;b&gt;really&lt;/b&gt;" in row.html.value


async def test_deny_and_edit_put_the_cursor_in_their_box() -> None:
    """Deny opens its reason box with the focus in it (Enter then confirms), Edit its editor,
    Deny all its reason box: no extra click before typing."""
    view = make_agent().chat(thread="t-focus")
    await ask(view, "two refunds")
    row = waiting_rows(view)[0]
    focused: list[Any] = []
    for box in (row.deny_reason, row.edit_area, view.deny_all_reason):
        box.send = lambda msg, box=box: focused.append((box, msg))  # what focus() sends the browser
    await click(row.buttons["Deny"])
    assert focused == [(row.deny_reason, {"do": "focus"})]
    await click(row.buttons["Edit"])
    assert focused[-1] == (row.edit_area, {"do": "focus"})
    await click(row.buttons["Edit"])  # closing takes no focus
    assert len(focused) == 2
    await click(view.buttons["Deny all"])
    assert focused[-1] == (view.deny_all_reason, {"do": "focus"})


async def test_edit_validates_inline_then_approves_edited_args() -> None:
    view = make_agent().chat(thread="t-edit")
    await ask(view, "refund")
    [row] = waiting_rows(view)
    await click(row.buttons["Edit"])
    assert json.loads(row.edit_area.value) == {"order": 42, "amount": 9.5}
    row.edit_area.value = "{not json"
    await click(row.buttons["Approve edited"])
    assert "not valid JSON" in row.edit_error.value and not row.decided
    row.edit_area.value = '{"order": 42, "amount": "lots"}'
    await click(row.buttons["Approve edited"])
    assert "amount" in row.edit_error.value and not row.decided
    assert view.handle is None
    row.edit_area.value = '{"order": 42, "amount": 1.25}'
    await click(row.buttons["Approve edited"])
    result = await view.wait()
    assert refund_calls == [(42, 1.25)]
    assert result.status == "completed" and "refunded 1.25 on order 42" in result.output


async def test_an_open_changed_edit_keeps_the_plain_approve_from_dropping_it() -> None:
    """Edit, change the arguments, then reach for the green Approve: it is disabled (and says
    why) while the changed editor is open, so the call never runs with the arguments the edit
    replaced; closing the editor gives Approve back for the call as shown."""
    view = make_agent().chat(thread="t-edit-guard")
    await ask(view, "refund")
    [row] = waiting_rows(view)
    approve, always = row.buttons["Approve"], row.buttons["Always allow"]
    await click(row.buttons["Edit"])
    assert not approve.disabled  # open, unchanged
    row.edit_area.value = '{"order": 42, "amount": 1.25}'
    assert approve.disabled and always.disabled and "Approve edited" in approve.tooltip
    await click(approve)
    assert not row.decided and refund_calls == []
    await click(row.buttons["Edit"])  # closed: Approve is for the call as shown again
    assert not approve.disabled and approve.tooltip == "run this call with the arguments shown"
    await click(row.buttons["Edit"])
    assert approve.disabled  # the change is still in the editor
    await click(row.buttons["Approve edited"])
    result = await view.wait()
    assert refund_calls == [(42, 1.25)] and result.status == "completed"
    edited = next(m for m in result.messages if m.kind == "tool-result")
    assert edited.model_text().startswith(  # type: ignore[union-attr]
        '[The user changed the arguments before approving; the tool ran with: {"order": 42, "amount": 1.25}]')


async def test_approve_edited_with_nothing_changed_approves_the_call_as_asked() -> None:
    """Opening Edit and approving without a change (re-indented JSON included) is an approval:
    the result says "approved", not "edited" with the same arguments; the diff says nothing
    changed only once the text differs."""
    view = make_agent().chat(thread="t-edit-same")
    await ask(view, "refund")
    [row] = waiting_rows(view)
    await click(row.buttons["Edit"])
    row.edit_area.value = '{"amount": 9.5,   "order": 42}'
    assert "no change" in row.edit_diff.value
    await click(row.buttons["Approve edited"])
    result = await view.wait()
    [ran] = [m for m in result.messages if m.kind == "tool-result"]
    assert refund_calls == [(42, 9.5)] and (ran.decision, ran.edited_args) == ("approved", None)


async def test_always_allow_approves_this_and_later_calls_of_the_tool() -> None:
    view = make_agent().chat(thread="t-always")
    await ask(view, "two refunds")
    rows = waiting_rows(view)
    assert len(rows) == 2
    await click(rows[0].buttons["Always allow"])
    assert all(r.decided for r in rows)
    result = await view.wait()
    assert result.status == "completed" and sorted(refund_calls) == [(1, 5.0), (2, 7.0)]
    result = await ask(view, "refund more")
    assert result.status == "completed"  # no approval asked for this thread any more
    assert refund_calls[-1] == (42, 9.5)


async def test_approve_all_and_deny_all_appear_when_several_wait() -> None:
    view = make_agent().chat(thread="t-all")
    await ask(view, "refund one")
    assert view.buttons["Approve all"].layout.display == "none"
    await click(waiting_rows(view)[0].buttons["Approve"])
    await view.wait()
    await ask(view, "two refunds")
    assert view.buttons["Approve all"].layout.display != "none" and view.buttons["Deny all"].layout.display != "none"
    await click(view.buttons["Deny all"])  # asks for a reason first; an empty reason is allowed
    assert view.deny_all_box.layout.display == "flex" and view.handle is None
    await click(view.buttons["Confirm deny all"])
    result = await view.wait()
    assert result.status == "completed"
    assert result.output.count("denied by the user") == 2
    await ask(view, "two refunds again")
    await click(view.buttons["Approve all"])
    result = await view.wait()
    assert result.output.count("refunded") == 2
    assert view.buttons["Approve all"].layout.display == "none"


async def test_deny_all_asks_for_one_reason_that_reaches_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent()
    view = agent.chat(thread="t-deny-all")
    await ask(view, "two refunds")
    rows = waiting_rows(view)
    assert len(rows) == 2
    # Cancel: nothing decided, the box goes away
    await click(view.buttons["Deny all"])
    assert view.deny_all_box.layout.display == "flex"
    await click(view.buttons["Cancel"])
    assert view.deny_all_box.layout.display == "none" and not any(r.decided for r in rows)
    # the reason box sits at the bulk buttons, before the message box (still the last text box)
    order = [w for w in _walk(view) if isinstance(w, widgets.Text)]
    assert order[-2:] == [view.deny_all_reason, view.message_box]
    starts: list[Any] = []
    original = agent.start
    monkeypatch.setattr(agent, "start", lambda *a, **k: (starts.append(k.get("resume")), original(*a, **k))[1])
    await click(view.buttons["Deny all"])
    view.deny_all_reason.value = "  not <b>today</b>  "
    await click(view.buttons["Confirm deny all"])
    assert all(r.decided for r in rows) and view.deny_all_box.layout.display == "none"
    result = await view.wait()
    assert len(starts) == 1  # one resume for all the calls
    assert {d.call_id: (d.action, d.reason) for d in starts[0].items} == {
        r.call_id: ("deny", "not <b>today</b>") for r in rows}
    assert result.status == "completed" and refund_calls == []
    assert result.output == ("The tool said: denied by the user: not <b>today</b> | "
                             "denied by the user: not <b>today</b>")
    assert all(r.status == "denied" and "not &lt;b&gt;today&lt;/b&gt;" in r.html.value for r in rows)
    assert view.deny_all_reason.value == "" and view.buttons["Approve all"].layout.display == "none"


async def test_client_tool_takes_the_persons_answer() -> None:
    view = make_agent().chat(thread="t-client")
    result = await ask(view, "ask me")
    assert result.status == "paused"
    [row] = waiting_rows(view)
    assert row.status == "needs answer" and set(row.buttons) == {"Submit"}
    box = next(w for w in _walk(row) if isinstance(w, widgets.Text))
    box.value = "blue"
    await click(row.buttons["Submit"])
    result = await view.wait()
    assert result.output == "The tool said: blue"


async def test_handlers_on_another_thread_schedule_onto_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    view = make_agent().chat(thread="t-thread")
    await ask(view, "refund")
    [row] = waiting_rows(view)
    threads: list[str] = []
    original = view.controller.decide

    def spy(*args: Any, **kwargs: Any) -> None:
        threads.append(threading.current_thread().name)
        original(*args, **kwargs)

    monkeypatch.setattr(view.controller, "decide", spy)  # where a row's click ends up
    worker = threading.Thread(target=row.buttons["Approve"].click, name="subshell")
    worker.start()
    worker.join(5)
    await asyncio.sleep(0.05)
    result = await view.wait()
    assert threads == [threading.main_thread().name]  # ran on the loop, not the clicking thread
    assert result.status == "completed"


# ----------------------------------------------------------------------------------- stop, restart, usage
async def test_stop_cancels_a_slow_tool_and_the_thread_stays_usable() -> None:
    view = make_agent().chat(thread="t-stop")
    await view.wait_loaded()
    view.message_box.value = "slow please"
    await click(view.buttons["Send"])
    for _ in range(200):
        if any(r.status == "running" for r in view.rows.values()):
            break
        await asyncio.sleep(0.01)
    [row] = list(view.rows.values())
    assert row.status == "running" and view.buttons["Stop"].layout.display != "none"
    await click(view.buttons["Stop"])
    result = await view.wait()
    assert result.status == "cancelled"
    assert row.status == "cancelled" and "cancelled" in view.status_line.value
    assert view.buttons["Stop"].layout.display == "none"
    result = await ask(view, "hello again")
    assert result.status == "completed" and result.output == "You said: hello again"


async def test_a_stopped_or_cancelled_turn_keeps_its_marker_when_the_view_is_drawn_again() -> None:
    """The live view says how a run ended ("cancelled", "stopped: token_budget"); a view opened
    again on the thread (a re-run cell, a redraw) says it too instead of nothing."""
    @tool
    def look() -> str:
        """Look around."""
        return "nothing"

    agent = Agent(FunctionModel(lambda messages, info: tool_call("look")), tools=[look], store=MemoryStore(),
                  max_steps=2)
    view = agent.chat(thread="t-stopped")
    assert (await ask(view, "look, for ever")).stop_reason == "max_steps"
    assert "stopped: max_steps" in view.status_line.value
    again = agent.chat(thread="t-stopped")
    await again.wait_loaded()
    assert "the last run stopped: max_steps" in again.status_line.value
    view = make_agent().chat(thread="t-cancelled")
    await view.wait_loaded()
    view.message_box.value = "slow please"
    await click(view.buttons["Send"])
    for _ in range(200):
        if any(r.status == "running" for r in view.rows.values()):
            break
        await asyncio.sleep(0.01)
    await click(view.buttons["Stop"])
    assert (await view.wait()).status == "cancelled"
    again = view.agent.chat(thread="t-cancelled")
    await again.wait_loaded()
    assert "the last run was cancelled" in again.status_line.value


async def test_paused_thread_shows_working_buttons_after_a_restart() -> None:
    store = MemoryStore()
    view = make_agent(store).chat(thread="t-restart")
    await ask(view, "refund")
    del view
    # "restart": a new agent and a new view over the same durable store, no RunResult in memory
    view2 = make_agent(store).chat(thread="t-restart")
    await view2.wait_loaded()
    assert "refund" in view2.history.value  # the conversation so far
    [row] = waiting_rows(view2)
    assert "&quot;order&quot;: 42" in row.html.value
    await click(row.buttons["Approve"])
    result = await view2.wait()
    assert result.status == "completed" and refund_calls == [(42, 9.5)]


async def test_footer_shows_tokens_cost_and_budget() -> None:
    view = make_agent(token_budget=1000).chat(thread="t-usage")
    await ask(view, "hello")
    footer = view.footer.value
    assert "tokens in" in footer and "cached 0" in footer and "out 3" in footer
    assert "cost n/a" in footer and "token budget" in footer and "/ 1,000" in footer


async def test_footer_says_when_the_answer_was_cut_off_at_the_output_limit() -> None:
    from nbagent.messages import AssistantMessage
    from nbagent.models import ScriptedModel

    store = MemoryStore()
    cut = AssistantMessage(text="The best region is North, because it", finish_reason="length")
    view = Agent(ScriptedModel([cut, "Short and whole."]), store=store).chat(thread="t-cut")
    result = await ask(view, "Which region?")
    assert result.truncated
    assert "answer cut off at the output token limit" in view.footer.value
    reopened = Agent(ScriptedModel(["x"]), store=store).chat(thread="t-cut")  # as stored, after a restart
    await reopened.wait_loaded()
    assert "answer cut off at the output token limit" in reopened.footer.value
    result = await ask(view, "And in short?")
    assert not result.truncated and "cut off" not in view.footer.value


async def test_stored_history_is_shown_escaped() -> None:
    store = MemoryStore()
    agent = make_agent(store)
    await agent.run("<script>alert(1)</script> hi", thread="t-hist")
    view = make_agent(store).chat(thread="t-hist")
    await view.wait_loaded()
    html = view.history.value
    assert "&lt;script&gt;alert(1)&lt;/script&gt; hi" in html and "<script>" not in html
    assert "last turn: 1 model call" in view.footer.value and "thread: 1 model call" in view.footer.value


# ----------------------------------------------------------------------------------- secrets
class SecretModel(FunctionModel):
    """An OpenAIModel-like fake: carries an API key, base URL and headers that must never leak."""

    def __init__(self) -> None:
        super().__init__(echo_answer, model_name="gpt-secret-test")
        self.api_key = "sk-MARKER-api-key-0123456789"
        self.base_url = "https://MARKER-base-url.invalid/v1"
        self.default_headers = {"Authorization": "Bearer sk-MARKER-header"}

    def __repr__(self) -> str:
        return f"SecretModel(api_key={self.api_key!r}, base_url={self.base_url!r})"


async def test_no_api_key_in_widget_state_or_static_html() -> None:
    agent = Agent(SecretModel(), tools=[refund, slow, ask_user], store=MemoryStore(), name="secretive")
    view = agent.chat(thread="t-secret")
    result = await ask(view, "refund")
    [row] = waiting_rows(view)
    await click(row.buttons["Approve"])
    result = await view.wait()
    assert result.status == "completed"
    states = json.dumps([w.get_state() for w in all_widgets(view)], default=str)
    for secret in ("MARKER", agent.model.api_key, agent.model.base_url, repr(agent.model)):
        assert secret not in states
    assert "MARKER" not in result._repr_html_()


# ----------------------------------------------------------------------------------- reasoning
def is_answer(w: widgets.Widget) -> bool:
    return isinstance(w, StreamText) and not isinstance(w, ThinkingText)


def _log_index(view: ChatView, cls: type) -> list[int]:
    test = is_answer if cls is StreamText else (lambda w: isinstance(w, cls))
    return [i for i, w in enumerate(view.run_log.children) if test(w)]


async def test_reasoning_streams_into_a_collapsed_thinking_section_above_the_answer(sent: list[Any]) -> None:
    thoughts = [f"thought{i} " for i in range(200)]

    async def stream(messages: list[Message], request: Any) -> Any:
        for piece in thoughts:
            await asyncio.sleep(0.001)
            yield ReasoningText(piece)
        for piece in ["The ", "**answer**"]:
            yield piece

    store = MemoryStore()
    agent = Agent(FunctionModel(stream_function=stream), store=store)
    view = agent.chat(thread="t-think")
    await view.wait_loaded()
    t0 = time.monotonic()
    result = await ask(view, "think hard")
    elapsed = time.monotonic() - t0
    assert result.status == "completed" and result.messages[-1].reasoning == "".join(thoughts)
    [th] = [w for w in all_widgets(view) if isinstance(w, ThinkingText)]
    [st] = [w for w in all_widgets(view) if is_answer(w)]
    assert _log_index(view, ThinkingText) < _log_index(view, StreamText)  # above the step's answer
    assert th.plain and th.done and th.text == "".join(thoughts)
    assert th.html == "" and "<strong>answer</strong>" in st.html  # reasoning is never HTML
    # streamed as throttled deltas (at most ~20 a second), not whole re-renders
    pieces = [m["content"]["a"] for w, m, _ in sent
              if w is th and m.get("method") == "custom" and "a" in m["content"]]
    assert 2 <= len(pieces) <= elapsed * 20 + 2 and th.text.startswith("".join(pieces))
    text_syncs = [m for w, m, _ in sent if w is th and m.get("method") == "update" and "text" in m["state"]]
    assert len(text_syncs) == 1  # the whole text is synced once, at the end
    # the thread's history (a new view) shows it as a closed <details> with the text escaped
    view2 = Agent(FunctionModel(stream_function=stream), store=store).chat(thread="t-think")
    await view2.wait_loaded()
    history = view2.history.value
    assert '<details class="nbagent-thinking"' in history and "<summary" in history
    assert " open" not in history.split("<summary")[0].split("nbagent-thinking")[-1]
    assert "thought199" in history
    assert history.index("thought0") < history.index("<strong>answer</strong>")


async def test_reasoning_payloads_stay_inert() -> None:
    payloads = json.loads((Path(__file__).parent.parent / "fixtures" / "injection_payloads.json").read_text("utf-8"))
    reasoning = "\n".join(payloads)

    async def stream(messages: list[Message], request: Any) -> Any:
        for line in payloads:
            yield ReasoningText(line + "\n")
        yield "ok"

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore())
    view = agent.chat(thread="t-think-evil")
    result = await ask(view, "go")
    [th] = [w for w in all_widgets(view) if isinstance(w, ThinkingText)]
    assert th.text == reasoning + "\n" and th.html == "" and th.plain  # shown with textContent only
    html = result._repr_html_()
    assert "&lt;script&gt;window.__pwned=1" in html
    assert_inert(html, allow_style_attr=True)
    view2 = Agent(FunctionModel(stream_function=stream), store=view.agent.store).chat(thread="t-think-evil")
    await view2.wait_loaded()
    assert_inert(view2.history.value, allow_style_attr=True)
    assert "&lt;img src=x onerror=" in view2.history.value


async def test_model_retry_clears_partial_reasoning(sent: list[Any]) -> None:
    from nbagent import Retry
    from nbagent.exceptions import error_for_status

    attempts = [0]

    async def stream(messages: list[Message], request: Any) -> Any:
        attempts[0] += 1
        yield ReasoningText(f"thinking, attempt {attempts[0]}")
        await asyncio.sleep(0.06)  # let the partial reasoning reach the front end
        if attempts[0] == 1:
            raise error_for_status(503, "overloaded")
        yield "answer"

    agent = Agent(FunctionModel(stream_function=stream), store=MemoryStore(),
                  retry=Retry(attempts=2, initial_delay=0.0, jitter=0.0))
    view = agent.chat(thread="t-think-retry")
    result = await ask(view, "hi")
    assert result.status == "completed"
    [th] = [w for w in all_widgets(view) if isinstance(w, ThinkingText)]
    assert th.text == "thinking, attempt 2"
    msgs = [m["content"] for w, m, _ in sent if w is th and m.get("method") == "custom"]
    assert msgs[0] == {"a": "thinking, attempt 1"} and {"r": 1} in msgs  # shown, then cleared


async def test_reasoning_of_an_unstreamed_answer_is_shown_above_it() -> None:
    from nbagent.messages import AssistantMessage

    agent = Agent(FunctionModel(lambda m, r: AssistantMessage(text="Answer.", reasoning="because <b>x</b>")),
                  store=MemoryStore())
    view = agent.chat(thread="t-think-whole")
    await ask(view, "hi")
    [th] = [w for w in all_widgets(view) if isinstance(w, ThinkingText)]
    assert th.text == "because <b>x</b>" and th.done and th.html == ""
    assert _log_index(view, ThinkingText) < _log_index(view, StreamText)


# ----------------------------------------------------------------------------------- sending while busy
def gated_agent(gate: asyncio.Event, store: MemoryStore | None = None) -> Agent:
    """Like `make_agent`, streaming; a message starting with "gated" waits for `gate`, one with
    "fail" fails (not retryable). `agent.prompts`: the user messages the model answered."""
    from nbagent.exceptions import error_for_status

    prompts: list[str] = []

    async def stream(messages: list[Message], request: Any) -> Any:
        last = messages[-1]
        if last.kind == "user":
            text = last.content  # type: ignore[union-attr]
            prompts.append(text)
            if text.startswith("gated"):
                await gate.wait()
            if text.startswith("fail"):
                await gate.wait()
                raise error_for_status(400, "the model refused the request")
        answer = echo_answer(messages, request)
        if not isinstance(answer, str):
            yield answer
            return
        for i, word in enumerate(answer.split(" ")):
            await asyncio.sleep(0)
            yield (" " if i else "") + word

    agent = Agent(FunctionModel(stream_function=stream), tools=[refund, slow, ask_user], store=store or MemoryStore())
    agent.prompts = prompts  # type: ignore[attr-defined]
    return agent


def user_prompts(agent: Agent) -> list[str]:
    return list(agent.prompts)  # type: ignore[attr-defined]


def queue_text(view: ChatView) -> str:
    return "\n".join(w.value for w in view.queue_box.children)


async def test_messages_sent_during_a_run_are_queued_then_sent_one_run_each_in_order() -> None:
    gate = asyncio.Event()
    agent = gated_agent(gate)
    view = agent.chat(thread="t-queue")
    await view.wait_loaded()
    view.message_box.value = "gated first"
    await click(view.buttons["Send"])
    assert view.handle is not None and not view.buttons["Send"].disabled  # Send stays usable
    view.message_box.value = "second <b>bold</b>"
    await click(view.buttons["Send"])
    view.message_box.value = "third"
    press_enter(view.message_box)
    await settle()
    assert view.message_box.value == ""
    assert view.queued_messages == ["second <b>bold</b>", "third"]
    assert "you · queued" in queue_text(view) and "second &lt;b&gt;bold&lt;/b&gt;" in queue_text(view)
    assert "<b>bold" not in queue_text(view)
    assert "2 messages queued: sent when this run ends" in view.status_line.value
    assert view.buttons["Clear queue"].layout.display != "none"
    assert view.ask("fourth") is None  # queued too: no run started for it
    gate.set()
    result = await view.wait()
    assert user_prompts(agent) == ["gated first", "second <b>bold</b>", "third", "fourth"]
    assert result.output == "You said: fourth" and view.queued_messages == []
    assert view.queue_box.children == () and view.buttons["Clear queue"].layout.display == "none"
    assert "queued" not in view.status_line.value
    # in the log each message is followed by its own answer
    texts = [getattr(w, "value", "") or getattr(w, "text", "") for w in view.run_log.children]
    flat = " ".join(texts)
    order = [flat.index(s) for s in ("gated first", "You said: gated", "second &lt;b&gt;", "You said: second",
                                     "third", "You said: third", "fourth", "You said: fourth")]
    assert order == sorted(order)
    assert "queued" not in flat


async def test_queued_message_waits_until_the_waiting_calls_are_decided() -> None:
    gate = asyncio.Event()
    gate.set()
    agent = gated_agent(gate)
    view = agent.chat(thread="t-queue-paused")
    result = await ask(view, "refund please")
    assert result.status == "paused"
    view.message_box.value = "and then hello"
    await click(view.buttons["Send"])
    assert view.message_box.value == "" and view.queued_messages == ["and then hello"]
    assert "waiting for you: 1 tool call" in view.status_line.value
    assert "1 message queued: sent after you decide the waiting tool calls" in view.status_line.value
    assert (await view.wait()).status == "paused" and view.handle is None  # not sent by itself
    [row] = waiting_rows(view)
    await click(row.buttons["Approve"])
    result = await view.wait()
    assert refund_calls == [(42, 9.5)]
    assert result.output == "You said: and then hello" and view.queued_messages == []
    kinds = [m.kind for m in result.messages]
    assert kinds == ["user", "assistant", "tool-result", "assistant", "user", "assistant"]


async def test_stop_keeps_the_queue_on_hold_until_send() -> None:
    gate = asyncio.Event()
    agent = gated_agent(gate)
    view = agent.chat(thread="t-queue-stop")
    await view.wait_loaded()
    view.ask("slow please")
    for _ in range(200):
        if any(r.status == "running" for r in view.rows.values()):
            break
        await asyncio.sleep(0.01)
    view.ask("after the stop")
    await click(view.buttons["Stop"])
    result = await view.wait()
    assert result.status == "cancelled" and view.handle is None
    assert view.queued_messages == ["after the stop"]  # kept, not sent by itself
    assert "cancelled" in view.status_line.value and "on hold: Send sends it" in view.status_line.value
    await click(view.buttons["Send"])  # Send with an empty box sends the queue
    result = await view.wait()
    assert result.output == "You said: after the stop" and view.queued_messages == []


async def test_a_failed_run_keeps_the_queue_and_send_continues_it_in_order() -> None:
    gate = asyncio.Event()
    agent = gated_agent(gate)
    view = agent.chat(thread="t-queue-fail")
    await view.wait_loaded()
    view.ask("fail now")
    view.ask("second")
    await settle()
    gate.set()
    result = await view.wait()
    assert result.status == "failed"
    assert view.queued_messages == ["second"]
    status = view.status_line.value
    assert "failed" in status and "1 message queued, on hold" in status
    view.message_box.value = "third"
    await click(view.buttons["Send"])  # new text joins the end; the queue goes on from its start
    result = await view.wait()
    assert user_prompts(agent)[-2:] == ["second", "third"]
    assert result.output == "You said: third" and view.queued_messages == []


async def test_clear_queue_drops_the_queued_messages_and_says_so() -> None:
    gate = asyncio.Event()
    agent = gated_agent(gate)
    view = agent.chat(thread="t-queue-clear")
    await view.wait_loaded()
    view.ask("gated one")
    view.ask("two")
    view.ask("three")
    await click(view.buttons["Clear queue"])
    assert view.queued_messages == [] and view.queue_box.children == ()
    assert "dropped 2 queued messages (not sent)" in view.status_line.value
    gate.set()
    await view.wait()
    assert user_prompts(agent) == ["gated one"]


async def test_a_queued_message_that_cannot_start_goes_back_to_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = asyncio.Event()
    agent = gated_agent(gate)
    view = agent.chat(thread="t-queue-error")
    await view.wait_loaded()
    view.ask("gated first")
    view.ask("second")
    original = agent.start

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("cannot start now")

    monkeypatch.setattr(agent, "start", refuse)
    gate.set()
    await view.wait()
    assert view.queued_messages == ["second"] and "you · queued" in queue_text(view)
    assert "could not send the queued message: RuntimeError: cannot start now" in view.status_line.value
    assert "1 message queued, on hold" in view.status_line.value
    monkeypatch.setattr(agent, "start", original)
    await click(view.buttons["Send"])
    result = await view.wait()
    assert result.output == "You said: second" and view.queued_messages == []


async def test_ask_takes_images_and_shows_them_in_the_bubble() -> None:
    import io

    from PIL import Image as PILImage

    from nbagent import InvalidPromptError

    buf = io.BytesIO()
    PILImage.new("RGB", (3, 3), (0, 128, 0)).save(buf, format="PNG")
    seen: list[Any] = []

    def answer(messages: list[Message], request: Any) -> str:
        seen.append(messages[-1])
        return f"{len(messages[-1].images)} image"  # type: ignore[union-attr]

    gate = asyncio.Event()
    agent = gated_agent(gate)
    view = agent.chat(thread="t-images")
    await view.wait_loaded()
    with pytest.raises(InvalidPromptError, match="prompt part 1"):
        view.ask(["what is this?", b"not an image"])
    assert view.queued_messages == [] and view.handle is None  # nothing sent, nothing queued
    view.ask("gated first")
    assert view.ask(["what is <b>this</b>?", buf.getvalue()]) is None  # queued behind the run
    assert "<img " in queue_text(view) and "what is &lt;b&gt;this" in queue_text(view)
    gate.set()
    result = await view.wait()
    assert user_prompts(agent)[-1] == "what is <b>this</b>?"
    assert len(result.messages[-2].images) == 1  # type: ignore[union-attr]
    flat = " ".join(getattr(w, "value", "") for w in view.run_log.children)
    assert flat.count("<img ") == 1 and "data:image/png;base64," in flat

    other = Agent(FunctionModel(answer), store=MemoryStore()).chat(thread="t-images-2")
    await other.wait_loaded()
    other.ask(["look", buf.getvalue()])
    assert (await other.wait()).output == "1 image"  # type: ignore[union-attr]
    assert seen[-1].images[0].data == buf.getvalue()
