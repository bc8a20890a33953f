"""Stream events: what `Agent.stream` yields, each with a plain lowercase `kind`.

Owns the event shapes; imports approvals (`PendingCall`), guards (`GuardCheck`), messages and
usage only. Text events carry the `delta` and the accumulated `snapshot`, so a view can re-render
idempotently.

| kind                   | class                    | fields                                       |
|------------------------|--------------------------|----------------------------------------------|
| run-started            | RunStartedEvent          | run_id, thread, prompt (None for a resume)   |
| text-delta             | TextDeltaEvent           | delta, snapshot, step                        |
| reasoning-delta        | ReasoningDeltaEvent      | delta, step                                  |
| model-response         | ModelResponseEvent       | message (the whole answer), step             |
| tool-call-started      | ToolCallStartedEvent     | call, step                                   |
| tool-call-finished     | ToolCallFinishedEvent    | call, result (ToolResultMessage), step       |
| approval-requested     | ApprovalRequestedEvent   | pending (PendingCall)                        |
| client-call-requested  | ClientCallRequestedEvent | pending (PendingCall)                        |
| model-retry            | ModelRetryEvent          | attempt, error, delay_s (clear partial text) |
| model-fallback         | ModelFallbackEvent       | failed, error, model (who answered), step    |
| usage                  | UsageEvent               | call (ModelCallUsage), total (Usage), context|
| compaction             | CompactionEvent          | record (CompactionMessage), usage, step      |
| text-held              | TextHeldEvent            | step (output guards hold the answer's text)  |
| guard-tripped          | GuardTrippedEvent        | check (GuardCheck), stops, step              |
| run-paused / run-completed / run-stopped / run-failed / run-cancelled | RunEndedEvent | result |

Naming: every event class ends in ``Event`` and its `kind` is the class name before ``Event``
in kebab case.

Every event has `path`: the agents from the run's top agent to the one the event is about, top
first (``("boss",)`` for the top agent's own events, ``("boss", "researcher")`` for those of its
sub-agent ``researcher``; see `Agent.as_tool`), and a sub-agent's event has `agent_call`: the id of
the agent call that runs the sub-agent (None for the top agent's own events), so two calls of one
sub-agent running at once are told apart. A sub-agent's events come up its parent's stream with
its tool calls' ids made unique in the tree (``"<parent call id>/<own id>"``), like its
`PendingCall`s; its own ``run-started`` and run-ended events stay in its thread (the agent call's
``tool-call-started`` and ``tool-call-finished`` are its start and end in the tree).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .approvals import PendingCall, args_hash
from .context import ContextUsage
from .guards import GuardCheck
from .messages import AssistantMessage, CompactionMessage, ToolCall, ToolResultMessage, UserMessage
from .usage import ModelCallUsage, Usage

if TYPE_CHECKING:
    from .result import RunResult

__all__ = [
    "ApprovalRequestedEvent",
    "ClientCallRequestedEvent",
    "CompactionEvent",
    "Event",
    "GuardTrippedEvent",
    "ModelFallbackEvent",
    "ModelResponseEvent",
    "ModelRetryEvent",
    "PendingCall",
    "ReasoningDeltaEvent",
    "RunEndedEvent",
    "RunStartedEvent",
    "TextDeltaEvent",
    "TextHeldEvent",
    "ToolCallFinishedEvent",
    "ToolCallStartedEvent",
    "UsageEvent",
    "args_hash",
]


class TextAccumulator:
    """Collects text deltas; builds snapshots lazily and incrementally (cheap per delta). It also
    carries the `path` and `agent_call` of its model call's `TextDeltaEvent`s, which read them
    from here (one object per model call, not two more fields per delta)."""

    __slots__ = ("_joined", "_joined_n", "_views", "agent_call", "parts", "path")

    def __init__(self, path: tuple[str, ...] = (), agent_call: str | None = None) -> None:
        self.parts: list[str] = []
        self._joined = ""
        self._joined_n = 0
        self.path = path
        self.agent_call = agent_call
        self._views: dict[str, TextAccumulator] | None = None

    def via(self, agent_call: str) -> TextAccumulator:
        """The same text, seen through the agent call `agent_call` (a sub-agent's deltas passed
        up its parent's stream): its parts, another `agent_call`; one per call, made once."""
        views = self._views if self._views is not None else {}
        self._views = views
        view = views.get(agent_call)
        if view is None:
            view = views[agent_call] = TextAccumulator(self.path, agent_call)
            view.parts = self.parts
        return view

    def snapshot(self, n: int | None = None) -> str:
        n = len(self.parts) if n is None else n
        if n < self._joined_n:
            return "".join(self.parts[:n])
        if n > self._joined_n:
            self._joined += "".join(self.parts[self._joined_n : n])
            self._joined_n = n
        return self._joined


@dataclass(slots=True)
class RunStartedEvent:
    run_id: str
    thread: str | None
    prompt: UserMessage | None = None
    """The message that started the run (None when it continues the thread: a resume)."""
    kind: Literal["run-started"] = "run-started"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class TextDeltaEvent:
    """New answer text. `snapshot` is all the text of this model call so far."""

    delta: str
    step: int
    _acc: TextAccumulator = field(repr=False)
    _n: int = field(repr=False)
    kind: Literal["text-delta"] = "text-delta"

    @property
    def snapshot(self) -> str:
        return self._acc.snapshot(self._n)

    @property
    def path(self) -> tuple[str, ...]:
        """The agents from the top to the one that streams this text (see the module)."""
        return self._acc.path

    @property
    def agent_call(self) -> str | None:
        """For a sub-agent's text: the agent call that runs it (see the module)."""
        return self._acc.agent_call


@dataclass(slots=True)
class ReasoningDeltaEvent:
    delta: str
    step: int
    kind: Literal["reasoning-delta"] = "reasoning-delta"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class ModelResponseEvent:
    """The model's whole answer of one step (after its deltas, or instead of them)."""

    message: AssistantMessage
    step: int
    kind: Literal["model-response"] = "model-response"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class ToolCallStartedEvent:
    call: ToolCall
    step: int
    kind: Literal["tool-call-started"] = "tool-call-started"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class ToolCallFinishedEvent:
    """A tool call ended: `result.content`, `result.is_error`, `result.status`, `result.duration_s`."""

    call: ToolCall
    result: ToolResultMessage
    step: int
    kind: Literal["tool-call-finished"] = "tool-call-finished"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class ApprovalRequestedEvent:
    pending: PendingCall
    kind: Literal["approval-requested"] = "approval-requested"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class ClientCallRequestedEvent:
    pending: PendingCall
    kind: Literal["client-call-requested"] = "client-call-requested"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class ModelRetryEvent:
    """A model call failed and will be retried after `delay_s`: discard its partial text."""

    attempt: int
    error: str
    delay_s: float
    step: int
    kind: Literal["model-retry"] = "model-retry"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class ModelFallbackEvent:
    """A `FallbackModel`'s model failed (`failed`, with `error`) and the step was answered by the
    chain's next model instead (`model`: the one that answered in the end)."""

    failed: str
    error: str
    model: str
    step: int
    kind: Literal["model-fallback"] = "model-fallback"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class UsageEvent:
    """A model call's usage row, the run's total so far, and how full the context window was
    for that request (`ContextUsage`; None for a compaction's summary call)."""

    call: ModelCallUsage
    total: Usage
    context: ContextUsage | None = None
    kind: Literal["usage"] = "usage"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class CompactionEvent:
    """The conversation was compacted before the model call of `step`: `record` says what was
    replaced and by what (``record.replaced`` messages, ``record.saved`` tokens); `usage` is the
    summary call's usage row (``purpose="compaction"``; None for ``clear_results``)."""

    record: CompactionMessage
    usage: ModelCallUsage | None
    step: int
    kind: Literal["compaction"] = "compaction"
    path: tuple[str, ...] = ()
    agent_call: str | None = None

    def describe(self) -> str:
        """One line for a view (`CompactionMessage.describe`)."""
        return self.record.describe()


@dataclass(slots=True)
class TextHeldEvent:
    """The answer of `step` is being written and its text is held back until the agent's output
    guards pass (`nbagent.guards`): a view shows "checking…". Its text comes afterwards as one
    ``text-delta`` (what the guards let through), or never (a block)."""

    step: int
    kind: Literal["text-held"] = "text-held"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


@dataclass(slots=True)
class GuardTrippedEvent:
    """A guard blocked something (`check`: which guard, at which stage, why). `stops`: the run
    ends ``stopped`` because of it (a blocked prompt or answer); a blocked tool call or result
    does not stop the run (the model reads why)."""

    check: GuardCheck
    stops: bool
    step: int
    kind: Literal["guard-tripped"] = "guard-tripped"
    path: tuple[str, ...] = ()
    agent_call: str | None = None


RunEndKind = Literal["run-paused", "run-completed", "run-stopped", "run-failed", "run-cancelled"]


@dataclass(slots=True)
class RunEndedEvent:
    """The last event of a run; `kind` names how it ended."""

    kind: RunEndKind
    result: RunResult
    path: tuple[str, ...] = ()
    agent_call: str | None = None


Event = (
    RunStartedEvent
    | TextDeltaEvent
    | ReasoningDeltaEvent
    | ModelResponseEvent
    | ToolCallStartedEvent
    | ToolCallFinishedEvent
    | ApprovalRequestedEvent
    | ClientCallRequestedEvent
    | ModelRetryEvent
    | ModelFallbackEvent
    | UsageEvent
    | CompactionEvent
    | TextHeldEvent
    | GuardTrippedEvent
    | RunEndedEvent
)

