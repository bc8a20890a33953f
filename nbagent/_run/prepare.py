"""Preparing a run: the `RunState` a new prompt or a resume starts from.

Owns `RunStart` (how a run starts, as one value: what `Agent.run`, `stream`, `resume`,
`resume_stream` and `start` each make from their arguments), `prepare_run` (a prompt on a new or
continued thread) and `prepare_resume` (a paused, stopped, failed or cancelled thread, with the
person's `Decisions` checked against what waits). Both read the thread once from the store; bad
input fails before any write. A prompt meets the agent's input guards (`guarding.screen_prompt`)
before the store is read or written, so the store only ever holds what they let through (or the
prompt marked blocked). Imports the run config and state, approvals, exceptions, messages,
result and store shapes, and `guardset` (the input guards).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..approvals import Decisions
from ..context import is_blocked, last_sent
from ..exceptions import ConflictError, NotResumableError, PendingCallsError, UserError
from ..messages import Prompt, UserMessage, user_message
from ..result import RunResult
from ..store.base import ThreadState
from ..store.meta import live_runs
from .config import RunConfig
from .guardset import screen_prompt
from .nested import owner_tools
from .state import RunState, StoredThread, new_run_id, owner_alive, state_to_json

__all__ = ["RunStart", "prepare_resume", "prepare_run", "refuse_live", "run_state"]


@dataclass(frozen=True, slots=True)
class RunStart:
    """How a run starts, made (and checked) when an entry point of `Agent` is called, prepared
    against the agent's config when the run begins. The entry points differ only in how they
    drive the run (to the end, as events, in a background task, blocking); what a run starts
    from is this one value."""

    prompt: Prompt | None = None
    thread: str | None = None
    state: Any = None
    resume: Decisions | None = None
    """None: send `prompt` (`prepare_run`); a `Decisions` (``Decisions()`` for none): continue
    the thread with it (`prepare_resume`)."""
    result: RunResult | None = None
    """The paused `RunResult` a resume continues (its thread, state and shown calls)."""

    async def prepare(self, config: RunConfig) -> RunState:
        """The run's starting state (`prepare_run` or `prepare_resume`)."""
        if self.resume is None:
            return await prepare_run(config, self.prompt, self.thread, self.state)
        return await prepare_resume(config, self.result, self.thread, self.resume, self.state)


def run_state(
    config: RunConfig, thread: str, loaded: ThreadState | None, state: Any, run_id: str | None = None,
    parent: dict[str, Any] | None = None,
) -> RunState:
    """A new run's state on `thread` as stored (`loaded`, None for a new thread); `parent`: a new
    sub-agent thread's place in the tree (`ThreadMeta.parent`)."""
    stored = StoredThread(thread, list(loaded.messages) if loaded else [], parent=parent)
    if state is not None:
        stored.stored_state = state_to_json(state)  # refused now, not silently stored as null
    stored.state = state
    if loaded is not None:
        meta = loaded.meta
        stored.version = loaded.version
        stored.step = loaded.step
        stored.ledger = dict(loaded.ledger)
        stored.always_allowed = set(meta.always_allowed)
        stored.decisions = dict(meta.decisions)
        stored.pending = list(meta.pending)
        stored.last_sent = last_sent(loaded.usage)
        stored.trace = meta.trace
        stored.parent = meta.parent or parent
        if state is None:
            stored.state, stored.stored_state = config.restore_state(meta.state), meta.state
    return RunState(run_id or new_run_id(), stored, new_message_index=len(stored.messages),
                    path=(config.name or "agent",))


def refuse_live(loaded: ThreadState) -> None:
    """A thread another process (or task) is running now must not be continued (or changed) here:
    this run would record its tool as "interrupted" and that run's real result would be lost.

    Raises:
        ConflictError: a run goes on on the thread.
    """
    meta = loaded.meta
    if meta.status == "running" and owner_alive(meta.owner, meta.run_id, loaded.leased):
        owner = meta.owner or {}
        raise ConflictError(
            f"thread {loaded.thread!r} is being run right now (run {meta.run_id}, process "
            f"{owner.get('pid')} on {owner.get('host')}); wait for it to end or stop it, then continue"
        )


async def prepare_run(config: RunConfig, prompt: Prompt | None, thread: str | None, state: Any, *,
                      parent: dict[str, Any] | None = None, new: bool = False) -> RunState:
    """The state of a run that sends `prompt` (None: continue a thread whose last run stopped);
    `parent`: the place in the tree of a sub-agent's new thread (`ThreadMeta.parent`); `new`: the
    thread cannot be stored yet (a sub-agent's, for an agent call that never started), so it is
    written without a read first (read after all if it was there).

    The run counts as live in this process (`live_runs`) from before its first write, which marks
    the thread running: a run that starts on the same thread meanwhile, here or from another
    thread of this process, is refused with `ConflictError` before it writes anything, rather
    than taking the thread over as if this run had died (leaving this run's prompt behind)."""
    message = None if prompt is None else user_message(prompt)  # bad input fails before any I/O
    run_id = new_run_id()
    live_runs.add(run_id)
    try:
        guards = config.guards
        if message is None or guards is None or not guards.screens_input:
            return await _prepare_run(config, message, thread, state, run_id, parent, new)
        fresh, thread = thread is None, thread or _new_thread()  # its guards are told the thread
        screened = await screen_prompt(guards, message, run_id, thread, state)
        run = await _prepare_run(config, screened.message, thread, state, run_id, parent, new,
                                 screened.deferred, fresh)
        screened.apply(run, config.name)
        return run
    except BaseException:
        live_runs.discard(run_id)
        raise


def _new_thread() -> str:
    return "thread_" + os.urandom(8).hex()


async def _prepare_run(
    config: RunConfig, message: UserMessage | None, thread: str | None, state: Any, run_id: str,
    parent: dict[str, Any] | None, new: bool = False, deferred: bool = False, fresh: bool = False,
) -> RunState:
    # `deferred`: the prompt waits in memory for the parallel input guards (`RunWork.unsaved`); the
    # run's start is written without it. `fresh`: `thread` was made for this run (it is not stored).
    written = [] if deferred or message is None else [message]
    # (a state that cannot be stored fails in run_state, before any write)
    if thread and message is not None and not fresh:
        # The run as it starts on a new thread; the store writes it only if the thread is new
        # (one round trip either way), else hands back the thread as stored.
        run = run_state(config, thread, None, state, run_id, parent)
        run.stored.messages.append(message)
        if new and not deferred:
            try:
                run.stored.version = await config.store.append(thread, version=0, step=0, messages=written,
                                                               meta=run.meta())
                run.work.dirty = False
                return run
            except ConflictError:
                pass  # it was there after all: read it below
        got = await config.store.create_or_load(thread, step=0, messages=written, meta=run.meta())
        if isinstance(got, int):
            run.stored.version = got
            run.work.dirty = False
            if deferred:
                run.work.unsaved.append(message)
            return run
        loaded: ThreadState | None = got
    else:
        # A fresh thread id cannot be in the store yet: skip the read (one store transaction a run).
        loaded = await config.store.load(thread) if thread and not fresh else None
    thread = thread or "thread_" + os.urandom(8).hex()
    run = run_state(config, thread, loaded, state, run_id, parent)
    if loaded is not None:
        refuse_live(loaded)
    open_calls = loaded.open_calls() if loaded is not None else []
    if open_calls:
        ids = ", ".join(c.id for c in open_calls)
        raise PendingCallsError(
            f"thread {thread!r} has tool calls waiting ({ids}); decide them with "
            f"agent.resume(thread={thread!r}, approve=[...], deny={{...}}) before sending a new prompt"
        )
    stored = run.stored
    stored.pending = []
    stored.decisions = {}
    if message is None:
        if not stored.messages:
            raise UserError("run() needs a prompt for a new thread")
    else:
        stored.messages.append(message)
        stored.version = await config.store.append(
            thread, version=stored.version, step=stored.step, messages=written, meta=run.meta(),
        )
        run.work.dirty = False
        if deferred:
            run.work.unsaved.append(message)
    return run


async def prepare_resume(
    config: RunConfig, result: RunResult | None, thread: str | None, decisions: Decisions, state: Any
) -> RunState:
    """The state of a run that continues a thread with `decisions` (checked against what waits).

    Raises:
        NotResumableError: the thread is not stored, or its last run completed.
        UnknownCallError, ArgumentsMismatchError, InvalidArgumentsError, UserError: see
            `Decisions.resolve`.
    """
    if result is not None and not isinstance(result, RunResult):
        raise UserError(f"resume() takes the RunResult to continue, got {type(result).__name__}")
    thread = thread or (result.thread if result is not None else None)
    if thread is None:
        raise UserError("resume() needs the paused RunResult or thread=...")
    loaded = await config.store.load(thread)
    if loaded is None:
        raise NotResumableError(f"thread {thread!r} is not in the store ({config.store!r})")
    refuse_live(loaded)
    run = run_state(config, thread, loaded, state if state is not None else (result.state if result else None))
    stored = run.stored
    last = stored.messages[-1] if stored.messages else None
    if not loaded.open_calls() and last is not None and is_blocked(last):
        raise NotResumableError(
            f"the last turn on thread {thread!r} was stopped by a guard ({getattr(last, 'blocked', '')}); "
            f"nothing is left to continue: send a new prompt with agent.run(prompt, thread={thread!r})"
        )
    if not loaded.open_calls() and (last is None or last.kind == "assistant"):
        raise NotResumableError(
            f"the run on thread {thread!r} is completed; continue the conversation with "
            f"agent.run(prompt, thread={thread!r})"
        )
    resolved = decisions.resolve(stored.pending, config.tools, thread=thread,
                                 shown=result.pending if result is not None else (),
                                 tools_of=lambda pending: owner_tools(config.tools, pending))
    stored.decisions.update(resolved)
    stored.always_allowed.update(decisions.always_allowed)
    run.work.dirty = True
    return run
