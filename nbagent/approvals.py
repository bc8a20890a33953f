"""Approvals: calls waiting for a person, and the decisions that continue them.

Owns `PendingCall` (a call waiting for a decision or a client's result), `args_hash` (what binds
a decision to the arguments a person saw), `Decision` (one recorded decision, kept with the
thread until the call runs) and `Decisions` (what a person decided about a paused run: the value
`Agent.resume` takes). `Decisions.resolve` is the one place where decisions are checked against
what is waiting; the keyword shorthand of `Agent.resume` (``approve=``, ``deny=``, ``edit=``,
``results=``, ``always_allow=``), the view's buttons and code all build a `Decisions`.

Imports messages and exceptions only; the tools it checks edits against come in as an argument.

```python
from nbagent import Decisions

paused = agent.run_sync("Refund order 42 and ask why")
refund, question = paused.pending
decisions = Decisions().edit(refund, {"order_id": "42", "amount": 99.0}).result(question, "It broke.")
result = agent.resume_sync(paused, decisions=decisions)
```
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .exceptions import ArgumentsMismatchError, InvalidArgumentsError, UnknownCallError, UserError
from .messages import ToolResultMessage

__all__ = [
    "CallDecision",
    "CallRef",
    "Decision",
    "DecisionAction",
    "DecisionLabel",
    "Decisions",
    "PendingCall",
    "PendingReason",
    "args_hash",
]

PendingReason = Literal["approval", "client"]
DecisionAction = Literal["approve", "edit", "deny", "result", "always"]
"""``approve`` (run as asked), ``edit`` (run with changed arguments), ``deny`` (the model gets an
error result with the reason), ``result`` (a client tool's answer), ``always`` (run because the
tool was always-allowed)."""
DecisionLabel = Literal["approved", "edited", "denied", "client", "always-allowed", "repeat-denied"]
"""How a decision is recorded on the tool result (`ToolResultMessage.decision`). ``repeat-denied``:
the same call (tool and arguments) as one a person denied earlier in the turn, denied again
without asking; it carries that denial's reason, time and person."""

_LABELS: dict[str, DecisionLabel] = {
    "approve": "approved",
    "edit": "edited",
    "deny": "denied",
    "result": "client",
    "always": "always-allowed",
}


def args_hash(args: Any) -> str:
    """A stable hash of tool arguments, so a decision binds to the exact arguments a person saw."""
    import hashlib  # here: its OpenSSL binding is a few ms of `import nbagent` (then a dict look-up)

    text = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(slots=True)
class PendingCall:
    """A tool call waiting for a person: a decision (``reason="approval"``) or a result
    (``reason="client"``, a tool with no body)."""

    id: str
    name: str
    args: dict[str, Any]
    reason: PendingReason = "approval"
    description: str = ""
    """The tool's description, for the person deciding."""
    path: tuple[str, ...] = ()
    """The agents from the run's top agent to the one whose call this is, top first:
    ``("boss",)`` for the top agent's own call, ``("boss", "researcher")`` for a call of its
    sub-agent ``researcher`` (see `Agent.as_tool`); () in records written before sub-agents.
    A sub-agent's call has an id unique in the whole tree (``"<parent call id>/<its own id>"``)."""

    @property
    def args_hash(self) -> str:
        return args_hash(self.args)

    @property
    def nested(self) -> bool:
        """True for a call of a sub-agent (one that waits deeper in the tree than the top agent)."""
        return len(self.path) > 1

    @property
    def label(self) -> str:
        """What a person reads for the call: its tool's name, behind the sub-agents it waits in
        (``"researcher → delete_file"``)."""
        return " → ".join((*self.path[1:], self.name))

    def to_dict(self) -> dict[str, Any]:
        data = {
            "id": self.id,
            "name": self.name,
            "args": self.args,
            "reason": self.reason,
            "description": self.description,
        }
        if self.path:
            data["path"] = list(self.path)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingCall:
        return cls(data["id"], data["name"], data["args"], data.get("reason", "approval"),
                   data.get("description", ""), tuple(data.get("path") or ()))


@dataclass(slots=True)
class Decision:
    """A person's decision on one pending call, bound to the arguments they saw."""

    action: DecisionAction
    args_hash: str
    reason: str | None = None
    """Why it was denied (deny only)."""
    args: dict[str, Any] | None = None
    """The edited arguments (edit only)."""
    value: Any = None
    """The client's result (result only)."""
    time: float = 0.0
    """When the decision was made (seconds since the epoch)."""
    by: str | None = None
    """Who made it, when known."""

    @property
    def label(self) -> DecisionLabel:
        """The decision as recorded on the tool result."""
        return _LABELS[self.action]

    def stamp(self, result: ToolResultMessage) -> ToolResultMessage:
        result.decision, result.decided_by, result.decided_at = self.label, self.by, self.time or None
        return result

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        data = dict(data)
        if data.get("action") == "approve" and data.get("args") is not None:
            data["action"] = "edit"  # threads written before "edit" was its own action
        return cls(**data)


class _Validates(Protocol):
    """What `Decisions.resolve` needs of a tool: `nbagent.Tool` has it."""

    def validate(self, args: dict[str, Any]) -> Any: ...


CallRef = str | PendingCall
"""A call id, or the `PendingCall` that was shown (which also binds its arguments)."""


@dataclass(frozen=True, slots=True)
class CallDecision:
    """One entry of a `Decisions`: what was decided for one call, before it is checked."""

    call_id: str
    action: DecisionAction
    shown: PendingCall | None
    """The call as it was shown, when the decision named it by its `PendingCall`."""
    reason: str | None = None
    args: dict[str, Any] | None = None
    value: Any = None


@dataclass(frozen=True, slots=True)
class Decisions:
    """What a person decided about the calls of a paused run; give it to ``Agent.resume``.

    Each method returns a new `Decisions` with one more decision, so they chain. A call is named
    by its id or by the `PendingCall` that was shown; a `PendingCall` also binds the decision to
    the arguments it carries, so it can never apply to arguments nobody saw
    (`ArgumentsMismatchError` when the waiting call has changed). Calls not named stay pending.

    Attributes:
        by: who decided, recorded with the time on each decided tool result.
    """

    items: tuple[CallDecision, ...] = ()
    always_allowed: tuple[str, ...] = ()
    """Tool names approved for the rest of the thread (their waiting calls are approved too)."""
    by: str | None = None

    def _with(self, *asked: CallDecision) -> Decisions:
        return dataclasses.replace(self, items=(*self.items, *asked))

    def approve(self, *calls: CallRef) -> Decisions:
        """Run these calls as they were asked."""
        return self._with(*(CallDecision(_id(c), "approve", _shown(c)) for c in calls))

    def deny(self, call: CallRef, reason: str | None = None) -> Decisions:
        """Do not run this call; the model gets an error result with the reason."""
        return self._with(CallDecision(_id(call), "deny", _shown(call), reason=reason))

    def edit(self, call: CallRef, args: Mapping[str, Any]) -> Decisions:
        """Run this call with changed arguments (validated against the tool's schema)."""
        if not isinstance(args, Mapping):
            raise InvalidArgumentsError(f"edit for call {_id(call)!r} must be a dict of arguments")
        return self._with(CallDecision(_id(call), "edit", _shown(call), args=dict(args)))

    def result(self, call: CallRef, value: Any) -> Decisions:
        """Answer a client tool's call (a tool with no body) with this value."""
        return self._with(CallDecision(_id(call), "result", _shown(call), value=value))

    def always_allow(self, *tools: str) -> Decisions:
        """Approve these tools for the rest of the thread."""
        return dataclasses.replace(self, always_allowed=(*self.always_allowed, *tools))

    def extended(self, other: Decisions) -> Decisions:
        """These decisions followed by `other`'s (its `by` wins when set)."""
        return Decisions((*self.items, *other.items), (*self.always_allowed, *other.always_allowed),
                         other.by if other.by is not None else self.by)

    def decided_by(self, who: str | None) -> Decisions:
        """The same decisions, recorded as made by `who`."""
        return dataclasses.replace(self, by=who)

    def __bool__(self) -> bool:
        return bool(self.items or self.always_allowed)

    @classmethod
    def of(
        cls,
        *,
        approve: Iterable[CallRef] = (),
        deny: Mapping[str, str | None] | Iterable[CallRef] = (),
        edit: Mapping[str, Mapping[str, Any]] | None = None,
        results: Mapping[str, Any] | None = None,
        always_allow: Iterable[str] = (),
        by: str | None = None,
    ) -> Decisions:
        """The keyword shorthand of `Agent.resume` as a `Decisions`."""
        if isinstance(approve, (str, PendingCall)):
            approve = [approve]
        if isinstance(always_allow, str):
            always_allow = [always_allow]
        if edit is not None and not isinstance(edit, Mapping):
            raise UserError("edit= must be a dict {call_id: new_args}")
        if results is not None and not isinstance(results, Mapping):
            raise UserError("results= must be a dict {call_id: value}")
        decisions = cls(by=by).approve(*approve)
        if isinstance(deny, (str, PendingCall)):
            deny = [deny]
        deny_items = deny.items() if isinstance(deny, Mapping) else ((d, None) for d in deny)
        for call, reason in deny_items:
            decisions = decisions.deny(call, reason)
        for call_id, args in (edit or {}).items():
            decisions = decisions.edit(call_id, args)
        for call_id, value in (results or {}).items():
            decisions = decisions.result(call_id, value)
        return decisions.always_allow(*always_allow)

    def resolve(
        self,
        pending: Iterable[PendingCall],
        tools: Mapping[str, _Validates],
        *,
        thread: str,
        shown: Iterable[PendingCall] = (),
        now: float | None = None,
        tools_of: Callable[[PendingCall], Mapping[str, _Validates] | None] | None = None,
    ) -> dict[str, Decision]:
        """Check each decision against the calls waiting now; return the recorded `Decision`s.

        Args:
            pending: the calls waiting on the thread (from the store).
            tools: the agent's tools by name (edits are validated, always-allowed names checked).
            thread: the thread id, for error messages.
            shown: the calls as a person saw them (e.g. a paused `RunResult`'s ``pending``), for
                decisions given by call id.
            tools_of: the tools of the sub-agent a nested call (`PendingCall.nested`) belongs
                to, for its edits (None: that agent is not known here; an edit of its call is
                refused).

        Raises:
            UnknownCallError: a decision names a call that is not waiting, or an edit names a
                tool the agent does not have.
            ArgumentsMismatchError: the call's arguments changed since they were shown.
            InvalidArgumentsError: edited arguments do not fit the tool's schema.
            UserError: two decisions for one call, a client tool approved instead of answered,
                a server tool answered, or ``always_allow`` names an unknown tool.
        """
        waiting = {p.id: p for p in pending}
        seen = {p.id: p for p in shown}
        now = time.time() if now is None else now
        out: dict[str, Decision] = {}
        for asked in self.items:
            current = waiting.get(asked.call_id)
            if current is None:
                names = ", ".join(f"{p.id} ({p.name})" for p in waiting.values()) or "none"
                raise UnknownCallError(
                    f"no call {asked.call_id!r} is waiting on thread {thread!r}; waiting: {names}")
            was = asked.shown or seen.get(asked.call_id, current)
            if was.args_hash != current.args_hash:
                raise ArgumentsMismatchError(
                    f"the decision for call {asked.call_id!r} was made for arguments {was.args!r}, but "
                    f"the waiting call has {current.args!r}; decide again on what is waiting now"
                )
            if current.id in out:
                raise UserError(f"call {current.id!r} got more than one decision")
            owner = tools if not current.nested else (tools_of(current) if tools_of is not None else None)
            out[current.id] = _checked(asked, current, owner or {}, now, self.by)
        for name in self.always_allowed:
            if name not in tools:
                raise UserError(f"always_allow names unknown tool {name!r}")
        return out


def _checked(asked: CallDecision, call: PendingCall, tools: Mapping[str, _Validates], now: float,
             by: str | None) -> Decision:
    client = call.reason == "client"
    if asked.action == "result":
        if not client:
            raise UserError(f"call {call.id!r} ({call.name}) runs on the server; approve or deny it instead")
        return Decision("result", call.args_hash, value=asked.value, time=now, by=by)
    if asked.action in ("approve", "edit") and client:
        raise UserError(f"call {call.id!r} ({call.name}) is a client tool: give its result with "
                        "results={id: value}")
    if asked.action == "edit":
        tool = tools.get(call.name)
        if tool is None:
            whose = f"sub-agent {call.path[-1]!r}" if call.nested else "this agent"
            raise UnknownCallError(f"call {call.id!r} is for tool {call.name!r}, which {whose} does not have")
        assert asked.args is not None
        tool.validate(asked.args)
        return Decision("edit", call.args_hash, args=dict(asked.args), time=now, by=by)
    return Decision(asked.action, call.args_hash, reason=asked.reason, time=now, by=by)


def _id(call: CallRef) -> str:
    if isinstance(call, PendingCall):
        return call.id
    if isinstance(call, str):
        return call
    raise UserError(f"a decision names a call by its id or its PendingCall, got {type(call).__name__}")


def _shown(call: CallRef) -> PendingCall | None:
    return call if isinstance(call, PendingCall) else None

