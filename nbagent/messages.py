"""The conversation: messages with a `kind` discriminator, and tool calls.

Owns the message shapes and their JSON form (``to_dict`` / `message_from_dict`); `Image` (what a
prompt may attach) lives in `nbagent.images` and is importable from here; imports only
nbagent.exceptions and nbagent.images. Shapes are persisted by the stores: new fields
get defaults, field types never change.

```
SystemMessage      kind="system"       content
UserMessage        kind="user"         content, images, blocked
AssistantMessage   kind="assistant"    text, tool_calls, reasoning, refusal, finish_reason, model, blocked
ToolResultMessage  kind="tool-result"  call_id, name, content, is_error, status, duration_s, decision...,
                                        images, display, edited_args, full_content
CompactionMessage  kind="compaction"   content (the summary), policy, upto, cleared, replaced, tokens...
```

A `CompactionMessage` is a record in the thread, never sent as it is: the run loop sends the
summary in place of the messages it replaced (see `nbagent.context.visible`). A message whose
``blocked`` is set (a guard refused it: `nbagent.guards`) is kept for the record and never sent
to a model either.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .exceptions import InvalidPromptError
from .images import IMAGE_TYPES, MAX_IMAGE_BYTES, Image

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "AssistantMessage",
    "CompactionMessage",
    "Image",
    "Message",
    "Prompt",
    "SystemMessage",
    "ToolCall",
    "ToolCallStatus",
    "ToolResultMessage",
    "UserMessage",
    "call_results",
    "clean_text",
    "message_from_dict",
    "messages_from_dicts",
    "new_call_id",
    "unanswered_calls",
    "unique_call_ids",
    "user_message",
]

ToolCallStatus = Literal["done", "failed", "denied", "cancelled", "interrupted"]
"""How a tool call ended: ran and returned, raised / bad input, denied by a person, cancelled with
the run, or started before a crash with no known outcome."""


class _Unset(enum.Enum):
    """A `ToolCall`'s arguments not parsed yet (None is taken: arguments that are no JSON object)."""

    UNSET = enum.auto()


_UNSET = _Unset.UNSET

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with surrogate halves joined into the characters they make (an emoji split across
    two streamed chunks) and lone ones replaced by U+FFFD, so it can always be stored and sent.
    Text without surrogates is returned as it is (the usual case costs one regex search)."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def clean_message(message: AssistantMessage) -> AssistantMessage:
    """An answer from a model with its text fields passed through `clean_text` (in place)."""
    if message.text:
        message.text = clean_text(message.text)
    if message.reasoning:
        message.reasoning = clean_text(message.reasoning)
    if message.refusal:
        message.refusal = clean_text(message.refusal)
    for call in message.tool_calls:
        name, args = clean_text(call.name), clean_text(call.args_json)
        if name is not call.name or args is not call.args_json:
            call.name, call.args_json, call._args = name, args, _UNSET
    return message


def new_call_id() -> str:
    """A fresh tool-call id (used when a provider sends none, and by the fake models)."""
    return "call_" + os.urandom(12).hex()


def unique_call_ids(calls: Sequence[ToolCall], seen: set[str] | None = None) -> None:
    """Give every call an id no other call in `calls` has, in place: an empty id (Gemini sends
    ``""`` for every call) or a repeated one gets a fresh `new_call_id`, so that each result maps
    back to exactly one call. `seen` (updated) holds ids already used elsewhere, e.g. by earlier
    answers of the thread (a server that names every call ``call_0``)."""
    seen = set() if seen is None else seen
    for call in calls:
        if not call.id or call.id in seen:
            call.id = new_call_id()
        seen.add(call.id)


@dataclass(slots=True, eq=False)
class ToolCall:
    """A tool call the model asked for.

    `args_json` is exactly what the model sent; `args` is it parsed (None when it is not a JSON
    object: the run then answers the call with an error result the model can correct).
    """

    id: str
    name: str
    args_json: str = "{}"
    _args: dict[str, Any] | Literal[_Unset.UNSET] | None = field(default=_UNSET, repr=False)

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
            except (ValueError, RecursionError):  # not JSON, or nested deeper than Python recurses
                value = None
            self._args = value if isinstance(value, dict) else None
        return self._args

    def set_args(self, args: dict[str, Any]) -> None:
        """Replace the arguments (a guard's rewrite): `args_json` becomes their JSON."""
        self.args_json = json.dumps(args, ensure_ascii=False, default=str)
        self._args = dict(args)

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
    """What the person wrote, and the images they attached (see `Image`)."""

    content: str
    images: list[Image] = field(default_factory=list)
    kind: Literal["user"] = "user"
    blocked: str | None = None
    """Set when an input guard blocked this prompt: the guard's name and its reason. The message is
    kept in the thread for the record and never sent to a model, in its turn or a later one."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": "user", "content": self.content}
        if self.images:
            data["images"] = [i.to_dict() for i in self.images]
        if self.blocked is not None:
            data["blocked"] = self.blocked
        return data


Prompt = str | Sequence[Any] | UserMessage
"""What `Agent.run` takes: a string, or a list of strings and images (anything `Image.of`
converts), e.g. ``["What is in this plot?", fig]``, or a ready `UserMessage`."""


def _check_text(text: str, where: str) -> None:
    found = _SURROGATE.search(text)  # a surrogate code point, which UTF-8 cannot encode
    if found is not None:
        at = found.start()
        raise InvalidPromptError(
            f"{where} holds a lone surrogate ({text[at]!r} at character {at}), which is not text any "
            "model accepts; it often comes from os.fsdecode() of a file name that is not UTF-8: "
            "decode the bytes with errors='replace' first"
        )


def user_message(prompt: Prompt) -> UserMessage:
    """The `UserMessage` for a prompt: the strings joined by blank lines, the rest as images.

    Raises:
        InvalidPromptError: a part is neither text nor an image (the message says which one).
    """
    if isinstance(prompt, str):
        _check_text(prompt, "the prompt")
        return UserMessage(prompt)
    if isinstance(prompt, UserMessage):
        if not isinstance(prompt.content, str) or not all(isinstance(i, Image) for i in prompt.images):
            raise InvalidPromptError("a UserMessage needs str content and a list of nbagent.Image")
        _check_text(prompt.content, "the prompt")
        return prompt
    if not isinstance(prompt, (list, tuple)):
        try:
            return UserMessage("", [Image.of(prompt)])
        except InvalidPromptError as exc:
            raise InvalidPromptError(
                f"the prompt must be a string, an image, or a list of strings and images ({exc})"
            ) from None
    texts: list[str] = []
    images: list[Image] = []
    for i, part in enumerate(prompt):
        if isinstance(part, str):
            _check_text(part, f"prompt part {i}")
            texts.append(part)  # always text (a URL too): Image.from_url(...) sends a URL as an image
            continue
        try:
            images.append(Image.of(part))
        except InvalidPromptError as exc:
            raise InvalidPromptError(f"prompt part {i}: {exc}") from None
    if not texts and not images:
        raise InvalidPromptError("the prompt is empty")
    return UserMessage("\n\n".join(texts), images)


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
    thinking_blocks: list[dict[str, Any]] = field(default_factory=list)
    """Provider blocks to send back unchanged on the next request: Anthropic's signed
    ``thinking`` / ``redacted_thinking`` blocks (the API checks their signatures)."""
    kind: Literal["assistant"] = "assistant"
    blocked: str | None = None
    """Set on the stand-in for an answer an output guard refused: the guard's name and its reason.
    The refused text and calls are not kept (no one saw them); the stand-in is never sent to a
    model."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": "assistant", "text": self.text}
        if self.tool_calls:
            data["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        for name in ("reasoning", "refusal", "finish_reason", "model"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if self.thinking_blocks:
            data["thinking_blocks"] = [dict(b) for b in self.thinking_blocks]
        if self.blocked is not None:
            data["blocked"] = self.blocked
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
    the result), ``always-allowed``, ``repeat-denied`` (the same call as one a person denied
    earlier in the turn, denied again without asking); None when no decision was needed."""
    decided_by: str | None = None
    """Who decided (``resume(decided_by=...)``; the view records the OS user), when known."""
    decided_at: float | None = None
    """When the decision was made (seconds since the epoch)."""
    images: list[Image] = field(default_factory=list)
    """Images the tool returned (an `Image`, a figure, a PIL image, or a list of text and images),
    sent to the model with `content` by providers that take images in tool results."""
    display: dict[str, str] | None = None
    """A MIME bundle for the view only, never sent to the model: ``{"text/html": ...}`` holds the
    sanitized ``_repr_html_`` of what the tool returned (a pandas DataFrame...); the view also
    shows ``text/markdown``. Sanitized again when shown. None: none."""
    edited_args: dict[str, Any] | None = None
    """The arguments the call ran with when a person edited them (decision ``edited``); the
    model's own arguments stay on its `ToolCall`. None: it ran as the model asked."""
    full_content: str | None = None
    """The whole text of the result when `content` (what the model read) was cut to fit the
    model's context window (``@tool(max_result_tokens=...)``, ``Agent(max_result_fraction=...)``);
    None when nothing was cut. The model can page through it with the built-in ``read_result``
    tool; the view shows it on request."""
    kind: Literal["tool-result"] = "tool-result"

    @property
    def whole_text(self) -> str:
        """The whole result: `full_content` when the model's copy was cut, else `content`."""
        return self.content if self.full_content is None else self.full_content

    def model_text(self) -> str:
        """The text a provider sends the model for this result: `content`, after a note with the
        edited arguments when a person edited them (so the model knows what really ran)."""
        if self.edited_args is None:
            return self.content
        note = json.dumps(self.edited_args, ensure_ascii=False, default=str)
        return f"[The user changed the arguments before approving; the tool ran with: {note}]\n{self.content}"

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
        if self.display is not None:
            data["display"] = dict(self.display)
        if self.edited_args is not None:
            data["edited_args"] = dict(self.edited_args)
        if self.images:
            data["images"] = [i.to_dict() for i in self.images]
        if self.full_content is not None:
            data["full_content"] = self.full_content
        return data


@dataclass(slots=True)
class CompactionMessage:
    """A stored record of one compaction: from here on, the model is sent `content` (a summary)
    in place of the thread's messages before `upto`, or stubs for the results in `cleared`.

    The thread keeps every message it replaced: `Agent.history`, `fork`, the frames and the views
    see them all; only the requests change. Written by the run loop in the same commit as the
    summary's usage row (``purpose="compaction"``), so a resumed run sends what the crashed one
    would have sent.
    """

    content: str
    """The summary the model reads in place of the replaced messages ("" for ``clear_results``)."""
    policy: Literal["summary", "clear_results", "native"] = "summary"
    upto: int = 0
    """The summary stands for the thread's messages ``[0, upto)`` (earlier records included)."""
    cleared: list[str] = field(default_factory=list)
    """``clear_results``: the call ids whose results the model now sees as a one-line stub."""
    replaced: int = 0
    """How many messages this compaction replaced (or results it cleared)."""
    tokens_before: int = 0
    """The estimated size of the request before the compaction, in tokens."""
    tokens_after: int = 0
    """The estimated size after it."""
    trigger: Literal["threshold", "overflow"] = "threshold"
    """Why it ran: the next request would pass ``Compaction.at``, or the provider refused it."""
    model: str | None = None
    """The model that wrote the summary (None for ``clear_results``)."""
    summary_tokens: int = 0
    """The summary's size in tokens (its call's output tokens)."""
    kind: Literal["compaction"] = "compaction"
    items: list[dict[str, Any]] = field(default_factory=list)
    """``native``: the items the provider returned (its compacted history: the user's messages and
    an encrypted compaction item), sent as they came in place of the messages before `upto`."""

    @property
    def saved(self) -> int:
        """Tokens the compaction took out of the request (estimated)."""
        return max(0, self.tokens_before - self.tokens_after)

    def describe(self) -> str:
        """One line for a view: ``compacted 42 messages into a summary (1,204 tokens), saved 61k tokens``."""
        saved = f"{self.saved / 1000:.3g}k" if self.saved >= 1000 else f"{self.saved:,}"
        if self.policy == "clear_results":
            return f"cleared {self.replaced:,} old tool results, saved {saved} tokens"
        if self.policy == "native":
            return f"compacted {self.replaced:,} messages on the provider's side, saved {saved} tokens"
        size = f" ({self.summary_tokens:,} tokens)" if self.summary_tokens else ""
        return f"compacted {self.replaced:,} messages into a summary{size}, saved {saved} tokens"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "compaction", "content": self.content, "policy": self.policy, "upto": self.upto,
            "replaced": self.replaced, "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after, "trigger": self.trigger,
        }
        if self.cleared:
            data["cleared"] = list(self.cleared)
        if self.model is not None:
            data["model"] = self.model
        if self.summary_tokens:
            data["summary_tokens"] = self.summary_tokens
        if self.items:
            data["items"] = [dict(i) for i in self.items]
        return data


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage | CompactionMessage


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
            thinking_blocks=[dict(b) for b in data.get("thinking_blocks", ())],
            blocked=data.get("blocked"),
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
            images=[Image.from_dict(i) for i in data.get("images") or ()],
            display=dict(data["display"]) if data.get("display") else None,
            edited_args=data.get("edited_args"),
            full_content=data.get("full_content"),
        )
    if kind == "user":
        images = data.get("images")
        return UserMessage(data["content"], [Image.from_dict(i) for i in images] if images else [],
                           blocked=data.get("blocked"))
    if kind == "system":
        return SystemMessage(data["content"])
    if kind == "compaction":
        return CompactionMessage(
            content=data.get("content", ""), policy=data.get("policy", "summary"), upto=data.get("upto", 0),
            cleared=list(data.get("cleared") or ()), replaced=data.get("replaced", 0),
            tokens_before=data.get("tokens_before", 0), tokens_after=data.get("tokens_after", 0),
            trigger=data.get("trigger", "threshold"), model=data.get("model"),
            summary_tokens=data.get("summary_tokens", 0), items=[dict(i) for i in data.get("items") or ()],
        )
    raise ValueError(f"unknown message kind {kind!r}")


def messages_from_dicts(items: list[dict[str, Any]]) -> list[Message]:
    return [message_from_dict(d) for d in items]


def unanswered_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """Tool calls of the last answer that have no result yet (looks back only to that answer)."""
    answered: set[str] = set()
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.kind == "tool-result":
            answered.add(m.call_id)
        elif m.kind == "assistant":
            return [c for c in m.tool_calls if c.id not in answered]
        elif m.kind != "compaction":
            return []
    return []


def call_results(messages: Sequence[Message]) -> dict[tuple[int, str], tuple[int, ToolResultMessage]]:
    """Each tool result by ``(index of the answer that asked, call id)``: a result belongs to the
    last answer before it, so a call id that a server reused in another answer (threads written
    before ids were made unique) never shows another call's result."""
    out: dict[tuple[int, str], tuple[int, ToolResultMessage]] = {}
    answer = -1
    for i, m in enumerate(messages):
        if m.kind == "assistant":
            answer = i
        elif m.kind == "tool-result":
            out.setdefault((answer, m.call_id), (i, m))
    return out
