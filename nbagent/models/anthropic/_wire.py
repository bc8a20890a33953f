"""The request side of the Messages API wire: nbagent's request in, ``messages.create()`` keywords out.

Owns the mapping of messages (the system prompt as ``system``; user text and images, base64 or
URL; assistant text, thinking blocks and ``tool_use`` blocks; every tool result of one answer as
``tool_result`` blocks of ONE user turn, ``is_error`` for error results, the images a tool
returned as image blocks inside its ``tool_result``), tool definitions
(``input_schema``), ``tool_choice`` (``auto`` / ``required`` -> ``any`` / a tool's name / ``none``,
``parallel_tool_calls=False``, or an agent running its calls in order, ->
``disable_parallel_tool_use``), prompt-caching breakpoints
(``cache_control`` on the last tool, the last system block and the latest message) and the check
of settings against the installed SDK's ``messages.create`` signature.

May import: nbagent's messages, exceptions and model base, and the SDK's
``anthropic.resources.messages`` (lazily, for the signature). Not the SDK client, not `_stream`,
`_errors` or `_model`; it never sees the API key.
"""

from __future__ import annotations

import base64
import copy
import functools
import inspect
from collections.abc import Mapping
from typing import Any

from ...exceptions import UserError
from ...messages import Message
from ..base import ModelRequest, check_known_settings

_ALWAYS_SET = frozenset({"messages", "model", "stream", "tools", "system", "self"})
_TRANSLATED = frozenset({"tool_choice", "parallel_tool_calls", "stop"})
"""nbagent's (OpenAI-style) setting names this module translates to the Messages API."""
_SAMPLING = frozenset({"temperature", "top_p", "top_k"})
"""Sampling settings the API takes; an SDK whose ``create`` has no such keyword (anthropic 2.x)
gets them in ``extra_body``."""
_MERGED_DICTS = ("extra_body", "extra_headers", "extra_query")
_EPHEMERAL = {"type": "ephemeral"}
_create_params: frozenset[str] | None = None


def _allowed_settings() -> frozenset[str]:
    """The keyword arguments the installed SDK's ``messages.create`` accepts, plus the translated ones."""
    global _create_params
    if _create_params is None:
        from anthropic.resources.messages import AsyncMessages

        names = inspect.signature(AsyncMessages.create).parameters
        _create_params = (frozenset(names) - _ALWAYS_SET) | _TRANSLATED | _SAMPLING
    return _create_params


@functools.cache
def _sdk_takes(name: str) -> bool:
    from anthropic.resources.messages import AsyncMessages

    return name in inspect.signature(AsyncMessages.create).parameters


def check_settings(settings: Mapping[str, Any]) -> None:
    """Raise `UserError` for a setting ``messages.create`` does not take."""
    check_known_settings(settings, _allowed_settings(), "the anthropic SDK's messages.create",
                         "send other parameters with settings={'extra_body': {...}}")


def _image_block(image: Any) -> dict[str, Any]:
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    data = base64.b64encode(image.data).decode("ascii")
    return {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": data}}


def _user_content(message: Any) -> str | list[dict[str, Any]]:
    if not message.images:
        return message.content
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    blocks.extend(_image_block(i) for i in message.images)
    return blocks


def _tool_result_content(message: Any) -> str | list[dict[str, Any]]:
    """A tool result's text (`ToolResultMessage.model_text`: with the note of an edit), with the
    images the tool returned as image blocks inside it."""
    text = message.model_text()
    if not message.images:
        return text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.extend(_image_block(i) for i in message.images)
    return blocks


def _assistant_content(message: Any) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in getattr(message, "thinking_blocks", None) or ():
        if block.get("type") in ("thinking", "redacted_thinking"):  # not another provider's items
            blocks.append(dict(block))  # sent back unchanged (signature included)
    text = message.text or message.refusal
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.tool_calls:
        args = call.args
        tool_input = args if isinstance(args, dict) else {}  # arguments that were no JSON object: never replayed
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input})
    if not blocks:
        blocks.append({"type": "text", "text": "(no answer)"})  # the API refuses an empty assistant turn
    return blocks


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def wire_messages(messages: list[Message]) -> tuple[list[dict[str, Any]], list[str]]:
    """The Messages API ``messages`` and the system prompt's texts.

    Consecutive turns of one role are merged into one (the API wants user and assistant turns to
    alternate), so every tool result of one answer, and a user prompt after them, make one user turn.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, content: str | list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            last = turns[-1]
            last["content"] = _as_blocks(last["content"]) + _as_blocks(content)
        else:
            turns.append({"role": role, "content": content})

    for m in messages:
        if m.kind == "system":
            if m.content:
                system.append(m.content)
        elif m.kind == "user":
            add("user", _user_content(m))
        elif m.kind == "tool-result":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.call_id,
                                     "content": _tool_result_content(m)}
            if m.is_error:
                block["is_error"] = True
            add("user", [block])
        elif m.kind == "assistant":
            add("assistant", _assistant_content(m))
        else:
            raise UserError(f"cannot send a message of kind {m.kind!r} to a Messages API model")
    return turns, system


def wire_tool(definition: Mapping[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": definition["name"]}
    if definition.get("description"):
        tool["description"] = definition["description"]
    tool["input_schema"] = definition.get("parameters") or {"type": "object", "properties": {}}
    return tool


def wire_tool_choice(value: Any, parallel: Any) -> dict[str, Any] | None:
    """The Messages API ``tool_choice`` for nbagent's (OpenAI-style) value and ``parallel_tool_calls``."""
    if isinstance(value, dict):
        choice = dict(value)
    elif value is None:
        if parallel is not False:
            return None
        choice = {"type": "auto"}
    elif value == "auto":
        choice = {"type": "auto"}
    elif value in ("required", "any"):
        choice = {"type": "any"}
    elif value == "none":
        return {"type": "none"}
    elif isinstance(value, str):
        choice = {"type": "tool", "name": value}
    else:
        raise UserError(f"tool_choice must be 'auto', 'required', 'none' or a tool's name, got {value!r}")
    if parallel is False and choice.get("type") in ("auto", "any", "tool"):
        choice["disable_parallel_tool_use"] = True
    return choice


def _mark_last(blocks: list[dict[str, Any]]) -> None:
    if blocks:
        blocks[-1] = {**blocks[-1], "cache_control": dict(_EPHEMERAL)}


def request_params(
    request: ModelRequest,
    *,
    model_name: str,
    settings: Mapping[str, Any],
    max_tokens: int,
    thinking: dict[str, Any] | None,
    cache: bool,
    stream: bool,
) -> dict[str, Any]:
    """The keyword arguments for ``messages.create`` (without the key): the model's `settings`
    with the request's merged over them, translated to the Messages API."""
    settings = merged_settings(settings, request.settings)
    messages, system = wire_messages(request.messages)
    params: dict[str, Any] = {"model": model_name, "max_tokens": max_tokens, "messages": messages}
    if system:
        params["system"] = [{"type": "text", "text": "\n\n".join(system)}]
    if request.tools:
        params["tools"] = [wire_tool(t) for t in request.tools]
    if thinking is not None:
        params["thinking"] = thinking
    _add_settings(params, settings)
    if request.tools:
        choice = _tool_choice(settings, request.parallel_tools, params.get("thinking"))
        if choice is not None:
            params["tool_choice"] = choice
    if request.context_management is not None:
        _add_context_management(params, request.context_management)
    if cache:
        _add_cache_breakpoints(params)
    if stream:
        params["stream"] = True
    return params


CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
"""The beta the Messages API's ``context_management`` parameter is behind."""


def _add_context_management(params: dict[str, Any], native: Any) -> None:
    """Ask the API to clear old tool results (``clear_tool_uses_20250919``) past the request's
    trigger (`NativeContext`), keeping the latest tool uses: the ``context_management`` body
    field and the beta header, added to what the settings' ``extra_body`` / ``extra_headers`` give."""
    edit: dict[str, Any] = {"type": "clear_tool_uses_20250919",
                            "keep": {"type": "tool_uses", "value": native.keep_tool_uses}}
    if native.trigger_tokens is not None:
        edit["trigger"] = {"type": "input_tokens", "value": native.trigger_tokens}
    params["extra_body"] = {**(params.get("extra_body") or {}), "context_management": {"edits": [edit]}}
    headers = dict(params.get("extra_headers") or {})
    given = [headers.pop(k) for k in list(headers) if k.lower() == "anthropic-beta"]
    betas = [b.strip() for value in given for b in str(value or "").split(",") if b.strip()]
    if CONTEXT_MANAGEMENT_BETA not in betas:
        betas.append(CONTEXT_MANAGEMENT_BETA)
    headers["anthropic-beta"] = ",".join(betas)
    params["extra_headers"] = headers


def merged_settings(model: Mapping[str, Any], request: Mapping[str, Any]) -> Mapping[str, Any]:
    """The model's settings with the request's (the agent's) over them, checked; dicts that
    both give (`_MERGED_DICTS`) are merged key by key."""
    if not request:
        return model
    check_settings(request)
    merged = {**model, **request}
    for name in _MERGED_DICTS:
        if isinstance(model.get(name), dict) and isinstance(request.get(name), dict):
            merged[name] = {**model[name], **request[name]}
    return merged


def _add_settings(params: dict[str, Any], settings: Mapping[str, Any]) -> None:
    """The sampling and other settings, as the Messages API names them (the SDK's keywords, or
    ``extra_body`` for what this SDK does not take)."""
    sampling: dict[str, Any] = {}
    for key, value in settings.items():
        if value is None or key in ("tool_choice", "parallel_tool_calls"):
            continue
        if key == "stop":
            params["stop_sequences"] = [value] if isinstance(value, str) else list(value)
        elif key in _SAMPLING and not _sdk_takes(key):
            sampling[key] = value
        else:
            params[key] = value
    if sampling:
        params["extra_body"] = {**sampling, **(params.get("extra_body") or {})}


def _tool_choice(settings: Mapping[str, Any], parallel_tools: bool, thinking: Any) -> dict[str, Any] | None:
    parallel = settings.get("parallel_tool_calls")
    if parallel is None and not parallel_tools:
        parallel = False  # the agent runs its calls in order: ask for one at a time
    choice = wire_tool_choice(settings.get("tool_choice"), parallel)
    if choice is not None and _thinking_on(thinking) and choice["type"] in ("any", "tool"):
        # The API refuses a forced tool with extended thinking (400): ask for auto instead.
        choice = {k: v for k, v in choice.items() if k != "name"} | {"type": "auto"}
    return choice


def _thinking_on(thinking: Any) -> bool:
    return isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled")


def _add_cache_breakpoints(params: dict[str, Any]) -> None:
    """``cache_control`` on the last tool, the system block and the latest message's last block
    (copies: the messages of the history are not changed). Blocks that cannot carry it (thinking)
    are skipped."""
    if params.get("tools"):
        _mark_last(params["tools"])
    if params.get("system"):
        _mark_last(params["system"])
    messages = params["messages"]
    if messages:
        last = copy.copy(messages[-1])
        blocks = [dict(b) for b in _as_blocks(last["content"])]
        for i in range(len(blocks) - 1, -1, -1):
            if blocks[i].get("type") not in ("thinking", "redacted_thinking"):
                blocks[i]["cache_control"] = dict(_EPHEMERAL)
                break
        last["content"] = blocks
        messages[-1] = last
