"""Sub-agents as a run sees them: what passes between an agent call of a run and the run of the
sub-agent it starts (`Agent.as_tool`), kept out of the loop, which calls it at a few points.

Owns `AgentTool` (the `Tool` an agent becomes; its body is made by `subagent`), `ParentCall`
(what a running agent call hands its sub-agent: the store its thread goes in, the path of the
tree, the parent's event stream, the decisions routed down to it, and the tree's usage and
budgets) and `PARENT` (the context variable the loop hands it over in: set in the task that runs
the call, so it never leaks to another call); for the loop: `run_call` (how a call of the
concurrent runner runs), `Waiting` (how the body says the sub-agent paused), `agent_call_ended`
(its pending calls join the run's; its routed decisions are dropped), `lifted` (a sub-agent's
event as its parent's stream carries it), `count_usage` and `budget_spent` (usage and budgets
over the tree); `owner_tools` (the tools a nested pending call is decided against); and the
tree's id arithmetic: a sub-agent's call has the id ``"<parent call id>/<own id>"`` in its
parent's tree (`nested_id`, `caller_of`, `routed`), and its thread is ``"<parent thread>/<parent
call id>"`` in the parent's store (`child_thread`).

Imports the base (approvals, events, messages, tools, usage), the result's stop reasons, the store
protocol and the run config; the loop, `prepare` and `subagent` import it (it imports none of
them: `plan` and `state` for types only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..approvals import Decision, PendingCall
from ..events import Event, ModelResponseEvent, TextDeltaEvent, ToolCallFinishedEvent, ToolCallStartedEvent
from ..messages import ToolResultMessage
from ..result import RunResult, StopReason
from ..store.base import Store
from ..tools import Tool
from ..usage import ModelCallUsage
from .config import RunConfig

if TYPE_CHECKING:
    from .plan import ToRun
    from .state import RunState, StoredThread

__all__ = [
    "MAX_DEPTH",
    "PARENT",
    "PASSED_UP",
    "AgentTool",
    "ParentCall",
    "Waiting",
    "agent_call_ended",
    "budget_spent",
    "child_thread",
    "count_usage",
    "lifted",
    "nested_id",
    "owner_tools",
    "parent_call",
    "routed",
    "run_call",
]

MAX_DEPTH = 5
"""How deep sub-agents may nest by default (`Agent.as_tool`'s ``max_depth``): the top agent is
depth 0, its sub-agent depth 1; a call that would start depth 6 gets an error result instead."""

SEP = "/"
"""Between a parent call's id and its sub-agent's own id (and thread)."""

PASSED_UP = frozenset({
    "text-delta", "reasoning-delta", "model-response", "tool-call-started", "tool-call-finished",
    "model-retry", "model-fallback", "usage", "compaction",
})
"""The sub-agent's events its parent's stream carries. Its ``run-started`` and run-ended events
stay in its own thread (the agent call's started and finished events are its start and end in the
tree), and its approval events are told again by the top run, with the ids of the tree, when the
top run pauses."""


def nested_id(call_id: str, inner: str) -> str:
    """The id in the parent's tree of its call `call_id`'s sub-agent's call `inner`."""
    return f"{call_id}{SEP}{inner}"


def child_thread(thread: str, call_id: str) -> str:
    """The thread of the sub-agent that the call `call_id` of `thread` runs: fixed by the two, so
    a resume after a crash finds it again."""
    return f"{thread}{SEP}{call_id}"


def routed(decisions: Mapping[str, Decision], call_id: str) -> dict[str, Decision]:
    """The decisions under the agent call `call_id`, by the sub-agent's own ids."""
    prefix = call_id + SEP
    return {key[len(prefix):]: d for key, d in decisions.items() if key.startswith(prefix)}


def agent_call_ended(thread: StoredThread, call_id: str, outcome: ToolResultMessage | Waiting) -> bool:
    """The agent call `call_id` of `thread` answered or paused: the decisions routed to it are
    dropped (its sub-agent stored them with its own thread), and when it paused (`Waiting`) its
    sub-agent's waiting calls join the thread's. True when the thread's record changed."""
    gone = routed(thread.decisions, call_id)
    for key in gone:
        del thread.decisions[nested_id(call_id, key)]
    if isinstance(outcome, Waiting):
        thread.pending.extend(outcome.pending)
        return True
    return bool(gone)


def budget_spent(config: RunConfig, run: RunState) -> StopReason | None:
    """The budget of `config` that the run's usage (its sub-agents' included) has spent, else
    that of an agent above it in the tree, or None."""
    usage = run.usage
    if config.token_budget is not None and usage.total_tokens >= config.token_budget:
        return "token_budget"
    if config.cost_budget is not None and usage.cost_total is not None and usage.cost_total >= config.cost_budget:
        return "cost_budget"
    return run.parent.budget() if run.parent is not None else None


def parent_call(config: RunConfig, run: RunState, call_id: str, stream: bool,
                emit: Callable[[Event], None], again: bool = True) -> ParentCall:
    """What the agent call `call_id` of `run` hands its sub-agent: the sub-agent's usage counts
    in `run` and up the tree, the tree's budgets are `run`'s and those above, and the decisions
    waiting for it are the ones `run`'s thread holds under the call's id."""
    def add_usage(row: ModelCallUsage) -> None:
        run.usage.add(row)
        if run.parent is not None:
            run.parent.add_usage(row)

    return ParentCall(config.store, run.stored.id, call_id, run.path, stream, emit, add_usage,
                      lambda: budget_spent(config, run), routed(run.stored.decisions, call_id), run.work.touch,
                      run.subagents, again)


async def run_call(execute: Awaitable[ToolResultMessage], item: ToRun, config: RunConfig, run: RunState,
                   stream: bool, emit: Callable[[Event], None]) -> ToolResultMessage | Waiting:
    """Run a call of `run` (`execute`: the loop's own execution of `item`) in this task. An agent
    call's sub-agent gets its `ParentCall` through `PARENT` (`parent_call`: its events go to
    `emit`), and the call ends with its result, as any tool's, or `Waiting` (the sub-agent paused)."""
    if not item.tool.continues:
        return await execute
    PARENT.set(parent_call(config, run, item.call.id, stream, emit, item.again))
    try:
        return await execute
    except Waiting as waiting:
        return waiting


def count_usage(agent: str | None, run: RunState, row: ModelCallUsage) -> None:
    """Count a usage row of `run`'s own (its `agent`'s, ``RunConfig.name``): stamped with where in
    the tree it was made, in the run's usage, and in the usage of every run above it (so the top
    run's usage and budgets hold the whole tree's). Every row a run makes is counted here: its
    model calls, summaries, billed refusals, cancelled calls and guard judges."""
    row.agent = agent
    parent = run.parent
    if parent is not None:
        row.depth, row.parent_call_id = parent.depth, parent.call_id
        parent.add_usage(row)
    run.usage.add(row)


class AgentTool(Tool):
    """The tool an agent becomes (`Agent.as_tool`): one string parameter, ``task``; its body runs
    the agent on a thread of its own in the parent's store (`subagent`).

    `continues`: a call that started runs again after a crash or a pause and continues that
    thread (never a fresh sub-agent); the sub-agent's ledger keeps its own tools exactly-once."""

    __slots__ = ("agent", "max_depth")

    continues = True

    def __init__(self, name: str, description: str, agent: Any, function: Callable[..., Any],
                 max_depth: int = MAX_DEPTH) -> None:
        schema = {"type": "object", "properties": {"task": {
            "type": "string", "description": "What to do, in full: the sub-agent sees only this."}},
            "required": ["task"], "additionalProperties": False}
        super().__init__(name, description, schema, function=function)
        self.agent = agent
        """The `Agent` it runs (anything with ``name`` and ``config()``)."""
        self.max_depth = max_depth

    def validate(self, args: dict[str, Any] | None) -> Any:
        from ..exceptions import InvalidArgumentsError

        if args is None:
            raise InvalidArgumentsError("arguments are not a valid JSON object")
        task = args.get("task")
        extra = sorted(set(args) - {"task"})
        if not isinstance(task, str) or extra:
            why = f"unexpected argument(s) {', '.join(extra)}" if extra else "task: a string is required"
            raise InvalidArgumentsError(f"invalid arguments: {why}")
        return super().validate(args)

    def __repr__(self) -> str:
        return f"AgentTool({self.name!r}, agent={getattr(self.agent, 'name', None)!r})"


@dataclass(slots=True)
class ParentCall:
    """What an agent call gives the sub-agent it runs (see the module)."""

    store: Store
    """The parent's store: the sub-agent's thread goes there, whatever store it was built with."""
    thread: str
    call_id: str
    path: tuple[str, ...]
    """The parent's path (top first); the sub-agent's is this and its own name."""
    stream: bool
    """Whether the sub-agent streams its answers (when someone reads the tree's events)."""
    emit: Callable[[Event], None]
    """Puts one of the sub-agent's events (already lifted: `lifted`) in the parent's stream."""
    add_usage: Callable[[ModelCallUsage], None]
    """Counts one of the sub-agent's usage rows in the parent's run (and its ancestors')."""
    budget: Callable[[], StopReason | None]
    """The budget of the tree that ran out (the parent's and its ancestors'), or None."""
    decisions: dict[str, Decision] = field(default_factory=dict)
    """The person's decisions on the sub-agent's waiting calls, by its own ids (`routed`)."""
    touch: Callable[[str], None] | None = None
    """Counts the sub-agent's thread among the top agent's threads (`Agent.threads`)."""
    results: dict[str, RunResult[Any]] | None = None
    """Where the sub-agent's `RunResult` goes, by `call_id` (the parent's `RunResult.subagents`)."""
    again: bool = True
    """The call started before (its sub-agent's thread may be stored); False for a new call,
    whose sub-agent's thread is written without a read first."""

    @property
    def depth(self) -> int:
        """The sub-agent's depth (1 under the top agent)."""
        return len(self.path)


PARENT: ContextVar[ParentCall | None] = ContextVar("nbagent_parent_call", default=None)
"""The agent call running in this task (set by the loop in the task that runs the call)."""


class Waiting(BaseException):
    """Raised by an agent tool's body when its sub-agent paused: its calls wait for a person.

    A `BaseException`, so that the tool-error handling of `execute` lets it through: the call has
    no result yet; the loop keeps it open and the top run pauses with `pending`."""

    def __init__(self, pending: list[PendingCall]) -> None:
        super().__init__(f"{len(pending)} call(s) wait")
        self.pending = pending
        """The sub-agent's waiting calls, with the ids of the parent's tree."""


def lifted(event: Event, call_id: str) -> Event:
    """A sub-agent's event as its parent's stream carries it: a copy whose `agent_call` is the
    agent call `call_id` (a deeper one's, under it: ``"<call_id>/..."``) and whose tool calls'
    ids are made unique in the parent's tree (`nested_id`); its `path` says whose it is."""
    via = call_id if event.agent_call is None else nested_id(call_id, event.agent_call)
    if isinstance(event, TextDeltaEvent):  # (its path and agent_call are its accumulator's)
        return TextDeltaEvent(event.delta, event.step, event._acc.via(via), event._n)
    if isinstance(event, (ToolCallStartedEvent, ToolCallFinishedEvent)):
        moved = dataclasses.replace(event.call, id=nested_id(call_id, event.call.id))
        if isinstance(event, ToolCallStartedEvent):
            return dataclasses.replace(event, call=moved, agent_call=via)
        result = dataclasses.replace(event.result, call_id=moved.id)
        return dataclasses.replace(event, call=moved, result=result, agent_call=via)
    if isinstance(event, ModelResponseEvent) and event.message.tool_calls:
        message = event.message
        calls = [dataclasses.replace(c, id=nested_id(call_id, c.id)) for c in message.tool_calls]
        return dataclasses.replace(event, message=dataclasses.replace(message, tool_calls=calls), agent_call=via)
    return dataclasses.replace(event, agent_call=via)


def caller_of(call_id: str) -> str | None:
    """The agent call a nested call (its id in the tree) waits in: its id without the last part
    (None for a call of the top agent's own)."""
    head, sep, _ = call_id.rpartition(SEP)
    return head if sep else None


def owner_tools(tools: Mapping[str, Tool], pending: PendingCall) -> Mapping[str, Tool] | None:
    """The tools of the sub-agent a nested pending call belongs to, found by walking its path
    down the agent tools from the top agent's `tools`: its Python tools and the tools its tool
    sources (MCP servers) listed so far (None when an agent on the way is not one of them)."""
    for name in pending.path[1:]:
        found = next((t for t in tools.values() if isinstance(t, AgentTool) and t.agent.name == name), None)
        if found is None:
            return None
        tools = dict(found.agent.tools)
        for source in getattr(found.agent, "tool_sources", ()):
            tools.update({t.name: t for t in source.cached_tools() or ()})
    return tools
