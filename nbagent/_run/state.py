"""`RunState`: what one run knows while it goes on, and what of it is checkpointed.

Owns `RunState` (its `meta()` is the `ThreadMeta` written with each checkpoint, its `to_result()`
the `RunResult` handed out) and the JSON form of the user's state object. Imports approvals,
messages, result, store (the ledger and meta shapes) and usage only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import socket
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from ..approvals import Decision, PendingCall
from ..exceptions import UserError
from ..messages import Message
from ..result import RunResult, RunStatus, StopReason
from ..store.base import LedgerEntry
from ..store.meta import ThreadMeta, live_runs
from ..usage import Usage

__all__ = ["END_KINDS", "RunState", "new_run_id", "state_to_json"]

END_KINDS = {
    "completed": "run-completed",
    "paused": "run-paused",
    "stopped": "run-stopped",
    "failed": "run-failed",
    "cancelled": "run-cancelled",
}


@dataclass
class RunState:
    """Everything one run knows. `meta()` is the part persisted with the thread."""

    run_id: str
    thread: str
    messages: list[Message]
    version: int = 0
    thread_step: int = 0
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    ledger: dict[str, LedgerEntry] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)
    always_allowed: set[str] = field(default_factory=set)
    state: Any = None
    pending: list[PendingCall] = field(default_factory=list)
    status: RunStatus | Literal["running"] = "running"
    stop_reason: StopReason | None = None
    error: str | None = None
    exception: BaseException | None = None
    output: Any = None
    """The final answer: its text, or the `output_type` instance of an agent with one."""
    output_data: Any = None
    """A structured answer as JSON-able data (what the thread's meta keeps)."""
    output_retries: int = 0
    truncated: bool = False
    new_message_index: int = 0
    meta_dirty: bool = True
    cancel_requested: bool = False
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    blocking: dict[str, concurrent.futures.Future[Any]] = field(default_factory=dict)
    """Sync tool calls running in a worker thread, by call id (a thread cannot be cancelled)."""
    stored_state: Any = None
    state_warned: bool = False
    call_ids: set[str] | None = None
    """Every tool call id of the thread (built on the first answer with calls)."""
    result: RunResult | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None

    def _state_json(self) -> Any:
        try:
            self.stored_state = state_to_json(self.state)
        except UserError as exc:
            # Checked at run start; a tool that later put something unstorable in it must not
            # make the step's results fail to save: the last storable value is kept, loudly.
            if not self.state_warned:
                warnings.warn(f"{exc}; the thread keeps its last storable state", RuntimeWarning, stacklevel=2)
                self.state_warned = True
        return self.stored_state

    def meta(self) -> ThreadMeta:
        """A new record of how the thread stands now (never changed after it is handed out)."""
        return ThreadMeta(
            status=self.status,  # type: ignore[arg-type]
            run_id=self.run_id,
            thread_step=self.thread_step,
            pending=list(self.pending),
            decisions=dict(self.decisions),
            always_allowed=sorted(self.always_allowed),
            state=self._state_json(),
            stop_reason=self.stop_reason,
            error=self.error,
            output=self.output_data if self.output_data is not None else self.output,
            truncated=self.truncated,
            started_at=self.started_at,
            ended_at=self.ended_at,
            owner=process_owner() if self.status == "running" else None,
        )

    def to_result(self) -> RunResult:
        return RunResult(
            run_id=self.run_id,
            thread=self.thread,
            status=self.status,  # type: ignore[arg-type]  # never "running" once handed out
            messages=self.messages,
            usage=self.usage,
            output=self.output if self.status == "completed" else None,
            pending=list(self.pending),
            stop_reason=self.stop_reason,
            error=self.error,
            truncated=self.truncated,
            steps=self.steps,
            state=self.state,
            new_message_index=self.new_message_index,
            exception=self.exception,
            started_at=self.started_at,
            ended_at=self.ended_at,
        )


_owner: dict[str, Any] | None = None


def _start_time(pid: int) -> str | None:
    try:  # Linux: field 22 of /proc/<pid>/stat, the start time in clock ticks since boot
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def process_owner() -> dict[str, Any]:
    """This process, as a thread's `ThreadMeta.owner` names it."""
    global _owner
    if _owner is None or _owner["pid"] != os.getpid():  # computed again in a forked child
        _owner = {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_time(os.getpid())}
    return _owner


def owner_alive(owner: dict[str, Any] | None, run_id: str | None, leased: bool | None = None) -> bool:
    """Whether the process named by a thread's `owner` is still running that thread's run.

    A process on this machine is checked by its pid and start time. A run recorded by another
    machine is judged by the store's lease (`ThreadState.leased`: the running process renews it
    while the run goes on, so it lapses soon after that process dies); a store that keeps no
    leases (None), or an nbagent that recorded no owner, counts it as not running."""
    if not owner:
        return False
    if owner.get("host") != socket.gethostname():
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
    return "run_" + uuid.uuid4().hex[:16]


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
