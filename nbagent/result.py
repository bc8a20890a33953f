"""`RunResult`: how a run ended, its conversation, pending calls and usage.

Imports approvals, guards (`GuardCheck`), messages and usage. ``display(result)`` in a notebook renders a static HTML
summary (built by `nbagent.display.html`, imported only when a notebook asks for HTML).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from .approvals import PendingCall
from .context import ContextUsage
from .guards import GuardCheck
from .messages import Message
from .usage import Usage

if TYPE_CHECKING:
    from .store.base import LedgerEntry

__all__ = ["RunResult", "RunStatus"]

RunStatus = Literal["completed", "paused", "stopped", "failed", "cancelled"]
StopReason = Literal["max_steps", "token_budget", "cost_budget", "stop_when", "guard"]
OutputT = TypeVar("OutputT")


@dataclass(eq=False)
class RunResult(Generic[OutputT]):
    """The outcome of `Agent.run` / `Agent.resume`.

    Attributes:
        status: ``completed`` (a final answer), ``paused`` (calls wait in `pending`), ``stopped``
            (max_steps, a budget, stop_when or a guard: `stop_reason` says which), ``failed``
            (`error` says why) or ``cancelled``; ``running`` only in the result so far that
            ``stop_when`` reads before each model call.
        output: the final answer: its text, or an instance of the agent's ``output_type`` (a
            structured answer); None unless completed.
        pending: calls waiting for a decision (approve / deny / edit) or a client result.
        messages: the whole conversation of the thread, this run included.
        usage: this run's model calls and their sums (``usage.rows()`` for plain dicts), its
            sub-agents' included (each row's ``agent`` and ``depth`` say whose).
        thread: the thread id; pass it to `Agent.run` / `Agent.resume` to continue.
    """

    run_id: str
    thread: str
    status: RunStatus | Literal["running"]
    messages: list[Message]
    usage: Usage
    output: OutputT | None = None
    pending: list[PendingCall] = field(default_factory=list)
    stop_reason: StopReason | None = None
    """``max_steps``, ``token_budget``, ``cost_budget``, ``stop_when`` or ``guard`` (`guard_trip`
    says which guard, and why) for a stopped run."""
    error: str | None = None
    """What went wrong for a failed run (with the HTTP status and the provider's message)."""
    truncated: bool = False
    """The final answer was cut off: at the output token limit (finish reason ``length``), or
    where the conversation filled the model's context window (``context_window``, Claude)."""
    steps: int = 0
    """Model calls made by this run."""
    state: Any = None
    """The user's state object (see tools taking ``ctx``)."""
    new_message_index: int = 0
    """Index in `messages` of the first message this run added."""
    exception: BaseException | None = field(default=None, repr=False)
    """The exception behind a failed run, when it happened in this process."""
    started_at: float | None = None
    """When the run started (seconds since the epoch)."""
    ended_at: float | None = None
    """When it ended (None while it goes on)."""
    context: ContextUsage | None = None
    """How full the model's context window was for the last request this run sent: tokens, window,
    fraction and tokens by part (see docs/context.md); None when the run sent none."""
    always_allowed: list[str] = field(default_factory=list)
    """The tools approved for the rest of the thread ("always allow"), as the run left them;
    ``agent.revoke(thread, *tools)`` takes them back."""
    ledger: dict[str, LedgerEntry] = field(default_factory=dict, repr=False)
    """What is known of the execution of each call this run answered, by call id (`LedgerEntry`:
    status and when it was recorded): the ``time`` of `nbagent.tool_calls_frame`."""
    guard_checks: list[GuardCheck] = field(default_factory=list)
    """Every check the agent's guards made in this run, passed or not, in the order they
    finished: guard, stage, verdict, reason, latency (see `nbagent.guards`)."""
    guard_trip: GuardCheck | None = None
    """The check that stopped the run (a blocked prompt or answer), else None."""
    subagents: dict[str, RunResult[Any]] = field(default_factory=dict)
    """The runs of its sub-agents (`Agent.as_tool`) this run made, by the id of the agent call
    that ran each (its own `subagents` hold the next level). Its `usage` holds theirs too."""

    @property
    def duration_s(self) -> float | None:
        """Wall time of the run, model calls, tools and waits included."""
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at

    @property
    def new_messages(self) -> list[Message]:
        """The messages this run added."""
        return self.messages[self.new_message_index :]

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def _repr_html_(self) -> str:
        from .display.html import render_result_html

        return render_result_html(self)

    def __repr__(self) -> str:
        parts = [f"status={self.status!r}"]
        if self.output is not None:
            out = self.output if isinstance(self.output, str) else repr(self.output)
            out = out if len(out) <= 60 else out[:57] + "..."
            parts.append(f"output={out!r}" if isinstance(self.output, str) else f"output={out}")
        if self.pending:
            parts.append("pending=[" + ", ".join(f"{p.name}({p.id})" for p in self.pending) + "]")
        if self.stop_reason:
            parts.append(f"stop_reason={self.stop_reason!r}")
        if self.error:
            parts.append(f"error={self.error!r}")
        if self.guard_trip is not None:
            parts.append(f"guard={self.guard_trip.guard!r}")
        parts.append(f"thread={self.thread!r}")
        parts.append(f"steps={self.steps}")
        parts.append(f"tokens={self.usage.total_tokens}")
        return "RunResult(" + ", ".join(parts) + ")"
