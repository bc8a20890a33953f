"""Sub-agents: an agent as a tool of another (`Agent.as_tool`).

Owns `agent_tool` (the `nested.AgentTool` an agent becomes) and its body: the sub-agent's run on
a thread of its own in the parent's store, linked to the parent's thread and call
(`ThreadMeta.parent`); continued, never started afresh, when the call runs again after a pause or
a crash (its own ledger keeps its tools exactly-once); its events passed up the parent's stream
(`nested.lifted`); the person's decisions on its calls, routed down from the top, stored with it;
and its end told to the parent as the call's result (its answer, or a `SubAgentError` its model
reads) or as `nested.Waiting` (its calls wait for a person: the top run pauses).

Called outside a run (``tool(task="...")``), the body runs the agent on a new thread of its own
store, like ``agent.run(task)``.

Imports the run's config, prepare, loop and nested parts, approvals, exceptions and the result;
`agent` imports it (never the other way: the agent comes in as an object with ``name``,
``config()`` and ``run()``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..approvals import Decisions, PendingCall
from ..exceptions import NotResumableError, SubAgentError, UserError
from ..messages import Message
from ..result import RunResult
from ..store.base import Store, ThreadState
from ..store.meta import ThreadMeta
from ..tools import Tool
from ..usage import ModelCallUsage, Usage
from .config import RunConfig
from .loop import drive
from .nested import MAX_DEPTH, PARENT, PASSED_UP, AgentTool, ParentCall, Waiting, child_thread, lifted, nested_id
from .prepare import prepare_resume, prepare_run
from .state import RunState

__all__ = ["SubThread", "agent_tool", "load_subthreads"]


class _Runs(Protocol):
    """What the body needs of the `Agent` it runs."""

    name: str | None

    def config(self, store: Any = None) -> RunConfig: ...

    async def run(self, prompt: Any) -> RunResult[Any]: ...


def agent_tool(agent: _Runs, name: str | None = None, description: str | None = None,
               max_depth: int = MAX_DEPTH) -> AgentTool:
    """The tool `agent` becomes: see `Agent.as_tool`."""
    tool_name = name or agent.name
    if not tool_name:
        raise UserError("as_tool() needs a name: give the agent one (Agent(..., name='researcher')) "
                        "or the tool one (as_tool(name='researcher'))")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise UserError(f"max_depth must be a positive integer, got {max_depth!r}")
    own = agent.name or tool_name
    if description is None:
        description = (f"Give the {own} agent a task and get its answer. It sees only the task, so say "
                       "everything it needs to know.")

    async def run_agent(task: str) -> Any:
        parent = PARENT.get()
        if parent is None:  # called outside a run: the agent on a new thread of its own store
            return _answer(own, await agent.run(task), None)
        if parent.depth > max_depth:
            raise SubAgentError(
                f"{own} was not started: sub-agents may nest {max_depth} deep and this call would "
                f"start level {parent.depth}; answer without it", agent=own)
        return await _run_nested(agent, own, parent, task)

    return AgentTool(tool_name, description, agent, run_agent, max_depth)


@dataclass(frozen=True, slots=True)
class _Ended:
    """A sub-agent thread whose run ended before (its outcome was not recorded by the parent:
    the parent's process died in between). Its answer is told again; nothing runs."""

    meta: ThreadMeta


async def _run_nested(agent: _Runs, own: str, parent: ParentCall, task: str) -> Any:
    """Run (or continue) the sub-agent of the call `parent` on its thread and tell how it ended."""
    config = agent.config(parent.store)
    if config.sources is not None:
        config = await config.sources.current(config)
    if config.name != own:
        config = dataclasses.replace(config, name=own)
    thread = child_thread(parent.thread, parent.call_id)
    path = (*parent.path, own)
    if parent.touch is not None:
        parent.touch(thread)
    started = await _start(config, parent, thread, path, task)
    if isinstance(started, _Ended):
        return _ended_answer(own, started.meta, thread)
    run = started
    run.path, run.parent, run.work.touch = path, parent, parent.touch
    emit, call_id = parent.emit, parent.call_id
    async for event in drive(config, run, stream=parent.stream):
        if event.kind in PASSED_UP:
            emit(lifted(event, call_id))
    result = run.outcome.result
    assert result is not None
    if parent.results is not None:
        parent.results[call_id] = result
    if result.status == "completed" and run.outcome.output_data is not None:
        return json.dumps(run.outcome.output_data, ensure_ascii=False)
    return _answer(own, result, call_id)


async def _start(config: RunConfig, parent: ParentCall, thread: str, path: tuple[str, ...],
                 task: str) -> RunState | _Ended:
    """The sub-agent's run: a new thread with the task, or its thread continued with the
    decisions routed to it (those that still match a call waiting there: a decision already
    carried out, or for other arguments, is not applied twice); or `_Ended` when its run ended."""
    link = {"thread": parent.thread, "call_id": parent.call_id, "path": list(path)}
    if not parent.again:  # a new call: its thread cannot be stored yet (no read)
        return await prepare_run(config, task, thread, None, parent=link, new=True)
    loaded = await config.store.load(thread)
    if loaded is None:
        return await prepare_run(config, task, thread, None, parent=link)
    meta = loaded.meta
    if not loaded.open_calls() and meta.status in ("completed", "stopped", "failed"):
        return _Ended(meta)
    try:
        run = await prepare_resume(config, None, thread, Decisions(), None)
    except NotResumableError:  # its answer is stored (and its record says running: a crash)
        return _Ended(dataclasses.replace(meta, status="completed"))
    waiting = {p.id: p for p in run.stored.pending}
    for key, decision in parent.decisions.items():
        shown = waiting.get(key)
        if shown is not None and shown.args_hash == decision.args_hash:
            run.stored.decisions[key] = decision
    return run


def _answer(own: str, result: RunResult[Any], call_id: str | None) -> Any:
    """The agent call's result from the sub-agent's `result` (raises when it has none)."""
    status = result.status
    if status == "completed":
        return result.output
    if status == "paused":
        if call_id is None:
            raise SubAgentError(f"{own} paused: calls wait for a person; continue it with "
                                f"agent.resume(thread={result.thread!r}, ...)", agent=own, thread=result.thread)
        raise Waiting([dataclasses.replace(p, id=nested_id(call_id, p.id)) for p in result.pending])
    raise _failure(own, status, result.stop_reason, result.error, result.thread)


def _ended_answer(own: str, meta: ThreadMeta, thread: str) -> Any:
    if meta.status == "completed":
        output = meta.output
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    raise _failure(own, meta.status or "failed", meta.stop_reason, meta.error, thread)


def _failure(own: str, status: str, stop_reason: str | None, error: str | None, thread: str) -> SubAgentError:
    if status == "stopped":
        why = f"stopped before its answer ({stop_reason})"
    elif status == "failed":
        why = f"failed: {error}"
    else:
        why = status
    return SubAgentError(f"{own} {why}", agent=own, thread=thread)


@dataclass(slots=True)
class SubThread:
    """A sub-agent's stored thread under an agent call, read like a `RunResult` by the static
    HTML (`nbagent.display.html.subrun_html`): what a view shows of it after a reload."""

    call_id: str
    """The agent call's id in the tree (``"c1"``, ``"c1/c5"``)."""
    agent: str
    step: int
    """The step of the parent's thread whose answer made the agent call."""
    state: ThreadState
    subagents: dict[str, SubThread] = field(default_factory=dict)
    """Its own sub-agents' threads, by its call ids."""

    @property
    def messages(self) -> list[Message]:
        return self.state.messages

    @property
    def status(self) -> str:
        return self.state.meta.status or "running"

    @property
    def pending(self) -> list[PendingCall]:
        return self.state.open_pending()

    def rows(self) -> list[ModelCallUsage]:
        """Its usage rows and its own sub-agents', all the way down."""
        return [*self.state.usage, *(r for sub in self.subagents.values() for r in sub.rows())]

    @property
    def usage(self) -> Usage:
        return Usage.of(self.rows())


async def load_subthreads(store: Store, loaded: ThreadState, tools: Mapping[str, Tool],
                          prefix: str = "") -> dict[str, SubThread]:
    """The stored threads of the sub-agents that `loaded`'s agent calls ran (the calls of a
    tool of `tools` that is an agent's), each with its own, by call id; read from `store`."""
    out: dict[str, SubThread] = {}
    for message, step in zip(loaded.messages, loaded.message_steps, strict=False):
        if message.kind != "assistant":
            continue
        for call in message.tool_calls:
            tool = tools.get(call.name)
            if not isinstance(tool, AgentTool):
                continue
            child = await store.load(child_thread(loaded.thread, call.id))
            if child is None:
                continue
            tree_id = nested_id(prefix, call.id) if prefix else call.id
            below = await load_subthreads(store, child, tool.agent.tools, tree_id)
            out[call.id] = SubThread(tree_id, tool.agent.name or call.name, step, child, below)
    return out
