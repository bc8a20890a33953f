"""`ChatController`: what the chat view does, without its widgets.

Owns, for the one thread a `ChatView` shows: loading the stored thread, the runs (`Agent.start`,
Stop, the resumes that carry the decisions made), the reaction to run events, what goes first
(decisions before queued messages) and the status line's text. It keeps the tool calls and the
decisions on them in a `CallBoard` (`_calls`: which calls wait, decisions queued per call and sent
in one `Decisions` resume, "always allow") and the messages sent while busy in a `MessageQueue`
(`_queue`). It shows all of this through a `ChatLayout` (and its `RunLayout`, where the runs
are shown): `ChatView` in a notebook, a recorder in tests.

The thread may move on elsewhere: a `ThreadFollower` (`_follow`) brings the runs from code or
other views of this kernel, late tool outcomes, and the store's word after a stale click. The
footer's numbers (this turn, the thread, the run's budget) are a `UsageTally` (`_tally`).

Threading: everything here runs on the loop captured when the controller was made (a cell
cannot wait for a click, so a run is a background task on the kernel's loop; docs/view.md).
`ChatController.schedule` is the one method that is safe from any thread: widget handlers (which
may run on an ipykernel subshell thread) hand their work to it and return.

A paused thread needs no live run: the calls waiting come from the thread's stored `ThreadMeta`,
so decisions work after a kernel restart.

Imports asyncio, the core's public shapes (approvals, messages, result), `_sync`, `_calls`,
`_follow`, `_queue` and `_tally`; never ipywidgets.
"""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._sync import run_sync
from ..approvals import Decisions
from ..messages import Message, Prompt, UserMessage, user_message
from ..result import RunResult
from ._calls import CALL_EVENTS, CallBoard, CallRows, call_args, decided_text
from ._follow import ENDED, ThreadFollower, unavailable_text
from ._queue import MessageQueue, dropped_note
from ._tally import UsageTally

if TYPE_CHECKING:
    from ..agent import Agent, RunHandle
    from ..messages import AssistantMessage

__all__ = ["ChatController", "ChatLayout", "RunLayout"]


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

    def show_compaction(self, record: Any) -> None:
        """The conversation was compacted (a `CompactionMessage`): a muted row says so."""

    def finish_streams(self) -> None:
        """The run ended: whatever still streams is complete."""

    def mark_replayed(self, step: int) -> None:
        """The answer of `step` was taken from a recording (`nbagent.models.replay`): a small
        "replayed" badge says so."""

    def hold(self, step: int) -> None:
        """The answer of `step` is being written and held back for the output guards: "checking…"
        where it will show (its text replaces it, or the line of a block)."""

    def show_trip(self, check: Any, step: int) -> None:
        """A guard stopped the run (`GuardCheck`; a blocked prompt, or an answer): its label and
        reason, where the answer of `step` would have been."""

    def nested(self, agent_call: str, agent: str = "") -> RunLayout:
        """Where the steps of the sub-agent `agent` that the agent call `agent_call` runs are
        shown (`Agent.as_tool`): under the call's row, collapsed; its tool rows are this layout's
        calls of group ``(agent_call, step)``."""


class ChatLayout(Protocol):
    """What the controller shows: the runs (`run_log`) and the rest of the view. `ChatView`
    draws it with widgets; every method is called on the loop."""

    @property
    def run_log(self) -> RunLayout:
        """Where the runs are shown."""

    def show_history(self, messages: Sequence[Message], skip_call_ids: Sequence[str], *,
                     replayed: Sequence[int] = (), subruns: Mapping[str, Any] | None = None) -> None:
        """The stored conversation (without the calls in `skip_call_ids`: they get rows); the
        answers at the indices `replayed` came from a recording (a "replayed" badge); `subruns`:
        the sub-agents' threads under their agent calls, by call id (`SubThread`)."""

    def show_usage(self, tally: UsageTally, *, token_budget: int | None = None,
                   cost_budget: float | None = None) -> None:
        """The footer: this turn's and the thread's tokens and cost, and the run's budget use."""

    def show_conversation(self, messages: Sequence[Message], subruns: Mapping[str, Any] | None = None) -> None:
        """The thread's conversation as stored now (the saved notebook's static copy), with its
        sub-agents' runs under their agent calls."""

    def unsend(self, message: UserMessage) -> None:
        """`message` was not sent after all (it goes back to the queue): take it out of the
        conversation."""

    def show_status(self, text: str, error: bool, note: str) -> None:
        """The status line: `text` (red when `error`) and the queue's `note` ("" for none)."""

    def show_running(self, running: bool) -> None:
        """A run goes on (the Stop button shows) or not."""

    def show_bulk(self, show: bool) -> None:
        """Two or more calls wait for approval (Approve all / Deny all show) or not."""

    def show_always_allowed(self, tools: Sequence[str]) -> None:
        """The thread's always-allowed tools (each with a way to revoke it: `ChatController.revoke`)."""

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


def _ended_text(kind: str, result: RunResult, waiting: str, still_running: Sequence[str]) -> tuple[str, bool]:
    """The status line when a run ended with `kind` (and whether it is an error)."""
    if kind == "run-completed":
        return "", False
    if kind == "run-paused":
        return waiting, False
    if kind == "run-stopped":
        trip = getattr(result, "guard_trip", None)
        if trip is not None:
            return f"stopped by guard {trip.guard!r}: {trip.reason}", False
        return f"stopped: {result.stop_reason}", False
    if kind == "run-failed":
        return f"failed: {result.error}", True
    if still_running:
        n = len(still_running)
        rows = "its row changes" if n == 1 else "their rows change"
        return (f"cancelled; stop was requested but {', '.join(still_running)} cannot be interrupted (a blocking "
                f"function) and {'is' if n == 1 else 'are'} still running: {rows} when it ends", False)
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
        result: the `RunResult` of the last run of this view that ended.
        board: the tool calls shown, which wait, and the decisions made (`CallBoard`).
        queue: the messages waiting to be sent (`MessageQueue`).
        tally: the footer's numbers (`UsageTally`).
        follower: what keeps the view in step with its thread elsewhere (`ThreadFollower`).
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
        self.board = CallBoard(self.log, layout.show_bulk,
                               lambda p: unavailable_text(p, self.agent.tools, self.agent.tool_sources))
        self.queue = MessageQueue()
        self.tally = UsageTally()
        self._state: Any = None
        self._status: tuple[str, bool] = ("", False)
        self._kept = ""  # what happened elsewhere: stays until the person acts again
        self._sent: tuple[UserMessage | None, Decisions | None] = (None, None)
        self.subruns: dict[str, Any] = {}
        """The sub-agents' runs under the thread's agent calls, by call id: as stored when the view
        opened (`SubThread`), then as each run ends (`RunResult.subagents`)."""
        self.follower = ThreadFollower(self)

    # ------------------------------------------------------------------ threading, loading, status
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
            self.follower.read_later(self.follower.load(), load=True)
        else:  # a script with no loop: load synchronously (nothing can run then)
            run_sync(self.follower.load)

    def after_load(self, fn: Callable[[], Any]) -> bool:
        """If the stored thread is still loading, call `fn` once it is shown and return True."""
        return self.follower.after_load(fn)

    async def wait_loaded(self) -> None:
        """Wait until the stored thread is shown."""
        await self.follower.loaded()

    async def wait(self) -> RunResult | None:
        """Wait until no run of this view goes on, what runs elsewhere told it is shown, and nothing
        queued will start a run by itself (decisions, and queued messages unless they wait for a
        decision or are on hold); returns the last result of this view."""
        await self.wait_loaded()
        while True:
            handle = self.handle
            if handle is not None:
                try:
                    await asyncio.shield(handle.task)
                except BaseException:
                    pass
            elif (self.board.decisions and self.follower.foreign is None) or self.follower.catching_up:
                pass
            elif self.queue.ready(busy=self.busy):
                if not self._send_next():  # cannot start (no loop): nothing will change by itself
                    break
            else:
                break
            await asyncio.sleep(0)
        return self.result

    async def settle(self) -> bool:
        """`wait`, for `nbagent.notebook.settle` (which has let every run of the loop end first):
        when it returns True, the view shows its thread as stored. A controller of another loop
        than the caller's is left alone (its futures cannot be awaited here, and its view is not
        this kernel's to send): False."""
        if self._loop is not None and self._loop is not _current_loop():
            return False
        await self.wait()
        return True

    @property
    def busy(self) -> bool:
        """A new message cannot start a run now: a run goes on (here or elsewhere in this
        process), or calls wait for a decision (or have decisions not sent yet)."""
        return (self.handle is not None or self.follower.foreign is not None or bool(self.board.decisions)
                or bool(self.board.waiting))

    def say(self, text: str, *, error: bool = False, keep: bool = False) -> None:
        """Put `text` on the status line (with the queue's note under it). ``keep=True``: a note
        under the status line that stays until the person sends or decides again (what happened
        elsewhere, a late outcome), while the status line goes on."""
        if keep:
            self._kept = text
        else:
            self._status = (text, error)
        self._render_status()

    def _render_status(self) -> None:
        text, error = self._status
        note = self.queue.note(running=self.handle is not None or self.follower.foreign is not None,
                               undecided=bool(self.board.waiting))
        self.layout.show_status(text, error, "\n".join(t for t in (self._kept, note) if t))

    def render_usage(self) -> None:
        """Show the footer as the tally has it."""
        self.layout.show_usage(self.tally, token_budget=self.agent.token_budget, cost_budget=self.agent.cost_budget)

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
        self._kept = ""
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
    def _start(self, prompt: UserMessage | None = None, resume: Decisions | None = None) -> None:
        if self._loop is None:
            self.say("no running event loop: use the view in a notebook (or an async function)", error=True)
            return
        handle = self.agent.start(prompt, thread=self.thread, on_event=self.on_event, resume=resume,
                                  state=self._state)
        self.handle, self._sent = handle, (prompt, resume)
        self.run_started(prompt=None, own=True)
        self.layout.show_running(True)
        handle.task.add_done_callback(lambda task: self._on_done(handle, task))

    def run_started(self, *, prompt: UserMessage | None, own: bool) -> None:
        """A run starts on the thread (this view's, or elsewhere: then `prompt` is its message)."""
        self.log.run_started()
        if not own and prompt is not None:
            self.layout.show_sent(prompt)
        self.tally.run_started(new_turn=prompt is not None or (own and self._sent[0] is not None))
        self.render_usage()
        self.say("running…" if own else "running (started in code or in another view)…")

    def stop(self) -> None:
        """Cancel the run going on; queued messages stay, on hold."""
        if self.handle is not None:
            self.say("stopping…")
            self.handle.cancel()

    def _on_done(self, handle: RunHandle, task: asyncio.Future[Any]) -> None:
        if self.handle is handle:
            self.handle = None
        self.layout.show_running(False)
        if task.cancelled():
            self.queue.run_ended("cancelled")
            self.say("cancelled")
        else:
            exc = task.exception()
            if exc is not None:  # refused before it started (stale decisions, a running thread, ...)
                self.tally.run_ended()
                self.render_usage()
                self.follower.read_later(self.follower.after_failure(exc, *self._sent))
                return
        self.kick()

    # ------------------------------------------------------------------ run events
    def on_event(self, event: Any) -> None:
        """`on_event` of the runs (on the loop): dispatch on `event.kind` (an `Event`). A
        sub-agent's event (`agent_call` set) is shown in its agent call's steps."""
        kind, via = event.kind, event.agent_call
        log = self.log if via is None else self.log.nested(via, event.path[-1])
        if kind in ("text-delta", "reasoning-delta"):
            log.stream(event.step, event.delta, reasoning=kind == "reasoning-delta")
        elif kind == "model-response":
            self._on_response(event.step, event.message, log, via)
        elif kind in CALL_EVENTS:
            self.board.on_event(event)
        elif kind == "model-retry":
            log.reset_step(event.step)
            self.say(f"model call failed (attempt {event.attempt}): {event.error}; "
                     f"retrying in {event.delay_s:.1f} s")
        elif kind == "model-fallback":
            self.say(f"answered by {event.model} ({event.failed}: {event.error})")
        elif kind == "usage":
            self.tally.add(event.call, event.context)
            self.render_usage()
            if event.call.replayed and event.call.purpose == "run":
                log.mark_replayed(event.call.step)
        elif kind == "compaction":
            log.show_compaction(event.record)
        elif kind == "text-held":
            log.hold(event.step)
        elif kind == "guard-tripped" and event.stops:
            log.show_trip(event.check, event.step)
        elif kind == "run-started":
            self.follower.own.add(event.run_id)
        elif kind in ENDED:
            self.run_ended(kind, event.result, own=True)

    def _on_response(self, step: int, message: AssistantMessage, log: RunLayout, via: str | None) -> None:
        log.show_answer(step, message)
        for call in message.tool_calls:
            self.board.track(call.id, call.name, call_args(call), step if via is None else (via, step))
        if message.tool_calls and via is None:
            self.say("running tools…" if self.follower.foreign is None else
                     "running tools (started in code or in another view)…")

    def run_ended(self, kind: str, result: RunResult, *, own: bool) -> None:
        """A run on the thread ended (this view's, or elsewhere)."""
        if own:
            self.result = result
            self.queue.run_ended(kind.removeprefix("run-"))  # failed or cancelled: the queue waits for Send
        self._state = result.state
        self.tally.run_ended(truncated=result.truncated)
        self.render_usage()
        self.log.finish_streams()
        self.show_allowed(result.always_allowed)
        results = {m.call_id: m for m in result.messages if m.kind == "tool-result"}
        self.board.run_ended(results, {p.id for p in result.pending}, cancelled=kind == "run-cancelled")
        still = [c.name for c in self.board.still_running]
        text, error = _ended_text(kind, result, self.board.waiting_text(), still)
        self.say(text, error=error)
        self.subruns.update(result.subagents)
        self.layout.show_conversation(result.messages, self.subruns)

    # ------------------------------------------------------------------ always allow
    def show_allowed(self, tools: Sequence[str]) -> None:
        """The thread's always-allowed tools are `tools` now (as stored)."""
        self.board.decisions.always_allowed = set(tools)
        self.layout.show_always_allowed(sorted(tools))

    def revoke(self, tool: str) -> None:
        """Take back "always allow" of `tool` on the thread (`Agent.revoke`): its next call waits
        for a person again. Refused while a run goes on (it would keep its own copy)."""
        if self.handle is not None or self.follower.foreign is not None:
            self.say(f"{tool} is still always allowed: a run is going on; stop it (or let it pause), then revoke",
                     error=True)
            return
        self.follower.read_later(self._revoke(tool))

    async def _revoke(self, tool: str) -> None:
        try:
            left = await self.agent.revoke(self.thread, tool)
        except Exception as exc:  # a run started meanwhile, the store failed: say so
            self.say(f"could not revoke always allow of {tool}: {type(exc).__name__}: {exc}", error=True)
            return
        self.show_allowed(left)
        self.say(f"{tool} is no longer always allowed on this thread: its next call waits for you", keep=True)

    # ------------------------------------------------------------------ decisions
    def decide(self, call_id: str, action: str, payload: Any = None, *, kick: bool = True) -> None:
        """Record a person's decision on a waiting call (approve, deny, edit, result, always) and
        start the resume, or keep it until the run going on ends. A call decided elsewhere
        meanwhile is not decided again: the status line says who decided what."""
        self._kept = ""
        if self.board.decide(call_id, action, payload):
            if kick:
                self.kick()
            return
        call = self.board.calls.get(call_id)
        if call is not None and call.outcome is not None:
            self.say(decided_text(call), keep=True)

    def decide_all(self, action: str, payload: Any = None) -> None:
        """The same decision on every call waiting for approval (``Approve all`` / ``Deny all``),
        sent in one resume. ``Approve all`` leaves out the calls whose arguments are too long for
        their row to show whole (the status line says so): each needs its own Approve, after Edit."""
        left = {c.id for c in self.board.unreadable} if action == "approve" else set()
        for call in self.board.approvals:
            if call.id not in left:
                self.decide(call.id, action, payload, kick=False)
        self.kick()
        if left:
            n = len(left)
            self.say(f"Approve all left out {n} call{'s' if n != 1 else ''} whose arguments are too long to show "
                     "whole: open Edit on each to read them, then approve it there", keep=True)

    def kick(self) -> None:
        """Start a resume with the decisions made, unless a run goes on (here or elsewhere: then
        it starts when that run ends); with no decision made, send the next queued message."""
        if self.handle is not None or self.follower.foreign is not None:
            self._render_status()
            return
        decisions = self.board.decisions.take()
        if decisions is None:
            self._send_next()
            return
        self._start(resume=decisions.decided_by(_person()))
