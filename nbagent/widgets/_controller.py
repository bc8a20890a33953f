"""`ChatController`: what the chat view does, without its widgets.

Owns, for the one thread a `ChatView` shows: loading the stored thread, the runs (`Agent.start`,
Stop, the resumes that carry the decisions made), the reaction to run events, what goes first
(decisions before queued messages) and the status line's text. It keeps the tool calls and the
decisions on them in a `CallBoard` (`_calls`: which calls wait, decisions queued per call and sent
in one `Decisions` resume, "always allow") and the messages sent while busy in a `MessageQueue`
(`_queue`). It shows all of this through a `ChatLayout` (and its `RunLayout`, where the runs
are shown): `ChatView` in a notebook, a recorder in tests.

Threading (DESIGN.md, "Facts about Jupyter"): everything here runs on the loop captured when the
controller was made. `ChatController.schedule` is the one method that is safe from any thread:
widget handlers (which may run on an ipykernel subshell thread) hand their work to it and return.

A paused thread needs no live run: the calls waiting come from the thread's stored `ThreadMeta`,
so decisions work after a kernel restart.

Imports asyncio, the core's public shapes (approvals, messages, result, usage), `_sync`, `_calls`
and `_queue`; never ipywidgets.
"""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._sync import run_sync
from ..approvals import Decisions
from ..messages import Message, Prompt, UserMessage, user_message
from ..result import RunResult
from ..usage import Usage
from ._calls import CALL_EVENTS, CallBoard, CallRows, call_args
from ._queue import MessageQueue, dropped_note

if TYPE_CHECKING:
    from ..agent import Agent, RunHandle
    from ..messages import AssistantMessage

__all__ = ["ChatController", "ChatLayout", "RunLayout"]

_ENDED = ("run-completed", "run-paused", "run-stopped", "run-failed", "run-cancelled")


class RunLayout(CallRows, Protocol):
    """How the runs are shown as they happen: each step's answer and reasoning, and the tool-call
    rows (`CallRows`). `ChatView.run_log` draws them."""

    def run_started(self) -> None:
        """A new run starts: its steps get new answer, reasoning and tool-table sections."""

    def stream(self, step: int, delta: str, *, reasoning: bool = False) -> None:
        """New answer text (or reasoning) of `step`."""

    def reset_step(self, step: int) -> None:
        """The model call of `step` is retried: clear its partial answer and reasoning."""

    def show_answer(self, step: int, message: AssistantMessage) -> None:
        """The model's whole answer of `step` (its text, reasoning and refusal)."""

    def finish_streams(self) -> None:
        """The run ended: whatever still streams is complete."""


class ChatLayout(Protocol):
    """What the controller shows: the runs (`run_log`) and the rest of the view. `ChatView`
    draws it with widgets; every method is called on the loop."""

    @property
    def run_log(self) -> RunLayout:
        """Where the runs are shown."""

    def show_history(self, messages: Sequence[Message], skip_call_ids: Sequence[str]) -> None:
        """The stored conversation (without the calls in `skip_call_ids`: they get rows)."""

    def show_usage(self, usage: Usage, *, label: str = "run", token_budget: int | None = None,
                   cost_budget: float | None = None) -> None:
        """The footer: tokens, cost and budget use."""

    def show_status(self, text: str, error: bool, note: str) -> None:
        """The status line: `text` (red when `error`) and the queue's `note` ("" for none)."""

    def show_running(self, running: bool) -> None:
        """A run goes on (the Stop button shows) or not."""

    def show_bulk(self, show: bool) -> None:
        """Two or more calls wait for approval (Approve all / Deny all show) or not."""

    def show_queue(self, messages: Sequence[UserMessage]) -> None:
        """The queued messages now, oldest first (each marked "queued")."""

    def show_sent(self, message: UserMessage) -> None:
        """`message` started its run: it joins the conversation."""


def _person() -> str | None:
    """Who clicked: the user running the kernel (recorded with each decision)."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return None


def _current_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _ended_text(kind: str, result: RunResult, waiting: str) -> tuple[str, bool]:
    """The status line when a run ended with `kind` (and whether it is an error)."""
    if kind == "run-completed":
        return "", False
    if kind == "run-paused":
        return waiting, False
    if kind == "run-stopped":
        return f"stopped: {result.stop_reason}", False
    if kind == "run-failed":
        return f"failed: {result.error}", True
    return "cancelled", False


class ChatController:
    """Runs, decisions, the message queue and the status of one thread, shown by a `ChatLayout`.

    Args:
        agent: the `Agent`.
        thread: the thread id.
        layout: what shows it all (`ChatView`).
        loop: the loop runs go on (default: the running loop, if any; with none the thread can
            be shown but nothing can run).

    Attributes:
        handle: the `RunHandle` of the run going on, or None.
        result: the `RunResult` of the last run that ended.
        board: the tool calls shown, which wait, and the decisions made (`CallBoard`).
        queue: the messages waiting to be sent (`MessageQueue`).
    """

    def __init__(self, agent: Agent, thread: str, layout: ChatLayout, *,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.agent = agent
        self.thread = thread
        self.layout = layout
        self._loop = loop if loop is not None else _current_loop()
        self.handle: RunHandle | None = None
        self.result: RunResult | None = None
        self.log = layout.run_log
        self.board = CallBoard(self.log, layout.show_bulk)
        self.queue = MessageQueue()
        self._state: Any = None
        self._status: tuple[str, bool] = ("", False)
        self._load_task: asyncio.Future[None] | None = None
        self._reload_task: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ threading and loading
    def schedule(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the controller's loop; safe from any thread (widget handlers call
        this and return). An error it raises shows on the status line."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._guarded(fn, args)
            return
        loop.call_soon_threadsafe(self._guarded, fn, args)

    def _guarded(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception as exc:  # a handler's error shows in the view instead of vanishing
            self.say(f"{type(exc).__name__}: {exc}", error=True)

    def load(self) -> None:
        """Show the stored thread: in a task on the loop, or at once when there is no loop."""
        if self._loop is not None:
            self._load_task = self._loop.create_task(self._load())
        else:  # a script with no loop: load synchronously (nothing can run then)
            run_sync(self._load)

    def after_load(self, fn: Callable[[], Any]) -> bool:
        """If the stored thread is still loading, call `fn` once it is shown and return True."""
        if self._load_task is None or self._load_task.done():
            return False
        self._load_task.add_done_callback(lambda _: fn())
        return True

    async def wait_loaded(self) -> None:
        """Wait until the stored thread is shown."""
        if self._load_task is not None:
            await self._load_task

    async def wait(self) -> RunResult | None:
        """Wait until no run goes on and nothing queued will start one by itself (decisions, and
        queued messages unless they wait for a decision or are on hold); returns the last result."""
        await self.wait_loaded()
        while True:
            handle = self.handle
            if handle is not None:
                try:
                    await asyncio.shield(handle.task)
                except BaseException:
                    pass
            elif self.board.decisions or (self._reload_task is not None and not self._reload_task.done()):
                pass
            elif self.queue.ready(busy=bool(self.board.waiting)):
                if not self._send_next():  # cannot start (no loop): nothing will change by itself
                    break
            else:
                break
            await asyncio.sleep(0)
        return self.result

    async def _load(self) -> None:
        try:
            loaded = await self.agent.store.load(self.thread)
        except Exception as exc:
            self.say(f"could not load thread {self.thread!r}: {type(exc).__name__}: {exc}", error=True)
            return
        if loaded is None:
            return
        pending = loaded.open_pending()
        self.layout.show_history(loaded.messages, [p.id for p in pending])
        self.board.decisions.always_allowed = set(loaded.meta.always_allowed)
        self.layout.show_usage(Usage.of(loaded.usage), label="thread so far")
        if pending:
            for p in pending:
                self.board.show_pending(p, group="stored")
            self.say(self.board.waiting_text())
        elif loaded.meta.status == "failed" and loaded.meta.error:
            self.say(f"the last run failed: {loaded.meta.error}", error=True)

    # ------------------------------------------------------------------ status
    @property
    def busy(self) -> bool:
        """A new message cannot start a run now: a run goes on, or calls wait for a decision (or
        have decisions not sent yet)."""
        return self.handle is not None or bool(self.board.decisions) or bool(self.board.waiting)

    def say(self, text: str, *, error: bool = False) -> None:
        """Put `text` on the status line (with the queue's note under it)."""
        self._status = (text, error)
        self._render_status()

    def _render_status(self) -> None:
        text, error = self._status
        note = self.queue.note(running=self.handle is not None, undecided=bool(self.board.waiting))
        self.layout.show_status(text, error, note)

    # ------------------------------------------------------------------ sending
    def ask(self, prompt: Prompt) -> RunHandle | None:
        """Send a message (text, or text and images); returns the `RunHandle` of the run it
        started, or None when it was queued.

        Raises:
            InvalidPromptError: the prompt is neither text nor images (nothing is sent or queued).
        """
        message = user_message(prompt)  # checked now, in the caller's cell
        if self.after_load(lambda: self.send(message)):
            return None
        return self.handle if self.send(message) else None

    def send(self, message: UserMessage | None = None) -> bool:
        """Send was pressed: start a run with `message`, or queue it when the view is busy or other
        messages wait before it; a queue on hold goes on. With no message, send the queue again.
        Returns True when a run was started.

        Raises:
            Exception: `Agent.start` refused `message` (it is neither sent nor queued).
        """
        if message is not None and not self.queue and not self.busy:
            self.queue.submit()
            self._start(prompt=message)
            self.layout.show_sent(message)
            return True
        self.queue.submit(message)
        if message is not None:
            self.layout.show_queue(self.queue.messages)
        return self._send_next()

    def _send_next(self) -> bool:
        """Start a run with the oldest queued message if nothing stands in the way; else only
        refresh the status line. Returns True when a run was started."""
        message = self.queue.take(busy=self.busy) if self._loop is not None else None
        if message is None:
            self._render_status()
            return False
        try:
            self._start(prompt=message)
        except Exception as exc:  # not sent: back at the head of the queue, on hold
            self.queue.not_sent(message)
            self.layout.show_queue(self.queue.messages)
            self.say(f"could not send the queued message: {type(exc).__name__}: {exc}", error=True)
            return False
        self.layout.show_sent(message)
        self.layout.show_queue(self.queue.messages)
        return True

    def clear_queue(self) -> list[str]:
        """Drop the queued messages without sending them; returns their texts. The status line
        says how many were dropped."""
        dropped = self.queue.clear()
        self.layout.show_queue(())
        if dropped:
            self.say("; ".join(t for t in (self.board.waiting_text(), dropped_note(len(dropped))) if t))
        return [m.content for m in dropped]

    # ------------------------------------------------------------------ runs
    def _start(self, prompt: Prompt | None = None, resume: Decisions | None = None) -> None:
        if self._loop is None:
            self.say("no running event loop: use the view in a notebook (or an async function)", error=True)
            return
        self.log.run_started()
        self.say("running…")
        handle = self.agent.start(prompt, thread=self.thread, on_event=self.on_event, resume=resume,
                                  state=self._state)
        self.handle = handle
        self.layout.show_running(True)
        handle.task.add_done_callback(lambda task: self._on_done(handle, task))

    def stop(self) -> None:
        """Cancel the run going on; queued messages stay, on hold."""
        if self.handle is not None:
            self.say("stopping…")
            self.handle.cancel()

    def validate(self, name: str, args: dict[str, Any]) -> Any:
        """Check edited arguments against tool `name`'s schema (raises when they do not fit)."""
        tool = self.agent.tools.get(name)
        return None if tool is None else tool.validate(args)

    def _on_done(self, handle: RunHandle, task: asyncio.Future[Any]) -> None:
        if self.handle is handle:
            self.handle = None
        self.layout.show_running(False)
        if task.cancelled():
            self.queue.run_ended("cancelled")
            self.say("cancelled")
        else:
            exc = task.exception()
            if exc is not None:
                self.queue.run_ended("failed")
                self.say(f"{type(exc).__name__}: {exc}", error=True)
                # the decisions were not applied: show what waits now, as the store has it
                assert self._loop is not None
                self._reload_task = self._loop.create_task(self._reload_pending())
                return
        self._kick()

    async def _reload_pending(self) -> None:
        loaded = await self.agent.store.load(self.thread)
        if loaded is None:
            return
        self.board.reload(loaded.open_pending())
        self._kick()

    # ------------------------------------------------------------------ run events
    def on_event(self, event: Any) -> None:
        """`on_event` of the runs (on the loop): dispatch on `event.kind` (an `Event`)."""
        kind = event.kind
        if kind in ("text-delta", "reasoning-delta"):
            self.log.stream(event.step, event.delta, reasoning=kind == "reasoning-delta")
        elif kind == "model-response":
            self._on_response(event.step, event.message)
        elif kind in CALL_EVENTS:
            self.board.on_event(event)
        elif kind == "model-retry":
            self.log.reset_step(event.step)
            self.say(f"model call failed (attempt {event.attempt}): {event.error}; "
                     f"retrying in {event.delay_s:.1f} s")
        elif kind == "usage":
            self.layout.show_usage(event.total, token_budget=self.agent.token_budget,
                                   cost_budget=self.agent.cost_budget)
        elif kind == "run-started":
            self.say("running…")
        elif kind in _ENDED:
            self._on_end(kind, event.result)

    def _on_response(self, step: int, message: AssistantMessage) -> None:
        self.log.show_answer(step, message)
        for call in message.tool_calls:
            self.board.track(call.id, call.name, call_args(call), step)
        if message.tool_calls:
            self.say("running tools…")

    def _on_end(self, kind: str, result: RunResult) -> None:
        self.result = result
        self._state = result.state
        self.log.finish_streams()
        results = {m.call_id: m for m in result.messages if m.kind == "tool-result"}
        self.board.run_ended(results, {p.id for p in result.pending}, cancelled=kind == "run-cancelled")
        self.queue.run_ended(kind.removeprefix("run-"))  # failed or cancelled: the queue waits for Send
        text, error = _ended_text(kind, result, self.board.waiting_text())
        self.say(text, error=error)

    # ------------------------------------------------------------------ decisions
    def decide(self, call_id: str, action: str, payload: Any = None, *, kick: bool = True) -> None:
        """Record a person's decision on a waiting call (approve, deny, edit, result, always) and
        start the resume, or keep it until the run going on ends."""
        if self.board.decide(call_id, action, payload) and kick:
            self._kick()

    def decide_all(self, action: str, payload: Any = None) -> None:
        """The same decision on every call waiting for approval (``Approve all`` / ``Deny all``),
        sent in one resume."""
        for call in self.board.approvals:
            self.decide(call.id, action, payload, kick=False)
        self._kick()

    def _kick(self) -> None:
        """Start a resume with the decisions made, unless a run goes on (then it starts when that
        run ends); with no decision made, send the next queued message."""
        if self.handle is not None:
            self._render_status()
            return
        decisions = self.board.decisions.take()
        if decisions is None:
            self._send_next()
            return
        self._start(resume=decisions.decided_by(_person()))
