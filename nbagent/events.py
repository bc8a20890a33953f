"""Stream events: what `Agent.stream` yields, each with a plain lowercase `kind`.

Owns the event shapes and `PendingCall`; imports messages and usage only. Text events carry the
`delta` and the accumulated `snapshot`, so a view can re-render idempotently.

| kind                   | class                | fields                                   |
|------------------------|----------------------|------------------------------------------|
| run-started            | RunStarted           | run_id, thread                           |
| text-delta             | TextDelta            | delta, snapshot, step                    |
| reasoning-delta        | ReasoningDelta       | delta, step                              |
| model-response         | ModelResponseEvent   | message (the whole answer), step         |
| tool-call-started      | ToolCallStarted      | call, step                               |
| tool-call-finished     | ToolCallFinished     | call, result (ToolResultMessage), step   |
| approval-requested     | ApprovalRequested    | pending (PendingCall)                    |
| client-call-requested  | ClientCallRequested  | pending (PendingCall)                    |
| model-retry            | ModelRetryEvent      | attempt, error, delay_s (clear partial text) |
| usage                  | UsageEvent           | call (ModelCallUsage), total (Usage)     |
| run-paused / run-completed / run-stopped / run-failed / run-cancelled | RunEnded | result |
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .messages import AssistantMessage, ToolCall, ToolResultMessage
from .usage import ModelCallUsage, Usage

if TYPE_CHECKING:
    from .result import RunResult

__all__ = [
    "ApprovalRequested",
    "ClientCallRequested",
    "Event",
    "ModelResponseEvent",
    "ModelRetryEvent",
    "PendingCall",
    "ReasoningDelta",
    "RunEnded",
    "RunStarted",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "UsageEvent",
    "args_hash",
]


def args_hash(args: Any) -> str:
    """A stable hash of tool arguments, so a decision binds to the exact arguments a person saw."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(slots=True)
class PendingCall:
    """A tool call waiting for a person: a decision (``reason="approval"``) or a result
    (``reason="client"``, a tool with no body)."""

    id: str
    name: str
    args: dict[str, Any]
    reason: Literal["approval", "client"] = "approval"
    description: str = ""
    """The tool's description, for the person deciding."""

    @property
    def args_hash(self) -> str:
        return args_hash(self.args)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "args": self.args,
            "reason": self.reason,
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingCall:
        return cls(data["id"], data["name"], data["args"], data.get("reason", "approval"),
                   data.get("description", ""))


class TextAccumulator:
    """Collects text deltas; builds snapshots lazily and incrementally (cheap per delta)."""

    __slots__ = ("_joined", "_joined_n", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._joined = ""
        self._joined_n = 0

    def snapshot(self, n: int | None = None) -> str:
        n = len(self.parts) if n is None else n
        if n < self._joined_n:
            return "".join(self.parts[:n])
        if n > self._joined_n:
            self._joined += "".join(self.parts[self._joined_n : n])
            self._joined_n = n
        return self._joined


@dataclass(slots=True)
class RunStarted:
    run_id: str
    thread: str | None
    kind: Literal["run-started"] = "run-started"


@dataclass(slots=True)
class TextDelta:
    """New answer text. `snapshot` is all the text of this model call so far."""

    delta: str
    step: int
    _acc: TextAccumulator = field(repr=False)
    _n: int = field(repr=False)
    kind: Literal["text-delta"] = "text-delta"

    @property
    def snapshot(self) -> str:
        return self._acc.snapshot(self._n)


@dataclass(slots=True)
class ReasoningDelta:
    delta: str
    step: int
    kind: Literal["reasoning-delta"] = "reasoning-delta"


@dataclass(slots=True)
class ModelResponseEvent:
    """The model's whole answer of one step (after its deltas, or instead of them)."""

    message: AssistantMessage
    step: int
    kind: Literal["model-response"] = "model-response"


@dataclass(slots=True)
class ToolCallStarted:
    call: ToolCall
    step: int
    kind: Literal["tool-call-started"] = "tool-call-started"


@dataclass(slots=True)
class ToolCallFinished:
    """A tool call ended: `result.content`, `result.is_error`, `result.status`, `result.duration_s`."""

    call: ToolCall
    result: ToolResultMessage
    step: int
    kind: Literal["tool-call-finished"] = "tool-call-finished"


@dataclass(slots=True)
class ApprovalRequested:
    pending: PendingCall
    kind: Literal["approval-requested"] = "approval-requested"


@dataclass(slots=True)
class ClientCallRequested:
    pending: PendingCall
    kind: Literal["client-call-requested"] = "client-call-requested"


@dataclass(slots=True)
class ModelRetryEvent:
    """A model call failed and will be retried after `delay_s`: discard its partial text."""

    attempt: int
    error: str
    delay_s: float
    step: int
    kind: Literal["model-retry"] = "model-retry"


@dataclass(slots=True)
class UsageEvent:
    call: ModelCallUsage
    total: Usage
    kind: Literal["usage"] = "usage"


RunEndKind = Literal["run-paused", "run-completed", "run-stopped", "run-failed", "run-cancelled"]


@dataclass(slots=True)
class RunEnded:
    """The last event of a run; `kind` names how it ended."""

    kind: RunEndKind
    result: RunResult


Event = (
    RunStarted
    | TextDelta
    | ReasoningDelta
    | ModelResponseEvent
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalRequested
    | ClientCallRequested
    | ModelRetryEvent
    | UsageEvent
    | RunEnded
)
