"""The request side of the chat-completions wire: nbagent's request in, ``create()`` keywords out.

Owns the mapping of messages (text, images, tool results, assistant turns with their tool calls
and reasoning), tool definitions and ``tool_choice`` to the wire format, the check of settings
against the installed SDK's ``chat.completions.create`` signature, the merge of model and agent
settings, and `request_params`, the whole keyword set for one request. Converted messages are
cached per model (`WireCache`) so a step converts only what is new in the history.

May import: nbagent's messages, exceptions and model base, and the SDK's
``openai.resources.chat.completions`` (lazily, for the signature). Not the SDK client, not
`_stream`, `_errors` or `_model`; it never sees the API key.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from ...exceptions import UserError
from ...messages import Image, Message, ToolResultMessage
from ..base import ModelRequest, check_known_settings

_ALWAYS_SET = frozenset({"messages", "model", "stream", "tools", "self"})
_MERGED_DICTS = ("extra_body", "extra_headers", "extra_query")
_CACHE_LIMIT = 20_000
_create_params: frozenset[str] | None = None


def _allowed_settings() -> frozenset[str]:
    """The keyword arguments the installed SDK's ``chat.completions.create`` accepts."""
    global _create_params
    if _create_params is None:
        from openai.resources.chat.completions import AsyncCompletions

        names = inspect.signature(AsyncCompletions.create).parameters
        _create_params = frozenset(names) - _ALWAYS_SET
    return _create_params


def check_settings(settings: Mapping[str, Any]) -> None:
    """Raise `UserError` for a setting ``chat.completions.create`` does not take."""
    check_known_settings(settings, _allowed_settings(), "the openai SDK's chat.completions.create",
                         "send server-specific parameters with settings={'extra_body': {...}}")


def _image_part(image: Image) -> dict[str, Any]:
    url: dict[str, Any] = {"url": image.data_url()}
    if image.detail is not None:
        url["detail"] = image.detail
    return {"type": "image_url", "image_url": url}


def _tool_images_message(results: list[ToolResultMessage]) -> dict[str, Any]:
    """The user message that carries the images of tool results (``tool`` messages take text only)."""
    parts: list[dict[str, Any]] = []
    for r in results:
        parts.append({"type": "text", "text": f"[images returned by the {r.name} tool (call {r.call_id})]"})
        parts.extend(_image_part(i) for i in r.images)
    return {"role": "user", "content": parts}


def _wire_message(message: Message, send_reasoning: bool = True, tool_images: bool = True) -> dict[str, Any]:
    if message.kind == "user":
        images = message.images
        if not images:
            return {"role": "user", "content": message.content}
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
        parts.extend(_image_part(i) for i in images)
        return {"role": "user", "content": parts}
    if message.kind == "tool-result":
        text = message.model_text()
        n = len(message.images)
        if n and tool_images:
            what = "the image this tool returned follows" if n == 1 else f"the {n} images this tool returned follow"
            text += f"\n\n[{what} in the next user message]"
        return {"role": "tool", "tool_call_id": message.call_id, "content": text}
    if message.kind == "system":
        return {"role": "system", "content": message.content}
    if message.kind == "assistant":
        calls = message.tool_calls
        wire: dict[str, Any] = {"role": "assistant",
                                "content": message.text or message.refusal or ("" if not calls else None)}
        if send_reasoning and message.reasoning:
            # DeepSeek (thinking with tools) needs it back within a turn; only servers that
            # sent reasoning_content produce messages with reasoning.
            wire["reasoning_content"] = message.reasoning
        if not calls:
            return wire
        # Arguments that are not a JSON object are never replayed (llama.cpp answers the whole
        # request with HTTP 500); the call's error result already told the model what was wrong.
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": c.args_json if c.args is not None and c.args_json.strip() else "{}",
                },
            }
            for c in calls
        ]
        return wire
    raise UserError(f"cannot send a message of kind {message.kind!r} to a chat-completions model")


def _wire_tool(definition: Mapping[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": definition["name"]}
    if definition.get("description"):
        function["description"] = definition["description"]
    function["parameters"] = definition.get("parameters") or {"type": "object", "properties": {}}
    if definition.get("strict") is not None:
        function["strict"] = definition["strict"]
    return {"type": "function", "function": function}


def _wire_tool_choice(value: Any) -> Any:
    if isinstance(value, str) and value not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": value}}  # a tool name
    return value


class WireCache:
    """One model's converted history messages and tool list.

    Messages are keyed by id() with the message kept alive so ids are not reused: a step converts
    only what is new, whatever the length of the history. The tool list is converted again only
    when the agent passes another list object.
    """

    __slots__ = ("messages", "tools")

    def __init__(self) -> None:
        self.messages: dict[int, tuple[Message, dict[str, Any]]] = {}
        self.tools: tuple[Any, list[dict[str, Any]]] | None = None

    def wire_messages(self, messages: list[Message], send_reasoning: bool,
                      tool_images: bool = True) -> list[dict[str, Any]]:
        """The history as chat-completions messages. Images that tools returned go in one user
        message after the answer's ``tool`` messages (which take text only): with
        ``tool_images=False`` (a text-only model) only their description is sent."""
        cache = self.messages
        out = []
        with_images: list[ToolResultMessage] = []
        for m in messages:
            if m.kind == "tool-result":
                if tool_images and m.images:
                    with_images.append(m)
            elif with_images:
                out.append(_tool_images_message(with_images))
                with_images = []
            if m.kind == "system":  # rebuilt by the loop each step: not worth a cache entry
                out.append({"role": "system", "content": m.content})
                continue
            hit = cache.get(id(m))
            if hit is None or hit[0] is not m:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                hit = (m, _wire_message(m, send_reasoning, tool_images))
                cache[id(m)] = hit
            out.append(hit[1])
        if with_images:
            out.append(_tool_images_message(with_images))
        return out

    def wire_tools(self, tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        cached = self.tools
        if cached is not None and cached[0] is tools:
            return cached[1]
        wire = [_wire_tool(t) for t in tools]
        self.tools = (tools, wire)
        return wire


def request_params(
    request: ModelRequest,
    *,
    model_name: str,
    settings: dict[str, Any],
    cache: WireCache,
    send_reasoning: bool,
    stream: bool,
    tool_images: bool = True,
) -> dict[str, Any]:
    """The keyword arguments for ``chat.completions.create`` (without the key): the model's
    `settings` with the request's merged over them (``extra_body`` / ``extra_headers`` /
    ``extra_query`` key by key), ``tool_choice`` and ``parallel_tool_calls`` only with tools,
    ``stream_options.include_usage`` when streaming."""
    if request.settings:
        check_settings(request.settings)
        merged = {**settings, **request.settings}
        for name in _MERGED_DICTS:
            if isinstance(settings.get(name), dict) and isinstance(request.settings.get(name), dict):
                merged[name] = {**settings[name], **request.settings[name]}
        settings = merged
    messages = cache.wire_messages(request.messages, send_reasoning, tool_images)
    params: dict[str, Any] = {"model": model_name, "messages": messages}
    if request.tools:
        params["tools"] = cache.wire_tools(request.tools)
    for key, value in settings.items():
        if value is None:
            continue
        if key == "tool_choice":
            if not request.tools:
                continue  # servers reject tool_choice without tools
            value = _wire_tool_choice(value)
        elif key == "parallel_tool_calls" and not request.tools:
            continue
        params[key] = value
    if stream:
        params["stream"] = True
        params.setdefault("stream_options", {"include_usage": True})
    else:
        params.pop("stream_options", None)
    return params
