"""Message content as the GenAI conventions record it, and the scrubbing of error texts.

Owns the JSON shapes of ``gen_ai.input.messages``, ``gen_ai.output.messages`` and
``gen_ai.system_instructions`` (role + parts: ``text``, ``tool_call``, ``tool_call_response``,
``blob`` placeholders for images: their bytes are never recorded), and `scrub`, which masks what
looks like a key or a bearer token in an error message before it reaches a span. Imports the
messages only; no OpenTelemetry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..messages import AssistantMessage, Message, ToolResultMessage, UserMessage

__all__ = ["MAX_ERROR_CHARS", "input_messages", "output_messages", "scrub", "system_instructions"]

MAX_ERROR_CHARS = 500
"""An error's text is cut to this many characters on a span."""

_SECRET = re.compile(
    r"(?i)(bearer\s+|api[_-]?key[\"'=:\s]+|x-api-key[\"'=:\s]+|authorization[\"'=:\s]+)[^\s\"',;]+"
    r"|\b(sk|pk|rk|gsk|xai|sk-ant|sk-proj)-[A-Za-z0-9_\-]{8,}"
)


def scrub(text: str) -> str:
    """`text` with anything that looks like a key or a token masked, cut to `MAX_ERROR_CHARS`."""
    masked = _SECRET.sub(lambda m: (m.group(1) or "") + "[redacted]", text)
    return masked if len(masked) <= MAX_ERROR_CHARS else masked[:MAX_ERROR_CHARS] + "…"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _parts(message: Message) -> list[dict[str, Any]]:
    if isinstance(message, UserMessage):
        parts: list[dict[str, Any]] = [{"type": "text", "content": message.content}] if message.content else []
        parts.extend({"type": "blob", "modality": "image", "mime_type": getattr(i, "media_type", None),
                      "content": "[image not recorded]"} for i in message.images)
        return parts
    if isinstance(message, AssistantMessage):
        parts = [{"type": "text", "content": message.text}] if message.text else []
        parts.extend({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.args if c.args is not None
                      else c.args_json} for c in message.tool_calls)
        return parts
    if isinstance(message, ToolResultMessage):
        return [{"type": "tool_call_response", "id": message.call_id, "response": message.content}]
    content = getattr(message, "content", "")
    return [{"type": "text", "content": content}] if content else []


_ROLES = {"user": "user", "assistant": "assistant", "tool-result": "tool", "system": "system",
          "compaction": "system"}


def _message(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": _ROLES.get(message.kind, message.kind), "parts": _parts(message)}
    if isinstance(message, AssistantMessage) and message.finish_reason:
        data["finish_reason"] = message.finish_reason
    return data


def input_messages(messages: Sequence[Message]) -> str:
    """``gen_ai.input.messages``: the conversation sent, system messages left to
    `system_instructions`."""
    return _dumps([_message(m) for m in messages if m.kind != "system"])


def output_messages(message: AssistantMessage) -> str:
    """``gen_ai.output.messages``: one answer of the model."""
    return _dumps([_message(message)])


def system_instructions(messages: Sequence[Message]) -> str | None:
    """``gen_ai.system_instructions`` of a request (None when it has no system message)."""
    texts = [{"type": "text", "content": m.content} for m in messages if m.kind == "system"]
    return _dumps(texts) if texts else None
