"""The request side of the Responses API wire: nbagent's request in, ``responses.create()`` keywords out.

Owns the mapping of messages to Responses ``input`` items (text, images, function calls and their
outputs, and the items an earlier answer brought back: reasoning, messages with their ``phase``,
built-in tool calls, any item type nbagent does not know), tool definitions, ``tool_choice``, the
check of settings against the installed SDK's ``responses.create`` signature, and
`responses_params`, the whole keyword set for one request.

The rule for what goes back (``store`` is False by default): every request sends ``"store":
false`` and never a ``previous_response_id``; an answer's output items are kept on its
`AssistantMessage` (``thinking_blocks``, which every store persists) and sent back in their order
on every later request, as the server sent them (an empty ``content`` list and a null ``status``
of a reasoning item, empty ``logprobs`` of a text part left out, as the official clients send
them). Function calls go back with the call id the thread knows. With ``store=False`` a
reasoning item without ``encrypted_content`` is not sent (the server could not resolve its id); with
``store=True`` items go back as they came, the server resolving them by id.

May import: nbagent's messages and exceptions, the model base, `_wire`'s settings merge, and the
SDK's ``openai.resources.responses`` (lazily, for the signature). Not the SDK client.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from ...exceptions import UserError
from ...messages import AssistantMessage, Image, Message, ToolResultMessage
from ..base import ModelRequest, check_known_settings

__all__ = [
    "ANTHROPIC_BLOCKS",
    "check_settings",
    "input_items",
    "item_for_input",
    "responses_items",
    "responses_params",
]

ANTHROPIC_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""``thinking_blocks`` types that are Anthropic's (never sent to the Responses API)."""

_ALWAYS_SET = frozenset({"input", "model", "stream", "tools", "self", "store", "previous_response_id"})
_MERGED_DICTS = ("extra_body", "extra_headers", "extra_query")
_ALIASES = {"max_tokens": "max_output_tokens"}
"""nbagent's generic setting names that the Responses API spells otherwise."""
_create_params: frozenset[str] | None = None


def _allowed_settings() -> frozenset[str]:
    """The keyword arguments the installed SDK's ``responses.create`` accepts (and `_ALIASES`)."""
    global _create_params
    if _create_params is None:
        from openai.resources.responses import AsyncResponses

        names = inspect.signature(AsyncResponses.create).parameters
        _create_params = (frozenset(names) - _ALWAYS_SET) | frozenset(_ALIASES)
    return _create_params


def check_settings(settings: Mapping[str, Any]) -> None:
    """Raise `UserError` for a setting ``responses.create`` does not take (``store`` and
    ``previous_response_id`` are the model's own: `OpenAIResponsesModel(store=...)`)."""
    check_known_settings(settings, _allowed_settings(),
                         "the openai SDK's responses.create (store is OpenAIResponsesModel(store=...), "
                         "previous_response_id is never sent)",
                         "send server-specific parameters with settings={'extra_body': {...}}")


# ------------------------------------------------------------------------------- messages -> items
def _image_part(image: Image) -> dict[str, Any]:
    return {"type": "input_image", "image_url": image.data_url(), "detail": image.detail or "auto"}


def _user_item(message: Any) -> dict[str, Any]:
    if not message.images:
        return {"role": "user", "content": message.content}
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": message.content}] if message.content else []
    parts.extend(_image_part(i) for i in message.images)
    return {"role": "user", "content": parts}


def _result_item(message: ToolResultMessage) -> dict[str, Any]:
    text = message.model_text()
    if not message.images:
        return {"type": "function_call_output", "call_id": message.call_id, "output": text}
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": text}] if text else []
    parts.extend(_image_part(i) for i in message.images)
    return {"type": "function_call_output", "call_id": message.call_id, "output": parts}


def responses_items(message: AssistantMessage) -> list[dict[str, Any]]:
    """The Responses output items an answer keeps (its ``thinking_blocks`` that are not Anthropic's)."""
    return [b for b in message.thinking_blocks if b.get("type") not in ANTHROPIC_BLOCKS]


def item_for_input(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as it goes back as input: unchanged, except that a reasoning item's empty
    ``content`` and null ``status``, and a message's text parts' empty ``logprobs``, are left out
    (as the official clients send them; the server accepts either)."""
    kind = item.get("type")
    if kind == "reasoning":
        return {k: v for k, v in item.items()
                if not ((k == "content" and not v) or (k == "status" and v is None))}
    if kind == "message" and isinstance(item.get("content"), list):
        parts = [{k: v for k, v in p.items() if not (k == "logprobs" and not v)} if isinstance(p, dict) else p
                 for p in item["content"]]
        return {**item, "content": parts}
    return item


def _call_item(call: Any, kept: dict[str, Any] | None) -> dict[str, Any]:
    args = call.args_json if call.args is not None and call.args_json.strip() else "{}"
    item: dict[str, Any] = {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": args}
    if kept is not None and kept.get("id"):
        item["id"] = kept["id"]
    return item


def _assistant_items(message: AssistantMessage, store: bool) -> list[dict[str, Any]]:
    """An answer's items in the order the server sent them (the function calls with the ids the
    thread knows); an answer from another model: its text, then its calls."""
    kept = responses_items(message)
    calls = list(message.tool_calls)
    out: list[dict[str, Any]] = []
    if not kept:
        text = message.text or message.refusal
        if text:
            out.append({"role": "assistant", "content": text})
        return out + [_call_item(c, None) for c in calls]
    for item in kept:
        kind = item.get("type")
        if kind == "function_call":
            if calls:
                out.append(_call_item(calls.pop(0), item))
            continue
        if kind == "reasoning" and not store and not item.get("encrypted_content"):
            continue  # not persisted by the server: its id alone cannot be resolved
        out.append(item_for_input(item))
    return out + [_call_item(c, None) for c in calls]  # (calls no item stands for: none normally)


def input_items(messages: Sequence[Message], store: bool) -> tuple[str | None, list[dict[str, Any]]]:
    """``instructions`` (the leading system messages) and the ``input`` items of a history."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.kind == "system":
            if items:
                items.append({"role": "system", "content": m.content})
            else:
                instructions.append(m.content)
        elif m.kind == "user":
            items.append(_user_item(m))
        elif m.kind == "tool-result":
            items.append(_result_item(m))
        elif m.kind == "assistant":
            items.extend(_assistant_items(m, store))
        else:
            raise UserError(f"cannot send a message of kind {m.kind!r} to a Responses API model")
    return ("\n\n".join(instructions) if instructions else None), items


# ------------------------------------------------------------------------------- tools, settings
def _wire_tool(definition: Mapping[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": definition["name"]}
    if definition.get("description"):
        tool["description"] = definition["description"]
    tool["parameters"] = definition.get("parameters") or {"type": "object", "properties": {}}
    if definition.get("strict") is not None:
        tool["strict"] = definition["strict"]
    return tool


def _wire_tool_choice(value: Any) -> Any:
    if isinstance(value, str) and value not in ("auto", "none", "required"):
        return {"type": "function", "name": value}  # a tool name
    return value


def _merged(settings: dict[str, Any], request: ModelRequest) -> dict[str, Any]:
    if not request.settings:
        return settings
    check_settings(request.settings)
    merged = {**settings, **request.settings}
    for name in _MERGED_DICTS:
        if isinstance(settings.get(name), dict) and isinstance(request.settings.get(name), dict):
            merged[name] = {**settings[name], **request.settings[name]}
    return merged


def responses_params(  # Size: the model's configuration, passed as is
    request: ModelRequest, *, model_name: str, settings: dict[str, Any], store: bool,
    reasoning: dict[str, Any] | None, encrypted: bool, builtin_tools: Sequence[Mapping[str, Any]], stream: bool,
) -> dict[str, Any]:
    """The keyword arguments for ``responses.create`` (without the key): ``store`` always, never
    ``previous_response_id``; ``reasoning`` from the model's configuration under the settings'
    own; ``include`` with ``reasoning.encrypted_content`` when `encrypted`; `builtin_tools` after
    the function tools; ``tool_choice`` and ``parallel_tool_calls`` only with tools."""
    settings = _merged(settings, request)
    instructions, items = input_items(request.messages, store)
    params: dict[str, Any] = {"model": model_name, "input": items, "store": store}
    if instructions is not None:
        params["instructions"] = instructions
    tools = [_wire_tool(t) for t in request.tools] + [dict(t) for t in builtin_tools]
    if tools:
        params["tools"] = tools
    if reasoning:
        params["reasoning"] = dict(reasoning)
    for key, value in settings.items():
        if value is None:
            continue
        key = _ALIASES.get(key, key)
        if key in ("tool_choice", "parallel_tool_calls") and not tools:
            continue  # the API rejects tool_choice without tools
        if key == "tool_choice":
            value = _wire_tool_choice(value)
        elif key == "reasoning" and isinstance(value, dict):
            value = {**params.get("reasoning", {}), **value}
        params[key] = value
    if encrypted:
        include = list(params.get("include") or ())
        if "reasoning.encrypted_content" not in include:
            include.append("reasoning.encrypted_content")
        params["include"] = include
    if stream:
        params["stream"] = True
    else:
        params.pop("stream_options", None)
    return params
