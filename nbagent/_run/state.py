"""`RunState`: what one run knows while it goes on, in three parts.

- `StoredThread`: the thread as the store keeps it (messages, version, step, ledger, decisions,
  pending calls, always-allowed tools, the user's state), as this run changes it;
  `RunState.meta()` is the `ThreadMeta` written with each checkpoint.
- `RunWork`: the machinery of this run in this process, never stored (running tool tasks,
  blocking calls, the thread's call ids, whether the meta record needs writing).
- `RunOutcome`: how the run ends (status, stop reason, error, answer), handed out as the
  `RunResult` by `RunState.to_result()`.

Owns these shapes and the JSON form of the user's state object. Imports approvals, events (the
end kinds), exceptions, guards (`GuardCheck`), messages, result, store (the ledger and meta
shapes) and usage only.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..approvals import Decision, PendingCall
from ..context import ContextUsage
from ..events import RunEndKind
from ..exceptions import UserError
from ..guards import GuardCheck
from ..messages import Message, ToolCall
from ..result import RunResult, RunStatus, StopReason
from ..store.base import LedgerEntry
from ..store.meta import ThreadMeta, live_runs
from ..usage import ModelCallUsage, Usage

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures
    from collections.abc import Callable

    from .nested import ParentCall

__all__ = ["END_KINDS", "RunOutcome", "RunState", "RunWork", "StoredThread", "new_run_id", "state_to_json"]

END_KINDS: dict[str, RunEndKind] = {
    "completed": "run-completed",
    "paused": "run-paused",
    "stopped": "run-stopped",
    "failed": "run-failed",
    "cancelled": "run-cancelled",
}


@dataclass(slots=True)
class StoredThread:
    """The thread as stored, as this run changes it (what a checkpoint writes)."""

    id: str
    messages: list[Message] = field(default_factory=list)
    version: int = 0
    """The store's version of the thread, for optimistic concurrency."""
    step: int = 0
    """Model calls made on the thread so far."""
    ledger: dict[str, LedgerEntry] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)
    """Decisions made and not yet carried out, by call id."""
    pending: list[PendingCall] = field(default_factory=list)
    always_allowed: set[str] = field(default_factory=set)
    state: Any = None
    """The user's state object."""
    stored_state: Any = None
    """Its last storable JSON form."""
    last_sent: tuple[int, int, tuple[int, int] | None] | None = None
    """nbagent's estimate and the provider's count of the thread's last request before this run
    (`nbagent.context.last_sent`), where this run's estimates start; None when not recorded."""
    trace: dict[str, str] | None = None
    """The W3C trace context (``traceparent``, ``tracestate``) of the run that last wrote the
    thread while traced (`ThreadMeta.trace`), so a resume elsewhere continues its trace."""
    parent: dict[str, Any] | None = None
    """For a sub-agent's thread: where it hangs in the tree of agents (`ThreadMeta.parent`)."""


@dataclass(slots=True)
class RunWork:
    """What only this run's process needs while it goes on; never stored."""

    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    blocking: dict[str, concurrent.futures.Future[Any]] = field(default_factory=dict)
    """Sync tool calls running in a worker thread, by call id (a thread cannot be cancelled)."""
    call_ids: set[str] | None = None
    """Every tool call id of the thread (built on the first answer with calls)."""
    decided: dict[str, Decision] = field(default_factory=dict)
    """Decisions of the calls about to run, stamped on their results."""
    dirty: bool = True
    """Whether the meta record changed since it was last written."""
    state_warned: bool = False
    wrap_tool: Callable[[ToolCall, Callable[[], Any], bool], Callable[[], Any]] | None = None
    """Set by a run hook (`hooks`, tracing): ``wrap_tool(call, fn, is_async)`` returns what runs
    instead of the bound tool function `fn` (for an async tool, a function returning an awaitable;
    for a sync tool, one that runs in a worker thread). None: `fn` runs as it is."""
    unsaved: list[Message] = field(default_factory=list)
    """Messages of the thread (in ``stored.messages``) not written yet, which the next commit
    writes first: a prompt whose parallel input guards have not answered yet (`guarding`)."""
    unsaved_usage: list[ModelCallUsage] = field(default_factory=list)
    """Usage rows not written yet (an LLM judge's, ``purpose="guard"``): the next commit writes them."""
    touch: Callable[[str], None] | None = None
    """Counts a thread among the agent's own (`Agent.threads`): set by `Agent` for the threads
    of the sub-agents its run starts."""


@dataclass(slots=True)
class RunOutcome:
    """How the run ends (``running`` until it does)."""

    status: RunStatus | Literal["running"] = "running"
    stop_reason: StopReason | None = None
    error: str | None = None
    exception: BaseException | None = None
    output: Any = None
    """The final answer: its text, or the `output_type` instance of an agent with one."""
    output_data: Any = None
    """A structured answer as JSON-able data (what the thread's meta keeps)."""
    truncated: bool = False
    ended_at: float | None = None
    result: RunResult | None = None
    """The `RunResult` handed out, once the run ended."""
    guard_trip: GuardCheck | None = None
    """The guard's check that stopped the run (``stop_reason="guard"``)."""

    def trip(self, check: GuardCheck) -> None:
        """A guard stops the run."""
        self.status, self.stop_reason, self.guard_trip = "stopped", "guard", check

    def fail(self, error: BaseException) -> None:
        self.status, self.error, self.exception = "failed", f"{type(error).__name__}: {error}", error


@dataclass(slots=True)
class RunState:
    """One run: its counters, and the thread, the machinery and the outcome (see the module)."""

    run_id: str
    stored: StoredThread
    work: RunWork = field(default_factory=RunWork)
    outcome: RunOutcome = field(default_factory=RunOutcome)
    steps: int = 0
    """Model calls this run made."""
    usage: Usage = field(default_factory=Usage)
    output_retries: int = 0
    new_message_index: int = 0
    """Where this run's messages start in ``stored.messages``."""
    started_at: float = field(default_factory=time.time)
    context: ContextUsage | None = None
    """The gauge of the last request this run sent (`RunResult.context`)."""
    guard_checks: list[GuardCheck] = field(default_factory=list)
    """Every check the agent's guards made in this run (`RunResult.guard_checks`)."""
    path: tuple[str, ...] = ("agent",)
    """The agents from the top of the tree to this run's, top first (`Event.path`)."""
    parent: ParentCall | None = None
    """For a sub-agent's run: the agent call that runs it (`nested.ParentCall`)."""
    subagents: dict[str, RunResult] = field(default_factory=dict)
    """The results of the sub-agent runs this run made, by agent call id (`RunResult.subagents`)."""

    @property
    def thread(self) -> str:
        return self.stored.id

    def _state_json(self) -> Any:
        stored = self.stored
        try:
            stored.stored_state = state_to_json(stored.state)
        except UserError as exc:
            # Checked at run start; a tool that later put something unstorable in it must not
            # make the step's results fail to save: the last storable value is kept, loudly.
            if not self.work.state_warned:
                warnings.warn(f"{exc}; the thread keeps its last storable state", RuntimeWarning, stacklevel=2)
                self.work.state_warned = True
        return stored.stored_state

    def meta(self) -> ThreadMeta:
        """A new record of how the thread stands now (never changed after it is handed out)."""
        stored, outcome = self.stored, self.outcome
        return ThreadMeta(
            status=outcome.status,
            run_id=self.run_id,
            thread_step=stored.step,
            pending=list(stored.pending),
            decisions=dict(stored.decisions),
            always_allowed=sorted(stored.always_allowed),
            state=self._state_json(),
            stop_reason=outcome.stop_reason,
            error=outcome.error,
            output=outcome.output_data if outcome.output_data is not None else outcome.output,
            truncated=outcome.truncated,
            started_at=self.started_at,
            ended_at=outcome.ended_at,
            owner=process_owner() if outcome.status == "running" else None,
            trace=stored.trace,
            parent=stored.parent,
        )

    def to_result(self) -> RunResult:
        stored, outcome = self.stored, self.outcome
        return RunResult(
            run_id=self.run_id,
            thread=stored.id,
            status=outcome.status,
            messages=stored.messages,
            usage=self.usage,
            output=outcome.output if outcome.status == "completed" else None,
            pending=list(stored.pending),
            stop_reason=outcome.stop_reason,
            error=outcome.error,
            truncated=outcome.truncated,
            steps=self.steps,
            state=stored.state,
            new_message_index=self.new_message_index,
            exception=outcome.exception,
            started_at=self.started_at,
            ended_at=outcome.ended_at,
            context=self.context,
            always_allowed=sorted(stored.always_allowed),
            ledger=self._answered_ledger(),
            guard_checks=list(self.guard_checks),
            guard_trip=outcome.guard_trip,
            subagents=self.subagents,
        )

    def _answered_ledger(self) -> dict[str, LedgerEntry]:
        """The ledger entries of the calls this run answered (not the whole thread's)."""
        ledger = self.stored.ledger
        return {m.call_id: ledger[m.call_id] for m in self.stored.messages[self.new_message_index:]
                if m.kind == "tool-result" and m.call_id in ledger}


_owner: dict[str, Any] | None = None


def _start_time(pid: int) -> str | None:
    try:  # Linux: field 22 of /proc/<pid>/stat, the start time in clock ticks since boot
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _hostname() -> str:
    import socket  # here: `import nbagent` does not load socket (asyncio loads it with the first run)

    return socket.gethostname()


def process_owner() -> dict[str, Any]:
    """This process, as a thread's `ThreadMeta.owner` names it."""
    global _owner
    if _owner is None or _owner["pid"] != os.getpid():  # computed again in a forked child
        _owner = {"host": _hostname(), "pid": os.getpid(), "start": _start_time(os.getpid())}
    return _owner


def owner_alive(owner: dict[str, Any] | None, run_id: str | None, leased: bool | None = None) -> bool:
    """Whether the process named by a thread's `owner` is still running that thread's run.

    A process on this machine is checked by its pid and start time. A run recorded by another
    machine is judged by the store's lease (`ThreadState.leased`: the running process renews it
    while the run goes on, so it lapses soon after that process dies); a store that keeps no
    leases (None), or an nbagent that recorded no owner, counts it as not running."""
    if not owner:
        return False
    if owner.get("host") != _hostname():
        return bool(leased)
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return False
    if pid == os.getpid():
        return run_id in live_runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return False
    start = owner.get("start")
    return start is None or _start_time(pid) in (None, start)


def new_run_id() -> str:
    return "run_" + os.urandom(8).hex()


def state_to_json(state: Any) -> Any:
    """The user's state object as JSON data.

    Raises:
        UserError: it cannot be turned into JSON (it would be lost on a restart).
    """
    if state is None:
        return None
    dump = getattr(state, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        state = dataclasses.asdict(state)
    from pydantic_core import to_jsonable_python

    try:
        return to_jsonable_python(state)
    except Exception as exc:
        raise UserError(
            f"the state object ({type(state).__name__}) cannot be stored with the thread: {exc}; use a "
            "pydantic model, a dataclass or JSON data (dict, list, str, numbers), and state_type= to "
            "rebuild it after a restart"
        ) from None
