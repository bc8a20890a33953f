"""The tool calls a chat view shows: which wait for a person, and the decisions made on them.

Owns `CallState` (what is known of one call), `DecisionBatch` (decisions queued per call and sent
together as one `Decisions` resume; "always allow" approves every shown call of that tool) and
`CallBoard` (the calls by id, kept in step with the rows that show them, `CallRows`). The
`ChatController` feeds it run events (of its own runs and of runs elsewhere on the thread),
decisions and late outcomes; `RunLog`'s `ToolRow`s draw it.

A call can be decided elsewhere (in code, another view, another process): when its status moves
on without this view, the board forgets its buttons and any decision made here but not sent yet
(`CallBoard.overtaken`), and `decided_text` says plainly who decided what.

Pure Python: imports the core's approvals, `nbagent.display.html`'s pure helpers, and
`_run.nested` to check the edit of a sub-agent's call against its tool (no ipywidgets, no asyncio).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..approvals import Decisions, PendingCall
from ..display.html import shown_status, unshown_chars

__all__ = ["CALL_EVENTS", "STILL_RUNNING", "TICKING", "WAITING", "CallBoard", "CallRows", "CallState",
           "DecisionBatch", "call_args", "decided_text", "validate_args"]

WAITING = ("needs approval", "needs answer")
"""The statuses of a call that waits for a person."""
STILL_RUNNING = "still running"
"""A blocking (sync) tool whose run was stopped: a thread cannot be interrupted, so it goes on;
its row changes again when the function really ends (``done after stop`` / ``failed after stop``)."""
TICKING = ("running", STILL_RUNNING)
"""The statuses whose time counts up while shown."""
_HOW = {"approved": "approved", "edited": "approved with edited arguments", "denied": "denied",
        "client": "answered", "always-allowed": "approved (always allowed)",
        "repeat-denied": "denied again (the same call as one denied earlier)"}
CALL_EVENTS = ("tool-call-started", "tool-call-finished", "approval-requested", "client-call-requested")
"""The run events `CallBoard.on_event` takes."""


def call_args(call: Any) -> Any:
    """A `ToolCall`'s arguments as shown: parsed, or the raw JSON text when they did not parse."""
    return call.args if call.args is not None else call.args_json


class CallRows(Protocol):
    """How the calls are shown: one row per call (`RunLog` draws them as `ToolRow`s)."""

    def add_call(self, call_id: str, name: str, args: Any, group: object) -> None:
        """A new row; rows of one `group` (a run's step) share a table, None: a table of its own;
        ``(agent call id, step)``: a sub-agent's call, in that agent call's steps."""

    def update_call(self, call_id: str, status: str, result: str | None = None, *,
                    is_error: bool = False, duration_s: float | None = None, message: Any = None) -> None:
        """A call's new status (and its result when it ended; `message`: the whole
        `ToolResultMessage`, for its images, display and edited arguments)."""

    def set_call_args(self, call_id: str, args: Any) -> None:
        """The arguments a row shows when its call does not wait."""

    def show_pending(self, pending: PendingCall, unavailable: str | None = None) -> None:
        """The call waits for a person: show its full arguments and the decision controls (with
        `unavailable`, why it cannot run here: no Approve, Edit or answer, only Deny)."""

    def lock_call(self, call_id: str) -> None:
        """A decision was made on the call: its controls go, it shows "queued"."""


@dataclass(slots=True)
class CallState:
    """What the controller knows of one tool call shown in the view."""

    id: str
    name: str
    args: Any
    status: str = "queued"
    pending: PendingCall | None = None
    """The call as shown to the person while it waits (decisions carry this object)."""
    decided: bool = False
    unavailable: str | None = None
    """Why the call cannot run in this kernel (its tool is not registered), or None."""
    outcome: Any = None
    """Its `ToolResultMessage` once it ended (who decided, when), or None."""

    @property
    def waiting(self) -> bool:
        """The call waits for a decision nobody made yet."""
        return self.status in WAITING and not self.decided


class DecisionBatch:
    """The decisions made on waiting calls and not sent yet: one resume carries all of them.

    A decision names the `PendingCall` that was shown, so it binds to the arguments the person
    saw. ``always`` approves the call and every other shown approval of the same tool.
    """

    def __init__(self) -> None:
        self.shown: dict[str, PendingCall] = {}
        """The waiting calls as the person saw them, by call id."""
        self.always_allowed: set[str] = set()
        """The tools approved for the rest of the thread, as far as this view knows."""
        self._decided: dict[str, tuple[str, Any, PendingCall]] = {}

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._decided

    def __bool__(self) -> bool:
        return bool(self._decided)

    def show(self, pending: PendingCall) -> bool:
        """`pending` is shown to the person; False if it was already decided (the decision made
        while the run was still going stays)."""
        if pending.id in self._decided:
            return False
        self.shown[pending.id] = pending
        return True

    def decide(self, call_id: str, action: str, payload: Any = None) -> list[str]:
        """Record a decision (approve, deny, edit, result, always); returns the ids it decided
        (none when the call is not shown or already decided)."""
        shown = self.shown.get(call_id)
        if shown is None or call_id in self._decided:
            return []
        if action == "always" and shown.nested:  # a sub-agent's tool: only this call (never its thread's)
            action = "approve"
        self._decided[call_id] = (action, payload, shown)
        ids = [call_id]
        if action == "always":
            self.always_allowed.add(shown.name)
            for other_id, other in list(self.shown.items()):
                if (other.name == shown.name and other_id not in self._decided and other.reason == "approval"
                    and not other.nested):
                    self._decided[other_id] = ("approve", None, other)
                    ids.append(other_id)
        return ids

    def drop(self, call_id: str) -> bool:
        """Forget the call: it was decided elsewhere (a decision made here and not sent yet is
        dropped: True)."""
        self.shown.pop(call_id, None)
        return self._decided.pop(call_id, None) is not None

    def take(self) -> Decisions | None:
        """The recorded decisions as one `Decisions` (and forget them); None when there is none."""
        if not self._decided:
            return None
        decided, self._decided = self._decided, {}
        decisions = Decisions()
        for call_id, (action, payload, shown) in decided.items():
            self.shown.pop(call_id, None)
            if action in ("approve", "always"):
                decisions = decisions.approve(shown)
                if action == "always" and shown.name not in decisions.always_allowed:
                    decisions = decisions.always_allow(shown.name)
            elif action == "deny":
                decisions = decisions.deny(shown, payload)
            elif action == "edit":
                decisions = decisions.edit(shown, payload)
            elif action == "result":
                decisions = decisions.result(shown, payload)
        return decisions


class CallBoard:
    """The tool calls shown, by id: their status, which wait for a person, the decisions made
    (`decisions`); every change is also shown on `rows`, and ``show_bulk(True)`` is called while
    two or more calls wait for approval (``show_bulk(False)`` when not). ``unavailable(pending)``
    says why a waiting call cannot run here (its tool is not registered), or None."""

    def __init__(self, rows: CallRows, show_bulk: Callable[[bool], None],
                 unavailable: Callable[[PendingCall], str | None] = lambda _: None) -> None:
        self.rows = rows
        self._show_bulk = show_bulk
        self._unavailable = unavailable
        self.calls: dict[str, CallState] = {}
        self.decisions = DecisionBatch()
        self.overtaken: list[CallState] = []
        """Calls decided here whose decision was not sent before the call was decided elsewhere
        (the controller says so, then clears the list)."""

    @property
    def waiting(self) -> list[CallState]:
        """The calls that wait for a decision nobody made yet."""
        return [c for c in self.calls.values() if c.waiting]

    def waiting_text(self) -> str:
        """"waiting for you: N tool calls" ("" when none waits)."""
        n = len(self.waiting)
        return f"waiting for you: {n} tool call{'s' if n != 1 else ''}" if n else ""

    @property
    def approvals(self) -> list[CallState]:
        """The calls waiting for approval (what Approve all / Deny all decide)."""
        return [c for c in self.calls.values()
                if c.status == "needs approval" and not c.decided and c.pending is not None and not c.unavailable]

    @property
    def unreadable(self) -> list[CallState]:
        """The calls waiting for approval whose arguments are too long for their row to show whole
        (`unshown_chars`): Approve all leaves them to their own row's Approve, after Edit."""
        return [c for c in self.approvals if c.pending is not None and unshown_chars(c.pending.args)]

    def track(self, call_id: str, name: str, args: Any, group: object = None) -> CallState:
        """The call's state; its row is made on first sight (in `group`'s table)."""
        call = self.calls.get(call_id)
        if call is None:
            call = self.calls[call_id] = CallState(call_id, name, args)
            self.rows.add_call(call_id, name, args, group)
        return call

    def set_status(self, call: CallState, status: str, result: str | None = None, *,
                   is_error: bool = False, duration_s: float | None = None, message: Any = None) -> None:
        """A new status for `call` (and its result when it ended; `message`: the whole result). A
        call that no longer waits keeps no buttons here; a decision on it made here and not sent is
        overtaken."""
        call.status = status
        if status not in WAITING and call.pending is not None:
            if self.decisions.drop(call.id):
                self.overtaken.append(call)
            call.decided = True
        self.rows.update_call(call.id, status, result, is_error=is_error, duration_s=duration_s, message=message)

    def set_args(self, call: CallState, args: Any) -> None:
        """The arguments `call` has now (e.g. as the store has them)."""
        call.args = args
        self.rows.set_call_args(call.id, args)

    def show_pending(self, pending: PendingCall, group: object = None) -> None:
        """`pending` waits for a person (unless it was decided while the run was still going:
        that decision stays). A call that cannot run here offers only Deny, and says why."""
        call = self.track(pending.id, pending.name, pending.args, group)
        if not self.decisions.show(pending):
            return
        unavailable = self._unavailable(pending)
        call.pending, call.decided, call.unavailable, call.outcome = pending, False, unavailable, None
        call.status = "needs answer" if pending.reason == "client" else "needs approval"
        self.rows.show_pending(pending, unavailable)
        self.update_bulk()

    def on_event(self, event: Any) -> None:
        """A run event about a tool call (one of `CALL_EVENTS`): it started, finished, or waits.
        A sub-agent's call's row goes in its agent call's steps (group ``(agent call, step)``)."""
        if event.kind in ("approval-requested", "client-call-requested"):
            self.show_pending(event.pending)
            return
        group = event.step if event.agent_call is None else (event.agent_call, event.step)
        call = self.track(event.call.id, event.call.name, call_args(event.call), group)
        if event.kind == "tool-call-started":
            self.set_status(call, "running")
        else:
            self.ended(call, event.result)

    def ended(self, call: CallState, result: Any) -> None:
        """`call` ended with `result` (a `ToolResultMessage`)."""
        call.outcome = result
        self.set_status(call, shown_status(result), result.whole_text, is_error=result.is_error,
                        duration_s=result.duration_s, message=result)

    def reload(self, pending: list[PendingCall]) -> None:
        """The calls waiting as the store has them (a resume failed before it applied the
        decisions): show them again with the stored arguments, except those decided since."""
        for p in pending:
            if p.id not in self.decisions:
                self.set_args(self.track(p.id, p.name, p.args), p.args)
                self.show_pending(p)

    def decide(self, call_id: str, action: str, payload: Any = None) -> bool:
        """Record a decision (approve, deny, edit, result, always) and lock the rows it decides;
        False when the call does not wait or was decided already."""
        ids = self.decisions.decide(call_id, action, payload)
        for decided in ids:
            call = self.calls[decided]
            call.decided, call.status = True, "queued"
            self.rows.lock_call(decided)
        if ids:
            self.update_bulk()
        return bool(ids)

    def update_bulk(self) -> None:
        """Show Approve all / Deny all while two or more calls wait for approval."""
        self._show_bulk(len(self.approvals) >= 2)

    def run_ended(self, results: dict[str, Any], pending_ids: set[str], *, cancelled: bool) -> None:
        """A run ended: the calls it left queued or running get their result (`results`, tool
        results by call id), or "cancelled"; calls in `pending_ids` wait on."""
        for call_id, call in self.calls.items():
            if call.status in ("queued", "running") and call_id not in pending_ids:
                r = results.get(call_id)
                if r is not None and cancelled and r.status == "interrupted" and call.status == "running":
                    call.outcome = r  # a blocking tool goes on in its thread: its row says so
                    self.set_status(call, STILL_RUNNING, "stop requested; this tool cannot be interrupted "
                                    "and is still running (this row changes when it ends)")
                elif r is not None:
                    self.ended(call, r)
                elif cancelled:
                    self.set_status(call, "cancelled")
                elif any(p.startswith(call_id + "/") for p in pending_ids):  # its sub-agent's calls wait
                    self.set_status(call, "waiting")
        self.update_bulk()

    @property
    def still_running(self) -> list[CallState]:
        """Blocking tools of a stopped run that have not ended yet."""
        return [c for c in self.calls.values() if c.status == STILL_RUNNING]

    def late_outcome(self, notice: Any) -> CallState | None:
        """A blocking tool that outlived its stopped run ended (a `ToolOutcomeNotice`): its row
        shows what it returned; returns the call (None when this view does not show it)."""
        call = self.calls.get(notice.call_id)
        if call is None or call.status not in (STILL_RUNNING, "running", "queued"):
            return None
        failed = notice.status == "failed"
        self.set_status(call, "failed after stop" if failed else "done after stop", notice.content,
                        is_error=failed, duration_s=notice.duration_s)
        return call


def validate_args(tools: Mapping[str, Any], name: str, args: dict[str, Any], pending: PendingCall | None = None) -> Any:
    """Check edited arguments against tool `name`'s schema (raises when they do not fit; no
    check for a tool that is not registered). A sub-agent's call (`pending` nested) is checked
    against that sub-agent's tool."""
    if pending is not None and pending.nested:
        from .._run.nested import owner_tools

        tools = owner_tools(tools, pending) or {}
    tool = tools.get(name)
    return None if tool is None else tool.validate(args)


def decided_text(call: CallState) -> str:
    """What to say when a person acts on `call` but it was decided already (elsewhere): who
    decided what and when, as far as the view knows."""
    result = call.outcome
    if result is None or result.decision is None:
        return (f"{call.name} was already decided elsewhere (in code or another view): it is {call.status} "
                "now; your decision was not sent")
    who = f" by {result.decided_by}" if result.decided_by else ""
    when = time.strftime(" at %H:%M:%S", time.localtime(result.decided_at)) if result.decided_at else ""
    return (f"{call.name} was already {_HOW.get(result.decision, result.decision)}{who}{when} (in code or "
            f"another view): it is {call.status} now; your decision was not sent")
