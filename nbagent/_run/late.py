"""Late: what a stopped run leaves for later. Its open calls are answered now, and the real
outcome of a blocking call that outlived the run arrives late, after the run ended.

Owns `stop_tools` and `answer_open_calls`: when a run is stopped, its running tools are
cancelled (an agent call's sub-agent run with them: it answers its own open calls) and every open
call is answered (``cancelled``, or
``interrupted ... still running`` for a sync tool whose thread goes on; its real outcome is
written to the ledger when it ends, through `Store.update`, and told to the thread's observers).
Imports the watch notices, messages, the plan's error results, the store and the run state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any, Literal

from .._watch import ToolOutcomeNotice, publish
from ..messages import ToolResultMessage, unanswered_calls
from ..store.base import Change, LedgerEntry, LedgerStatus, Store, ThreadState
from .execute import tool_result_text
from .plan import error_result
from .state import RunState

__all__ = ["answer_open_calls", "stop_tools"]


_STILL_RUNNING = (
    "interrupted: stop was requested while this tool was running; it cannot be interrupted and was "
    "still running when the run ended, so it is not known whether it completed (its outcome is "
    "recorded in the thread's ledger when it ends); check before calling it again"
)
_late_tasks: set[asyncio.Task[Any]] = set()


async def stop_tools(run: RunState, store: Store) -> tuple[list[ToolResultMessage], list[LedgerEntry]]:
    """Cancel the run's running tools, wait for them to stop, and close the run in memory: every
    open call answered (`answer_open_calls`), nothing pending, the run ``cancelled``. Returns the
    results and ledger entries for the caller to store."""
    stored, work = run.stored, run.work
    for task in list(work.tasks):
        task.cancel()
    if work.tasks:
        await asyncio.gather(*work.tasks, return_exceptions=True)
    results, ledger = answer_open_calls(run, store)
    for entry in ledger:
        stored.ledger[entry.call_id] = entry
    stored.messages.extend(results)
    stored.pending = []
    run.outcome.status = "cancelled"
    run.outcome.ended_at = time.time()
    return results, ledger


def answer_open_calls(run: RunState, store: Store) -> tuple[list[ToolResultMessage], list[LedgerEntry]]:
    """The results and ledger entries that close every open call of a stopped run: "cancelled",
    or "interrupted ... still running" for a blocking call whose thread goes on (its real outcome
    is recorded in the ledger when it ends)."""
    results, ledger = [], []
    for call in unanswered_calls(run.stored.messages):
        blocking = run.work.blocking.pop(call.id, None)
        started = run.stored.ledger.get(call.id)
        if blocking is not None and not blocking.done():
            results.append(error_result(call, _STILL_RUNNING, "interrupted"))
            if started is not None:
                ledger.append(LedgerEntry(call_id=call.id, tool=call.name, args_hash=started.args_hash,
                                          status="interrupted"))
                blocking.add_done_callback(_late_outcome(store, run.thread, started, asyncio.get_running_loop()))
            continue
        results.append(error_result(call, "cancelled: the run was stopped before this call finished", "cancelled"))
        if started is not None:
            ledger.append(LedgerEntry(call_id=call.id, tool=call.name, args_hash=started.args_hash,
                                      status="cancelled"))
    return results, ledger


def _late_outcome(store: Store, thread: str, started: LedgerEntry, loop: asyncio.AbstractEventLoop) -> Any:
    """A callback (run in the tool's thread) for a blocking call that outlived its run: record how
    it really ended in the ledger (the conversation already says "not known", and is append-only)
    and tell the thread's observers what it returned (`ToolOutcomeNotice`)."""

    def record(notice: ToolOutcomeNotice) -> None:
        status: LedgerStatus = "failed" if notice.status == "failed" else "finished"
        entry = LedgerEntry(call_id=started.call_id, tool=started.tool, args_hash=started.args_hash, status=status)
        task = asyncio.ensure_future(_record_late(store, thread, entry, notice))
        _late_tasks.add(task)
        task.add_done_callback(_late_tasks.discard)

    def done(work: concurrent.futures.Future[Any]) -> None:
        exc = None if work.cancelled() else work.exception()
        status: Literal["done", "failed"]
        if work.cancelled():
            status, content = "failed", "cancelled before it started"
        elif exc is not None:
            status, content = "failed", f"{type(exc).__name__}: {exc}"
        else:
            status, content = "done", tool_result_text(work.result())
        notice = ToolOutcomeNotice(thread=thread, call_id=started.call_id, tool=started.tool, status=status,
                                   content=content, duration_s=max(0.0, time.time() - started.time))
        try:
            loop.call_soon_threadsafe(record, notice)
        except RuntimeError:  # the loop is gone (the script ended): the ledger keeps "interrupted"
            pass

    return done


async def _record_late(store: Store, thread: str, entry: LedgerEntry, notice: ToolOutcomeNotice) -> None:
    def change(loaded: ThreadState) -> Change | None:
        current = loaded.ledger.get(entry.call_id)
        if current is None or current.status != "interrupted":
            return None  # a later run already decided what this call is
        return Change(ledger=[entry])

    try:
        await store.update(thread, change)  # another run may be writing the thread meanwhile
    except Exception:  # the store failing here has no run to fail: keep the "not known"
        pass
    finally:  # the function did end: whoever shows the call hears it, whatever the ledger says
        publish(thread, None, notice)
