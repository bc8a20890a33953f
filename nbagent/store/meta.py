"""`ThreadMeta`: the small record a store keeps beside a thread's messages.

Owns the record's fields, its JSON form and the questions every reader asks of it (which calls
still wait, how the last run ended). The run loop writes it with each checkpoint; `Agent`, the
view and the DataFrames read it through these attributes, never through dict keys. Imports
approvals (`PendingCall`, `Decision`) and messages only.

Persisted as JSON with a ``version``: new fields get defaults, field types never change, and a
record written by an older nbagent (with fewer keys) still reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..approvals import Decision, PendingCall
from ..messages import Message, unanswered_calls

__all__ = ["META_VERSION", "ThreadMeta", "ThreadStatus", "live_runs", "meta_record"]

META_VERSION = 1
"""Version of the meta record's JSON form."""

live_runs: set[str] = set()
"""The ids of the runs going on in this process (the run loop adds and removes them). Kept here,
beside the owner record, so that a store holding leases for this process's runs (`PostgresStore`)
renews only the leases of runs that still go on."""

ThreadStatus = Literal["running", "completed", "paused", "stopped", "failed", "cancelled", "forked"]
"""How the thread's last run ended (``running`` while one goes on or after a crash; ``forked`` for
a copy made by `Agent.fork` that has not run yet)."""


@dataclass(slots=True)
class ThreadMeta:
    """How a thread's last run left it: status, calls waiting, decisions, state, answer.

    Its size does not grow with the thread (it is written with every checkpoint): how the
    earlier runs ended is kept by the checkpoints each of them wrote (`Checkpoint.run_id`,
    ``status``, ``stop_reason``, ``error``; `Store.last_checkpoints`), not here.
    """

    status: ThreadStatus | None = None
    """None for a record with no status (e.g. written by a store's own tests)."""
    run_id: str | None = None
    """The last run's id."""
    thread_step: int | None = None
    """Model calls made on the thread so far (None: count the stored message steps)."""
    pending: list[PendingCall] = field(default_factory=list)
    """Calls that waited for a person when the last run paused (see `open_pending`)."""
    decisions: dict[str, Decision] = field(default_factory=dict)
    """Decisions made but not yet carried out, by call id."""
    always_allowed: list[str] = field(default_factory=list)
    state: Any = None
    """The user's state object as JSON."""
    stop_reason: str | None = None
    error: str | None = None
    output: Any = None
    """The final answer: its text, or a structured answer as JSON."""
    truncated: bool = False
    started_at: float | None = None
    ended_at: float | None = None
    forked_from: dict[str, Any] | None = None
    """For a fork: ``{"thread", "at_step", "messages"}`` of its source."""
    owner: dict[str, Any] | None = None
    """While a run goes on: the process running it, ``{"host", "pid", "start"}`` (``start``: the
    process's start time, so a reused pid is not taken for it). None once the run has ended."""
    trace: dict[str, str] | None = None
    """The W3C trace context (``{"traceparent": ..., "tracestate": ...}``) of the traced run that
    last wrote the record (`nbagent.tracing`): a resume, in any process, continues that trace.
    None when the thread was never traced."""
    parent: dict[str, Any] | None = None
    """For a sub-agent's thread (`Agent.as_tool`): where it hangs in the tree of agents,
    ``{"thread": <the parent's thread>, "call_id": <the parent's call that runs it>, "path":
    [<agent names, top first>]}``. None for a thread an agent was run on directly."""
    version: int = META_VERSION

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.version,
            "status": self.status,
            "run_id": self.run_id,
            "thread_step": self.thread_step,
            "pending": [p.to_dict() for p in self.pending],
            "decisions": {k: d.to_dict() for k, d in self.decisions.items()},
            "always_allowed": list(self.always_allowed),
            "state": self.state,
            "stop_reason": self.stop_reason,
            "error": self.error,
            "output": self.output,
            "truncated": self.truncated,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }
        if self.forked_from is not None:
            data["forked_from"] = self.forked_from
        if self.owner is not None:
            data["owner"] = self.owner
        if self.trace is not None:
            data["trace"] = self.trace
        if self.parent is not None:
            data["parent"] = self.parent
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ThreadMeta:
        """Read a stored record (any version up to `META_VERSION`; missing keys get defaults).

        Raises:
            ValueError, TypeError, KeyError: the record is not a meta record (the store turns
                these into `StoreCorruptError` naming the file and the thread).
        """
        if not data:
            return cls()
        if not isinstance(data, Mapping):
            raise TypeError(f"a thread's meta record must be a JSON object, got {type(data).__name__}")
        return cls(
            status=data.get("status"),
            run_id=data.get("run_id"),
            thread_step=data.get("thread_step"),
            pending=[PendingCall.from_dict(p) for p in data.get("pending") or ()],
            decisions={k: Decision.from_dict(v) for k, v in (data.get("decisions") or {}).items()},
            always_allowed=list(data.get("always_allowed") or ()),
            state=data.get("state"),
            stop_reason=data.get("stop_reason"),
            error=data.get("error"),
            output=data.get("output"),
            truncated=bool(data.get("truncated", False)),
            started_at=data.get("started_at"),
            ended_at=data.get("ended_at"),
            forked_from=data.get("forked_from"),
            owner=data.get("owner"),
            trace=data.get("trace"),
            parent=data.get("parent"),
            version=int(data.get("version", META_VERSION)),
        )

    def open_pending(self, messages: Sequence[Message]) -> list[PendingCall]:
        """The waiting calls that still have no result in `messages` (what a person can decide):
        the thread's own, and its sub-agents' under an agent call that has none
        (``"<call id>/..."``, `PendingCall.path`)."""
        if not self.pending:
            return []
        open_ids = {c.id for c in unanswered_calls(messages)}
        return [p for p in self.pending
                if p.id in open_ids or (p.nested and any(p.id.startswith(i + "/") for i in open_ids))]


def meta_record(meta: ThreadMeta | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The JSON form a store writes: a `ThreadMeta`'s ``to_dict()``, a plain mapping as it is
    (stores accept both), None as None (keep the stored record)."""
    if meta is None:
        return None
    if isinstance(meta, ThreadMeta):
        return meta.to_dict()
    return dict(meta)
