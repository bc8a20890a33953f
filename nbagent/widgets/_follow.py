"""How a chat view keeps up with its thread when the thread moves on without it.

Owns `ThreadFollower`, one per `ChatController`. It watches the thread (`nbagent._watch`) and:

- follows the runs on the thread that the view did not start — a resume from code
  (``agent.resume``, ``resume_sync``, ``agent.start``) or from another view of the same kernel:
  the rows change status, decided buttons go, each answer appears when complete (text deltas are
  not sent to followers), the footer counts the calls, the status line says where the run goes
  on; while it goes on the view's own sends and decisions wait for it;
- shows the late outcome of a blocking tool that outlived its stopped run (`ToolOutcomeNotice`);
- catches up with the store when the view acted on something that moved on elsewhere — another
  process, or a click that raced a notice: a resume (or a send) that failed because the calls had
  been decided, had changed, or the thread was running elsewhere. The rows then show what the store
  has, the status line says plainly what happened (who decided what, when, as far as known), and
  the person's decisions on calls that still wait are sent again (once).

The controller's side of it: `ChatController` calls `own` for its runs, and the follower calls
back ``run_started``, ``on_event``, ``run_ended``, ``kick``, ``say`` and the `board`.

Imports the core's watch registry, approvals and exceptions, and `_calls`; never ipywidgets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._run.nested import owner_tools
from .._run.subagent import SubThread, load_subthreads
from .._watch import watch
from ..approvals import Decisions, PendingCall
from ..display.html import replayed_answers
from ..exceptions import ArgumentsMismatchError, ConflictError, NotResumableError, PendingCallsError, UnknownCallError
from ._calls import WAITING, CallBoard, CallState, decided_text

if TYPE_CHECKING:
    from ..messages import Message, UserMessage
    from ..store.base import ThreadState
    from ._controller import ChatController

__all__ = ["ENDED", "ThreadFollower", "catch_up", "last_message_step", "unavailable_text"]

ENDED = ("run-completed", "run-paused", "run-stopped", "run-failed", "run-cancelled")
"""The kinds of the event that ends a run."""
_STALE = (UnknownCallError, NotResumableError, ArgumentsMismatchError, PendingCallsError, ConflictError)
"""What a resume (or a send) raises when the thread moved on elsewhere."""
_PAYLOAD = {"deny": "reason", "edit": "args", "result": "value"}


def unavailable_text(pending: PendingCall, tools: Mapping[str, Any], sources: Sequence[Any] = ()) -> str | None:
    """Why a waiting call cannot run in this kernel: its tool is not registered with the agent
    (e.g. after a restart the cell that defines it has not run). None when it can, or may: a tool
    source (an MCP server) that has not listed its tools yet may have it, and the resume lists them.
    A sub-agent's call (`PendingCall.nested`) needs its tool in that sub-agent's tools.
    """
    if pending.nested:
        owner = owner_tools(tools, pending)
        if owner is not None and pending.name in owner:
            return None
        return (f"{pending.label} is not a tool of a sub-agent of this agent in this kernel, so it cannot run "
                "here: run the cells that define the agents, then this view's cell again; Deny answers its "
                "model without it")
    if pending.name in tools:
        return None
    for source in sources:
        listed = source.cached_tools()
        if listed is None or any(t.name == pending.name for t in listed):
            return None
    if pending.reason == "client":
        return (f"{pending.name} is not a tool of this agent in this kernel, so it cannot be answered here: run "
                "the cell that defines it (and the agent), then this view's cell again")
    return (f"{pending.name} is not a tool of this agent in this kernel, so it cannot run here: run the cell "
            "that defines it (and the agent), then this view's cell again; Deny answers the model without it")


def catch_up(board: CallBoard, messages: Sequence[Message], pending: Sequence[Any]) -> list[CallState]:
    """Bring the rows in step with the thread as stored (`messages`, and the calls that wait):
    a shown call with a stored result gets it; the calls that wait are shown waiting. Returns the
    calls that waited here, or had a decision made here, and were decided elsewhere."""
    stored = {m.call_id: m for m in messages if m.kind == "tool-result"}
    elsewhere = []
    for call in list(board.calls.values()):
        result = stored.get(call.id)
        if result is None or call.status not in (*WAITING, "queued", "running"):
            continue  # nothing new; a still running tool changes when it really ends
        if call.status in WAITING or call.decided:
            elsewhere.append(call)
        board.ended(call, result)
    board.reload(list(pending))
    return elsewhere


class ThreadFollower:
    """Keeps a `ChatController` in step with its thread (see the module docstring).

    Attributes:
        own: the ids of the runs the controller started (their events come to it directly).
        foreign: the id of the run going on elsewhere in this process, or None.
    """

    def __init__(self, controller: ChatController) -> None:
        self.controller = controller
        self.own: set[str] = set()
        self.foreign: str | None = None
        self._loading: asyncio.Future[None] | None = None
        self._reads: set[asyncio.Future[None]] = set()
        self._mail = [0, 0]  # notices handed to the loop, and shown (the first counts on the run's thread)
        self._unwatch = watch(controller.thread, self._heard)

    @property
    def catching_up(self) -> bool:
        """The view will change by itself: the thread is being read, or notices were handed to
        the loop and are not shown yet."""
        return bool(self._reads) or self._mail[0] != self._mail[1]

    def read_later(self, work: Coroutine[Any, Any, None], *, load: bool = False) -> None:
        """Run `work` (reading the store) in a task on the controller's loop (`load`: the first
        read, which `after_load` and `loaded` wait for)."""
        task = asyncio.ensure_future(work)
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)
        if load:
            self._loading = task

    def after_load(self, fn: Callable[[], Any]) -> bool:
        """If the thread is still being loaded, call `fn` when that is done and return True."""
        if self._loading is None or self._loading.done():
            return False
        self._loading.add_done_callback(lambda _: fn())
        return True

    async def loaded(self) -> None:
        """Wait until the thread has been loaded (and shown)."""
        if self._loading is not None:
            await asyncio.shield(self._loading)

    def close(self) -> None:
        """Stop following the thread."""
        self._unwatch()

    # ------------------------------------------------------------------ the thread as stored
    async def load(self) -> None:
        """Show the thread as stored: its conversation, the calls that wait, the footer's numbers."""
        c = self.controller
        try:
            loaded = await c.agent.store.load(c.thread)
        except Exception as exc:
            c.say(f"could not load thread {c.thread!r}: {type(exc).__name__}: {exc}", error=True)
            return
        if loaded is None:
            return
        pending = loaded.open_pending()
        c.subruns = await _subthreads(c, loaded)
        c.layout.show_history(loaded.messages, [p.id for p in pending], subruns=c.subruns,
                              replayed=replayed_answers(loaded.messages, loaded.message_steps, loaded.usage))
        c.show_allowed(loaded.meta.always_allowed)
        c.tally.loaded(loaded.usage, last_message_step(loaded.messages, loaded.message_steps),
                       truncated=loaded.meta.truncated, subtree=[(s.step, s.rows()) for s in c.subruns.values()])
        c.render_usage()
        c.layout.show_conversation(loaded.messages, c.subruns)
        if pending:
            for p in pending:
                c.board.show_pending(p, group="stored")
            c.say(c.board.waiting_text())
        elif loaded.meta.status == "failed" and loaded.meta.error:
            c.say(f"the last run failed: {loaded.meta.error}", error=True)
        elif loaded.meta.status == "stopped":  # the marker the live view showed when it ended
            c.say(f"the last run stopped: {loaded.meta.stop_reason or 'a limit'}")
        elif loaded.meta.status == "cancelled":
            c.say("the last run was cancelled (Stop)")
        elif loaded.meta.status == "running" and self.foreign is None:
            c.say("a run on this thread is going on elsewhere (or its process ended without finishing it); "
                  "this view shows the thread as stored when it opened")

    async def catch_up(self) -> None:
        """A run ended without its last event: show what waits, as stored."""
        c = self.controller
        loaded = await c.agent.store.load(c.thread)
        if loaded is not None:
            c.board.reload(loaded.open_pending())
            c.layout.show_conversation(loaded.messages, c.subruns)
            c.show_allowed(loaded.meta.always_allowed)
        c.kick()

    def _heard(self, run_id: str | None, item: Any) -> None:
        """A notice, on the thread of the run that sent it: hand it to the view's loop."""
        if run_id is not None and run_id in self.own:
            return  # the controller's own run: its events come by `on_event`
        self._mail[0] += 1
        self.controller.schedule(self.on_notice, run_id, item)

    def on_notice(self, run_id: str | None, item: Any) -> None:
        """What happened to the thread elsewhere (on the controller's loop)."""
        self._mail[1] += 1
        c, kind = self.controller, item.kind
        if kind == "tool-outcome":
            call = c.board.late_outcome(item)
            if call is not None:
                ended = "failed" if item.status == "failed" else "finished"
                c.say(f"{call.name} {ended} after the stop; the model was told it is not known whether it "
                      "completed (the row shows what it returned)", keep=True)
            return
        if kind == "thread-changed":
            self.read_later(self.catch_up())
            return
        if run_id is None or run_id in self.own:
            return
        if kind == "run-started":
            self.foreign = run_id
            c.run_started(prompt=item.prompt, own=False)
            return
        if self.foreign != run_id:  # the view opened while that run was going on
            self.foreign = run_id
            c.run_started(prompt=None, own=False)
        if kind in ENDED:
            self.foreign = None
            c.run_ended(kind, item.result, own=False)
            c.kick()
            return
        c.on_event(item)
        self.say_overtaken()

    def say_overtaken(self) -> None:
        """Say which decisions made here were overtaken by a decision elsewhere (and forget them)."""
        board = self.controller.board
        if board.overtaken:
            self.controller.say("; ".join(decided_text(call) for call in board.overtaken), keep=True)
            board.overtaken.clear()

    async def after_failure(self, exc: BaseException, message: UserMessage | None,
                            decisions: Decisions | None) -> None:
        """The controller's run failed before it started: catch up with the store, say plainly
        why (for a stale view), and send the decisions on calls that still wait again (once)."""
        c = self.controller
        plain = f"{type(exc).__name__}: {exc}"
        c.say(plain, error=True)
        if not isinstance(exc, _STALE):
            c.queue.run_ended("failed")  # the queue waits for Send
            await self.catch_up()
            return
        loaded = await c.agent.store.load(c.thread)
        if loaded is None:
            return
        pending = loaded.open_pending()
        elsewhere = catch_up(c.board, loaded.messages, pending)
        c.subruns = await _subthreads(c, loaded)
        c.tally.loaded(loaded.usage, last_message_step(loaded.messages, loaded.message_steps),
                       truncated=loaded.meta.truncated, subtree=[(s.step, s.rows()) for s in c.subruns.values()])
        c.render_usage()
        c.layout.show_conversation(loaded.messages, c.subruns)
        lines = [decided_text(call) for call in elsewhere]
        if isinstance(exc, ArgumentsMismatchError):
            lines.append("the arguments of a waiting call changed since they were shown (in another process or "
                         "view): decide again on what is shown now")
        elif isinstance(exc, ConflictError):
            lines.append(f"not sent: {exc}")
        elif isinstance(exc, PendingCallsError) and message is not None:
            lines.append("this thread has tool calls waiting (from another process, or after a restart): decide "
                         "them first; your message is queued and sent after")
        elif not lines:
            lines.append(plain)
        if message is not None:  # not sent: out of the conversation, back at the head of the queue
            c.layout.unsend(message)
            c.queue.not_sent(message, hold=not isinstance(exc, PendingCallsError))
            c.layout.show_queue(c.queue.messages)
        again = 0
        if decisions is not None and not isinstance(exc, (ArgumentsMismatchError, ConflictError)):
            again = self._decide_again(decisions, {p.id: p for p in pending})
        if again:
            lines.append(f"your decision{'s' if again != 1 else ''} on the call{'s' if again != 1 else ''} "
                         "that still wait went out again")
        if isinstance(exc, ConflictError):
            c.say("; ".join(lines), error=True)
        else:
            c.say(c.board.waiting_text())
            c.say("; ".join(lines), keep=True)
        c.kick()

    def _decide_again(self, decisions: Decisions, waiting: dict[str, Any]) -> int:
        """Record again the decisions of a failed resume whose calls still wait with the same
        arguments; returns how many."""
        c, n = self.controller, 0
        for item in decisions.items:
            now = waiting.get(item.call_id)
            call = c.board.calls.get(item.call_id)
            if now is None or call is None or (item.shown is not None and item.shown.args_hash != now.args_hash):
                continue
            action = "always" if item.action == "approve" and now.name in decisions.always_allowed else item.action
            field = _PAYLOAD.get(action)
            if c.board.decide(item.call_id, action, getattr(item, field) if field else None):
                n += 1
        return n


async def _subthreads(c: ChatController, loaded: ThreadState) -> dict[str, SubThread]:
    """The stored threads of the sub-agents `loaded`'s agent calls ran (none when it made none,
    or they cannot be read: the view shows the rest)."""
    try:
        return await load_subthreads(c.agent.store, loaded, c.agent.tools)
    except Exception:
        return {}


def last_message_step(messages: Sequence[Message], steps: Sequence[int]) -> int:
    """The step at which the last message a person sent was stored (0 for none): the calls after
    it make the last turn."""
    for message, step in zip(reversed(messages), reversed(steps), strict=False):
        if message.kind == "user":
            return step
    return 0

