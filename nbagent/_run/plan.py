"""Deciding what happens next, without I/O: the plan for a model answer's tool calls, and the
judgement of a structured answer.

Owns `plan` (each open call: an error result, a pause for a person, or run; with the ledger
entries to commit before anything runs), `plan_final` (the ``final_result`` calls of an agent
with an ``output_type``), `unusable_answer` (an answer that fails the run instead of joining the
thread), `text_answer` and `finish`. Pure functions of the `RunConfig` and the
`RunState` they update in memory; the loop commits what they decide. Imports approvals,
exceptions, messages, store (the ledger shape), tools and the run state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..approvals import Decision, PendingCall, args_hash
from ..exceptions import ContentFilterError, InvalidArgumentsError, ModelError, ModelResponseError
from ..messages import AssistantMessage, ToolCall, ToolCallStatus, ToolResultMessage, UserMessage
from ..store.base import LedgerEntry
from ..tools import Tool
from .config import RunConfig
from .execute import tool_output
from .state import RunState

__all__ = ["CUT_OFF", "Plan", "error_result", "finish", "plan", "plan_final", "text_answer", "unusable_answer"]

CUT_OFF = {"length": "the output token limit", "context_window": "the model's context window"}
"""Finish reasons of an answer that was cut off (`RunResult.truncated`), and where it was cut:
``length`` at ``max_tokens``; ``context_window`` where the conversation filled the model's context
window (Anthropic's stop reason ``model_context_window_exceeded``)."""


def error_result(call: ToolCall, content: str, status: ToolCallStatus = "failed") -> ToolResultMessage:
    """An error result for a call that did not run (or failed)."""
    return ToolResultMessage(call.id, call.name, content, True, status)


@dataclass(slots=True)
class Plan:
    """What the tool phase decided for the open calls of an answer (see `plan`)."""

    calls: list[ToolCall]
    immediate: list[ToolResultMessage]
    """Results known without running anything (errors, denials, client results)."""
    ledger: list[LedgerEntry]
    """Ledger updates, ending with the ``started`` entries of `to_run`."""
    to_run: list[tuple[ToolCall, Tool, Any, dict[str, Any] | None]]
    """The calls to run: each with its tool, validated arguments, and the arguments a person
    edited (None: as the model asked)."""


def finish(config: RunConfig, run: RunState, value: Any) -> None:
    """Complete the run with a structured answer."""
    spec = config.output
    assert spec is not None
    run.status, run.output, run.output_data = "completed", value, spec.dump(value)
    run.meta_dirty = True


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


def text_answer(config: RunConfig, run: RunState, message: AssistantMessage) -> None:
    """A text answer from an agent with an ``output_type``: the answer if the text fits it
    (JSON, or any text for ``str``); else a prompt asking for ``final_result`` is appended
    (``output_retries`` times), then the run fails."""
    spec = config.output
    assert spec is not None
    try:
        finish(config, run, spec.from_text(message.text))
        return
    except InvalidArgumentsError as exc:
        problem = str(exc)
    if run.output_retries >= config.output_retries:
        error = ModelResponseError(
            f"the model answered in text {config.output_retries + 1} time(s) instead of calling "
            f"{spec.name} with a {spec.type_name} answer; last problem: {problem}",
            provider=config.model.provider,
        )
        run.status, run.error, run.exception = "failed", f"{type(error).__name__}: {error}", error
        return
    run.output_retries += 1
    run.messages.append(UserMessage(
        f"[nbagent] Your answer must be given by calling the {spec.name} tool with arguments that "
        f"match its schema, not as text ({problem}). Call {spec.name} now."
    ))


def plan(config: RunConfig, run: RunState, calls: list[ToolCall], decided: dict[str, Decision]) -> Plan:
    """Decide each open call (error result, pause, or run) without running anything.

    Updates ``run.ledger``, ``run.messages`` (the immediate results), ``run.decisions`` and
    ``run.pending`` in memory; the caller commits the returned writes in one append before
    any of the calls runs.
    """
    immediate: list[ToolResultMessage] = []
    ledger: list[LedgerEntry] = []
    to_run: list[tuple[ToolCall, Tool, Any, dict[str, Any] | None]] = []
    pending: list[PendingCall] = []
    waited = {p.id: p for p in run.pending}
    spec = config.output
    if spec is not None and any(c.name == spec.name for c in calls):
        final = plan_final(config, run, calls, immediate)
        if final:
            run.messages.extend(immediate)
            run.pending = []
            run.meta_dirty = True
            return Plan(calls, immediate, ledger, to_run)
        calls = [c for c in calls if c.name != spec.name]  # answered (invalid) by plan_final
    for call in calls:
        tool = config.tools.get(call.name)
        entry = run.ledger.get(call.id)
        if entry is not None and entry.status == "started" and not (tool is not None and tool.idempotent):
            result = error_result(
                call,
                "interrupted: this call started before the run was interrupted and it is not "
                "known whether it completed; check before calling it again",
                "interrupted",
            )
            immediate.append(result)
            ledger.append(LedgerEntry(call.id, call.name, entry.args_hash, "interrupted"))
            continue
        decision = run.decisions.get(call.id)
        if decision is not None and decision.action == "deny":  # a denial needs no tool (it may be gone)
            del run.decisions[call.id]
            reason = f": {decision.reason}" if decision.reason else ""
            immediate.append(decision.stamp(error_result(call, f"denied by the user{reason}", "denied")))
            ledger.append(LedgerEntry(call.id, call.name, decision.args_hash, "denied"))
            continue
        if tool is None and decision is None and call.id in waited:
            pending.append(waited[call.id])  # undecided: it waits on (its tool may be registered again)
            continue
        if tool is None:
            names = ", ".join(sorted(config.tools)) or "none"
            immediate.append(error_result(call, f"unknown tool {call.name!r}; available tools: {names}"))
            continue
        args = call.args
        edited = None
        if decision is not None and decision.action == "edit" and decision.args is not None:
            args = edited = decision.args
        if args is None:
            immediate.append(error_result(
                call, f"invalid arguments: not a JSON object: {call.args_json[:200]!r}; "
                "send the arguments as a JSON object matching the tool's schema"))
            continue
        try:
            validated = tool.validate(args)
        except InvalidArgumentsError as exc:
            immediate.append(error_result(call, f"{exc}; fix the arguments and call {call.name} again"))
            continue
        if tool.is_client:
            if decision is not None and decision.action == "result":
                del run.decisions[call.id]
                content, images, display = tool_output(decision.value)
                immediate.append(decision.stamp(
                    ToolResultMessage(call.id, call.name, content, images=images, display=display)))
                ledger.append(LedgerEntry(call.id, call.name, decision.args_hash, "finished"))
            else:
                pending.append(PendingCall(call.id, call.name, args, "client", tool.description))
            continue
        if decision is None and call.name in run.always_allowed and tool.requires_approval is not False:
            decided[call.id] = Decision("always", "")
        if decision is None and call.name not in run.always_allowed:
            try:
                needs = tool.needs_approval(validated)
            except Exception:
                needs = True  # a failing policy must not let a call through
            if needs:
                pending.append(PendingCall(call.id, call.name, args, "approval", tool.description))
                continue
        if pending and config.tools_in_order:
            continue  # in order: runs after the waiting call is decided (left unanswered)
        if decision is not None:
            del run.decisions[call.id]
            decided[call.id] = decision
        to_run.append((call, tool, validated, edited))

    # Calls about to run are recorded "started" in the same commit as the decisions above.
    ledger.extend(LedgerEntry(c.id, c.name, args_hash(c.args), "started") for c, _, _, _ in to_run)
    for entry in ledger:
        run.ledger[entry.call_id] = entry
    run.messages.extend(immediate)
    run.pending = pending
    run.meta_dirty = True
    return Plan(calls, immediate, ledger, to_run)


def plan_final(
    config: RunConfig, run: RunState, calls: list[ToolCall], immediate: list[ToolResultMessage]
) -> bool:
    """Answer the ``final_result`` calls of an answer. The first valid one completes the run
    (every other call of the answer is answered "not run"); invalid ones get an error result
    the model can correct. Returns True when the run is complete."""
    spec = config.output
    assert spec is not None
    accepted: str | None = None
    value: Any = None
    errors: list[ToolResultMessage] = []
    for call in calls:
        if call.name != spec.name:
            continue
        try:
            value = spec.validate(call.args)
        except InvalidArgumentsError as exc:
            errors.append(error_result(call, f"{exc}; fix the answer and call {spec.name} again"))
            continue
        accepted = call.id
        break
    if accepted is None:
        immediate.extend(errors)
        return False
    for call in calls:
        if call.id == accepted:
            immediate.append(ToolResultMessage(call.id, call.name, "Final answer received."))
        else:
            immediate.append(error_result(
                call, "not run: the final answer was given in the same response", "cancelled"))
    finish(config, run, value)
    return True

