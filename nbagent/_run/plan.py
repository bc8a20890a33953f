"""Deciding what happens next, without I/O and without changing anything: the plan for a model
answer's tool calls, and the verdict on a text answer.

Owns `plan` (each open call: an error result, a pause for a person, or run; with the ledger
entries to commit before anything runs), `plan_final` (the ``final_result`` calls of an agent
with an ``output_type``), `judge_text` (a text answer where a structured one was asked for),
`unusable_answer` (an answer that fails the run instead of joining the thread) and
`error_result`. Pure functions of the `RunConfig` and of what they are given to read: every
write they decide is in what they return (`Plan`, `TextVerdict`), and the loop applies it in one
place (`loop.apply_plan`) and commits it. Imports approvals, exceptions, messages, store (the
ledger shape), tools, the run config and `execute.tool_output` (a client's answer becomes a
result the way a tool's return value does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..approvals import Decision, PendingCall, args_hash
from ..exceptions import ContentFilterError, InvalidArgumentsError, ModelError, ModelResponseError
from ..messages import AssistantMessage, ToolCall, ToolCallStatus, ToolResultMessage, UserMessage
from ..store.base import LedgerEntry
from ..tools import Tool
from .config import RunConfig
from .execute import tool_output
from .state import StoredThread

__all__ = [
    "CUT_OFF", "Plan", "TextVerdict", "ToRun", "error_result", "judge_text", "plan", "plan_final",
    "unusable_answer",
]

CUT_OFF = {"length": "the output token limit", "context_window": "the model's context window"}
"""Finish reasons of an answer that was cut off (`RunResult.truncated`), and where it was cut:
``length`` at ``max_tokens``; ``context_window`` where the conversation filled the model's context
window (Anthropic's stop reason ``model_context_window_exceeded``)."""

_NO_ANSWER: Any = object()


def error_result(call: ToolCall, content: str, status: ToolCallStatus = "failed") -> ToolResultMessage:
    """An error result for a call that did not run (or failed)."""
    return ToolResultMessage(call.id, call.name, content, True, status)


class ToRun(NamedTuple):
    """A call the plan lets run."""

    call: ToolCall
    tool: Tool
    args: Any
    """The validated arguments."""
    edited: dict[str, Any] | None
    """The arguments a person edited (None: as the model asked)."""
    again: bool = False
    """A call the ledger says started before, run again to continue (`Tool.continues`)."""


@dataclass(slots=True)
class Plan:
    """Everything `plan` decided for the open calls of an answer: what to write, what to run."""

    calls: list[ToolCall]
    results: list[ToolResultMessage] = field(default_factory=list)
    """Results known without running anything (errors, denials, client results), in call order."""
    ledger: list[LedgerEntry] = field(default_factory=list)
    """Ledger entries, ending with the ``started`` entries of `to_run`."""
    to_run: list[ToRun] = field(default_factory=list)
    pending: list[PendingCall] = field(default_factory=list)
    """The calls that wait for a person (the thread's new pending list)."""
    used: list[str] = field(default_factory=list)
    """Call ids whose stored decision is carried out by this plan (the thread forgets them)."""
    decided: dict[str, Decision] = field(default_factory=dict)
    """Decisions to stamp on the results of calls about to run (``always`` included)."""
    answer: Any = _NO_ANSWER
    """The structured answer accepted from a ``final_result`` call (it completes the run)."""

    @property
    def completes(self) -> bool:
        return self.answer is not _NO_ANSWER

    @property
    def writes(self) -> bool:
        """Whether the plan has anything to commit before its calls run."""
        return bool(self.results or self.ledger or self.to_run)


@dataclass(slots=True)
class TextVerdict:
    """What a text answer means for an agent with an ``output_type`` (see `judge_text`)."""

    answer: Any = _NO_ANSWER
    """The structured answer the text gave."""
    error: ModelError | None = None
    """Why the run fails (the model answered in text too often)."""
    nudge: UserMessage | None = None
    """The message asking the model to call ``final_result`` instead."""

    @property
    def completes(self) -> bool:
        return self.answer is not _NO_ANSWER


def unusable_answer(message: AssistantMessage, provider: str) -> ModelError | None:
    """The error that fails the run when an answer cannot go into the thread, else None: the
    provider's content filter stopped it (finish reason ``content_filter``), or it was cut off
    inside a tool call (`CUT_OFF`), whose arguments can never be answered validly."""
    finish = message.finish_reason
    if finish == "content_filter":
        return ContentFilterError(
            "the provider's content filter stopped the answer (finish_reason content_filter); the "
            "same request is stopped again: rephrase the prompt, in a new thread",
            text=message.text or "", provider=provider,
        )
    if finish in CUT_OFF and message.tool_calls:
        hint = ("raise max_tokens in the model settings or ask for less" if finish == "length" else
                "the conversation no longer fits the model: continue in a new thread or with a shorter history")
        return ModelResponseError(f"the answer was cut off at {CUT_OFF[finish]} inside a tool call; {hint}",
                                  provider=provider)
    return None


def judge_text(config: RunConfig, retries: int, message: AssistantMessage) -> TextVerdict:
    """A text answer from an agent with an ``output_type``: the answer if the text fits it
    (JSON, or any text for ``str``); else a prompt asking for ``final_result`` (while `retries`,
    the prompts sent so far, is below ``output_retries``); else the error that fails the run."""
    spec = config.output
    assert spec is not None
    try:
        return TextVerdict(answer=spec.from_text(message.text))
    except InvalidArgumentsError as exc:
        problem = str(exc)
    if retries >= config.output_retries:
        return TextVerdict(error=ModelResponseError(
            f"the model answered in text {config.output_retries + 1} time(s) instead of calling "
            f"{spec.name} with a {spec.type_name} answer; last problem: {problem}",
            provider=config.model.provider,
        ))
    return TextVerdict(nudge=UserMessage(
        f"[nbagent] Your answer must be given by calling the {spec.name} tool with arguments that "
        f"match its schema, not as text ({problem}). Call {spec.name} now."
    ))


def plan(config: RunConfig, thread: StoredThread, calls: list[ToolCall]) -> Plan:
    """Decide each open call of `thread`'s last answer (error result, pause, or run) without
    running or changing anything: the `Plan` holds every write, which the caller applies and
    commits in one append before any of the calls runs."""
    spec = config.output
    if spec is not None and any(c.name == spec.name for c in calls):
        final = plan_final(config, calls)
        if final.completes:
            return final
        rest = plan(config, thread, [c for c in calls if c.name != spec.name])  # answered by plan_final
        rest.calls, rest.results = calls, [*final.results, *rest.results]
        return rest
    out = Plan(calls)
    waited = {p.id: p for p in thread.pending}
    for call in calls:
        _plan_call(config, thread, call, waited.get(call.id), out)
    # Calls about to run are recorded "started" in the same commit as the decisions above.
    out.ledger.extend(LedgerEntry(r.call.id, r.call.name, args_hash(r.call.args), "started") for r in out.to_run)
    return out


def _plan_call(config: RunConfig, thread: StoredThread, call: ToolCall, waited: PendingCall | None,
               out: Plan) -> None:
    """Add one call's fate to `out`."""
    tool = config.tools.get(call.name)
    entry = thread.ledger.get(call.id)
    if entry is not None and entry.status == "started" and tool is not None and tool.continues:
        # An agent call that started (approved then, if it needed it) and paused or was cut off:
        # it runs again and continues its sub-agent's thread, whose own ledger keeps its tools
        # exactly-once. Not asked about again; the decisions routed to it travel with it.
        validated = _validated(call, tool, call.args, out)
        if validated is not _INVALID and call.args is not None and not (out.pending and config.tools_in_order):
            out.to_run.append(ToRun(call, tool, validated, None, again=True))
        return
    if entry is not None and entry.status == "started" and not (tool is not None and tool.idempotent):
        out.results.append(error_result(
            call,
            "interrupted: this call started before the run was interrupted and it is not "
            "known whether it completed; check before calling it again",
            "interrupted",
        ))
        out.ledger.append(LedgerEntry(call.id, call.name, entry.args_hash, "interrupted"))
        return
    decision = thread.decisions.get(call.id)
    if decision is not None and decision.action == "deny":  # a denial needs no tool (it may be gone)
        out.used.append(call.id)
        reason = f": {decision.reason}" if decision.reason else ""
        out.results.append(decision.stamp(error_result(call, f"denied by the user{reason}", "denied")))
        out.ledger.append(LedgerEntry(call.id, call.name, decision.args_hash, "denied"))
        return
    if tool is None:
        if decision is None and waited is not None:
            out.pending.append(waited)  # undecided: it waits on (its tool may be registered again)
        else:
            names = ", ".join(sorted(n for n, t in config.tools.items() if not t.builtin)) or "none"
            out.results.append(error_result(call, f"unknown tool {call.name!r}; available tools: {names}"))
        return
    edited = decision.args if decision is not None and decision.action == "edit" else None
    args = edited if edited is not None else call.args
    validated = _validated(call, tool, args, out)
    if validated is _INVALID or args is None:
        return
    if tool.is_client:
        _plan_client(call, tool, args, decision, out)
        return
    allowed = call.name in thread.always_allowed
    if decision is None and allowed and tool.requires_approval is not False:
        out.decided[call.id] = Decision("always", "")
    if decision is None and not allowed and _needs_approval(tool, validated):
        out.pending.append(PendingCall(call.id, call.name, args, "approval", tool.description))
        return
    if out.pending and config.tools_in_order:
        return  # in order: runs after the waiting call is decided (left unanswered)
    if decision is not None:
        out.used.append(call.id)
        out.decided[call.id] = decision
    out.to_run.append(ToRun(call, tool, validated, edited))


_INVALID: Any = object()


def _validated(call: ToolCall, tool: Tool, args: dict[str, Any] | None, out: Plan) -> Any:
    """The call's validated arguments, or `_INVALID` after adding the error result the model
    reads to `out`."""
    if args is None:
        out.results.append(error_result(
            call, f"invalid arguments: not a JSON object: {call.args_json[:200]!r}; "
            "send the arguments as a JSON object matching the tool's schema"))
        return _INVALID
    try:
        return tool.validate(args)
    except InvalidArgumentsError as exc:
        out.results.append(error_result(call, f"{exc}; fix the arguments and call {call.name} again"))
        return _INVALID


def _plan_client(call: ToolCall, tool: Tool, args: dict[str, Any], decision: Decision | None, out: Plan) -> None:
    """A client tool's call: answered by the person's result, or waiting for one."""
    if decision is not None and decision.action == "result":
        out.used.append(call.id)
        content, images, display = tool_output(decision.value)
        out.results.append(decision.stamp(
            ToolResultMessage(call.id, call.name, content, images=images, display=display)))
        out.ledger.append(LedgerEntry(call.id, call.name, decision.args_hash, "finished"))
    else:
        out.pending.append(PendingCall(call.id, call.name, args, "client", tool.description))


def _needs_approval(tool: Tool, validated: Any) -> bool:
    try:
        return bool(tool.needs_approval(validated))
    except Exception:
        return True  # a failing policy must not let a call through


def plan_final(config: RunConfig, calls: list[ToolCall]) -> Plan:
    """Answer the ``final_result`` calls of an answer. The first valid one is the run's answer
    (`Plan.answer`; every other call of the answer is answered "not run"); invalid ones get an
    error result the model can correct (and the plan does not complete the run)."""
    spec = config.output
    assert spec is not None
    out = Plan(calls)
    accepted: str | None = None
    value: Any = None
    for call in calls:
        if call.name != spec.name:
            continue
        try:
            value = spec.validate(call.args)
        except InvalidArgumentsError as exc:
            out.results.append(error_result(call, f"{exc}; fix the answer and call {spec.name} again"))
            continue
        accepted = call.id
        break
    if accepted is None:
        return out
    out.results = []
    for call in calls:
        if call.id == accepted:
            out.results.append(ToolResultMessage(call.id, call.name, "Final answer received."))
        else:
            out.results.append(error_result(
                call, "not run: the final answer was given in the same response", "cancelled"))
    out.answer = value
    return out
