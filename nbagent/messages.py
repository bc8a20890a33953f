"""The conversation: messages with a `kind` discriminator, and tool calls.

Owns the message shapes and their JSON form (``to_dict`` / `message_from_dict`); imports nothing
from nbagent. Shapes are persisted by the stores: new fields get defaults, field types never change.

```
SystemMessage      kind="system"       content
UserMessage        kind="user"         content
AssistantMessage   kind="assistant"    text, tool_calls, reasoning, refusal, finish_reason, model
ToolResultMessage  kind="tool-result"  call_id, name, content, is_error, status, duration_s
```
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "AssistantMessage",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolCallStatus",
    "ToolResultMessage",
    "UserMessage",
    "message_from_dict",
    "messages_from_dicts",
    "new_call_id",
]

ToolCallStatus = Literal["done", "failed", "denied", "cancelled", "interrupted"]
"""How a tool call ended: ran and returned, raised / bad input, denied by a person, cancelled with
the run, or started before a crash with no known outcome."""

_UNSET: Any = object()


def new_call_id() -> str:
    """A fresh tool-call id (used when a provider sends none, and by the fake models)."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(slots=True, eq=False)
class ToolCall:
    """A tool call the model asked for.

    `args_json` is exactly what the model sent; `args` is it parsed (None when it is not a JSON
    object: the run then answers the call with an error result the model can correct).
    """

    id: str
    name: str
    args_json: str = "{}"
    _args: Any = field(default=_UNSET, repr=False)

    @classmethod
    def of(cls, name: str, args: dict[str, Any] | None = None, id: str | None = None) -> ToolCall:
        """Build a call from a dict of arguments (a fresh id unless one is given)."""
        args = {} if args is None else args
        return cls(id or new_call_id(), name, json.dumps(args), dict(args))

    @property
    def args(self) -> dict[str, Any] | None:
        if self._args is _UNSET:
            try:
                value = json.loads(self.args_json) if self.args_json.strip() else {}
            except ValueError:
                value = None
            self._args = value if isinstance(value, dict) else None
        return self._args  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ToolCall)
            and (self.id, self.name, self.args_json) == (other.id, other.name, other.args_json)
        )

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "args_json": self.args_json}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(data["id"], data["name"], data.get("args_json", "{}"))


@dataclass(slots=True)
class SystemMessage:
    """Instructions for the model."""

    content: str
    kind: Literal["system"] = "system"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "system", "content": self.content}


@dataclass(slots=True)
class UserMessage:
    """What the person wrote."""

    content: str
    kind: Literal["user"] = "user"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "user", "content": self.content}


@dataclass(slots=True)
class AssistantMessage:
    """One answer of the model: text, tool calls, or both."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    """Reasoning text some servers return (e.g. DeepSeek's ``reasoning_content``)."""
    refusal: str | None = None
    """The model's refusal message, when it refused (OpenAI ``message.refusal``)."""
    finish_reason: str | None = None
    model: str | None = None
    kind: Literal["assistant"] = "assistant"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": "assistant", "text": self.text}
        if self.tool_calls:
            data["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        for name in ("reasoning", "refusal", "finish_reason", "model"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data


@dataclass(slots=True)
class ToolResultMessage:
    """The result of one tool call, as the model sees it."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    status: ToolCallStatus = "done"
    duration_s: float | None = None
    decision: str | None = None
    """How a person decided this call: ``approved``, ``edited``, ``denied``, ``client`` (they gave
    the result), ``always-allowed``; None when no decision was needed."""
    decided_by: str | None = None
    """Who decided (``resume(decided_by=...)``; the view records the OS user), when known."""
    decided_at: float | None = None
    """When the decision was made (seconds since the epoch)."""
    kind: Literal["tool-result"] = "tool-result"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "tool-result",
            "call_id": self.call_id,
            "name": self.name,
            "content": self.content,
            "is_error": self.is_error,
            "status": self.status,
        }
        if self.duration_s is not None:
            data["duration_s"] = self.duration_s
        for name in ("decision", "decided_by", "decided_at"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage


def message_from_dict(data: dict[str, Any]) -> Message:
    """Rebuild a message from its ``to_dict()`` form."""
    kind = data.get("kind")
    if kind == "assistant":
        return AssistantMessage(
            text=data.get("text"),
            tool_calls=[ToolCall.from_dict(c) for c in data.get("tool_calls", ())],
            reasoning=data.get("reasoning"),
            refusal=data.get("refusal"),
            finish_reason=data.get("finish_reason"),
            model=data.get("model"),
        )
    if kind == "tool-result":
        return ToolResultMessage(
            call_id=data["call_id"],
            name=data["name"],
            content=data["content"],
            is_error=data.get("is_error", False),
            status=data.get("status", "done"),
            duration_s=data.get("duration_s"),
            decision=data.get("decision"),
            decided_by=data.get("decided_by"),
            decided_at=data.get("decided_at"),
        )
    if kind == "user":
        return UserMessage(data["content"])
    if kind == "system":
        return SystemMessage(data["content"])
    raise ValueError(f"unknown message kind {kind!r}")


def messages_from_dicts(items: list[dict[str, Any]]) -> list[Message]:
    return [message_from_dict(d) for d in items]
