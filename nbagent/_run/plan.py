"""Deciding what happens next, without I/O and without changing anything: the plan for a model
answer's tool calls, and the verdict on a text answer.

Owns `plan` (each open call: an error result, a pause for a person, or run; with the ledger
entries to commit before anything runs; a repeat of a call a person denied in this turn is denied
again without asking, `denied_in_turn`), `plan_final` (the ``final_result`` calls of an agent
with an ``output_type``), `judge_text` (a text answer where a structured one was asked for),
`unusable_answer` (an answer that fails the run instead of joining the thread), `refused_rows`
(the usage rows of refusals a `FallbackModel` moved on from) and `error_result`. Pure functions
of the `RunConfig` and of what they are given to read: every write they decide is in what they
return (`Plan`, `TextVerdict`, rows), and the loop applies it in one place (`loop.apply_plan`)
and commits it. Imports approvals, exceptions, messages, store (the ledger shape), tools, usage,
the run config and `execute.tool_output` (a client's answer becomes a result the way a tool's
return value does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..approvals import Decision, PendingCall, args_hash
from ..exceptions import ContentFilterError, InvalidArgumentsError, ModelError, ModelResponseError
from ..messages import AssistantMessage, ToolCall, ToolCallStatus, ToolResultMessage, UserMessage
from ..store.base import LedgerEntry
from ..tools import Tool
from ..usage import ModelCallUsage
from .config import RunConfig
from .execute import tool_output
from .state import RunState, StoredThread

__all__ = [
    "CUT_OFF", "REPEAT_PREFIX", "Plan", "TextVerdict", "ToRun", "denial_text", "denied_in_turn", "error_result",
    "judge_text", "plan", "plan_final", "refused_rows", "unusable_answer",
]

CUT_OFF = {"length": "the output token limit", "context_window": "the model's context window"}
"""Finish reasons of an answer that was cut off (`RunResult.truncated`), and where it was cut:
``length`` at ``max_tokens``; ``context_window`` where the conversation filled the model's context
window (Anthropic's stop reason ``model_context_window_exceeded``)."""

_NO_ANSWER: Any = object()


def error_result(call: ToolCall, content: str, status: ToolCallStatus = "failed") -> ToolResultMessage:
    """An error result for a call that did not run (or failed)."""
    return ToolResultMessage(call.id, call.name, content, True, status)


def denial_text(name: str, reason: str | None) -> str:
    """What the model reads for a call a person denied: the reason, that the tool did not run,
    and not to ask for the same call again (a model that only reads "denied" tends to retry)."""
    head = f"denied by the user: {reason}" if reason else "denied by the user (no reason given)"
    return (f"{head}\n{name} was not run. Do not call it again with the same arguments: that call is denied "
            "without asking. Take the reason into account, or ask the user what to do instead.")


REPEAT_PREFIX = "denied again without asking (the user denied this same call earlier in this turn): "
"""How the result of a repeated denied call starts; the first denial's text follows."""


def denied_in_turn(messages: list[Any]) -> dict[tuple[str, str], ToolResultMessage]:
    """The calls a person denied since the last user message, by ``(tool, args_hash)``: the
    result of the first denial of each. A turn is the prompt's run and every resume of it."""
    results: dict[str, ToolResultMessage] = {}
    out: dict[tuple[str, str], ToolResultMessage] = {}
    for m in reversed(messages):
        if m.kind == "user":
            break
        if m.kind == "tool-result" and m.decision == "denied":
            results[m.call_id] = m
        elif m.kind == "assistant" and results:
            for c in m.tool_calls:
                if c.id in results:
                    out[(c.name, args_hash(c.args))] = results.pop(c.id)  # earlier answers overwrite: the first wins
    return out


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


def refused_rows(config: RunConfig, run: RunState, step: int, started: float,
                 moves: Iterable[Any]) -> list[ModelCallUsage]:
    """The priced usage rows of the refused answers among a `FallbackModel`'s moves of `step`
    (`Fallback.usage_row`): billed, though they never join the thread."""
    rows = [row for m in moves if (row := m.usage_row(run.run_id, run.stored.id, step, started)) is not None]
    for row in rows:
        config.price(row)
    return rows


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


def plan(config: RunConfig, thread: StoredThread, calls: list[ToolCall],
         refused: Mapping[str, tuple[str, ToolCallStatus]] | None = None) -> Plan:
    """Decide each open call of `thread`'s last answer (error result, pause, or run) without
    running or changing anything: the `Plan` holds every write, which the caller applies and
    commits in one append before any of the calls runs. `refused`: calls a guard refused
    (`guarding`: call id -> the text the model reads, the call's status), answered with that
    error and never run or asked about."""
    if refused:
        out = plan(config, thread, [c for c in calls if c.id not in refused])
        for call in calls:
            if call.id in refused:
                text, status = refused[call.id]
                out.results.append(error_result(call, text, status))
                out.ledger.insert(0, LedgerEntry(call.id, call.name, args_hash(call.args),
                                                 "denied" if status == "denied" else "failed"))
        order = {c.id: i for i, c in enumerate(calls)}
        out.results.sort(key=lambda r: order[r.call_id])
        out.calls = calls
        return out
    spec = config.output
    if spec is not None and any(c.name == spec.name for c in calls):
        final = plan_final(config, calls)
        if final.completes:
            return final
        rest = plan(config, thread, [c for c in calls if c.name != spec.name])  # answered by plan_final
        rest.calls, rest.results = calls, [*final.results, *rest.results]
        return rest
    out = Plan(calls)
    waited = {p.id: p for p in thread.pending} if thread.pending else {}
    # Only a tool that can wait for a person can have been denied: the look back over the turn is
    # skipped for the others (the common step of a run).
    askable = any((t := config.tools.get(c.name)) is not None and (t.requires_approval is not False or t.is_client)
                  for c in calls)
    denied = denied_in_turn(thread.messages) if askable else {}
    for call in calls:
        _plan_call(config, thread, call, waited.get(call.id), out, denied)
    # Calls about to run are recorded "started" in the same commit as the decisions above.
    out.ledger.extend(LedgerEntry(r.call.id, r.call.name, args_hash(r.call.args), "started") for r in out.to_run)
    return out


def _plan_call(config: RunConfig, thread: StoredThread, call: ToolCall, waited: PendingCall | None,
               out: Plan, denied: dict[tuple[str, str], ToolResultMessage]) -> None:
    """Add one call's fate to `out` (`denied`: the calls a person denied in this turn)."""
    tool = config.tools.get(call.name)
    entry = thread.ledger.get(call.id)
    if entry is not None and entry.status == "started" and _plan_started(config, call, tool, entry, out):
        return
    decision = thread.decisions.get(call.id)
    if decision is not None and decision.action == "deny":  # a denial needs no tool (it may be gone)
        out.used.append(call.id)
        out.results.append(decision.stamp(error_result(call, denial_text(call.name, decision.reason), "denied")))
        out.ledger.append(LedgerEntry(call.id, call.name, decision.args_hash, "denied"))
        return
    first = denied.get((call.name, args_hash(call.args))) if decision is None and denied else None
    if first is not None:  # the same call again: denied as before, without asking (a reject loop)
        result = error_result(call, REPEAT_PREFIX + first.content, "denied")
        result.decision, result.decided_by, result.decided_at = "repeat-denied", first.decided_by, first.decided_at
        out.results.append(result)
        out.ledger.append(LedgerEntry(call.id, call.name, args_hash(call.args), "denied"))
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


def _plan_started(config: RunConfig, call: ToolCall, tool: Tool | None, entry: LedgerEntry, out: Plan) -> bool:
    """A call the ledger says started before this run (a crash, a stop, a pause inside an agent
    call): add its fate to `out` and return True, or False when it is planned as any call (an
    idempotent tool runs again)."""
    if tool is not None and tool.continues:
        # An agent call that started (approved then, if it needed it) and paused or was cut off:
        # it runs again and continues its sub-agent's thread, whose own ledger keeps its tools
        # exactly-once. Not asked about again; the decisions routed to it travel with it.
        validated = _validated(call, tool, call.args, out)
        if validated is not _INVALID and call.args is not None and not (out.pending and config.tools_in_order):
            out.to_run.append(ToRun(call, tool, validated, None, again=True))
        return True
    if tool is not None and tool.idempotent:
        return False
    out.results.append(error_result(
        call,
        "interrupted: this call started before the run was interrupted and it is not "
        "known whether it completed; check before calling it again",
        "interrupted",
    ))
    out.ledger.append(LedgerEntry(call.id, call.name, entry.args_hash, "interrupted"))
    return True


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
