"""The conversation: messages with a `kind` discriminator, and tool calls.

Owns the message shapes and their JSON form (``to_dict`` / `message_from_dict`), and `Image` (what a
prompt may attach); imports only nbagent.exceptions. Shapes are persisted by the stores: new fields
get defaults, field types never change.

```
SystemMessage      kind="system"       content
UserMessage        kind="user"         content, images
AssistantMessage   kind="assistant"    text, tool_calls, reasoning, refusal, finish_reason, model
ToolResultMessage  kind="tool-result"  call_id, name, content, is_error, status, duration_s, decision...,
                                        images, display, edited_args
```
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .exceptions import InvalidPromptError

__all__ = [
    "AssistantMessage",
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

_UNSET: Any = object()

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
            except (ValueError, RecursionError):  # not JSON, or nested deeper than Python recurses
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


IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image formats every vision API of the OpenAI kind accepts (and browsers show inertly)."""

MAX_IMAGE_BYTES = 20 * 1024 * 1024
"""The largest image accepted (OpenAI's limit per image); bigger ones fail before any request."""

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _sniff(data: bytes) -> str | None:
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(slots=True, frozen=True)
class Image:
    """An image sent to the model with a prompt (for models that see images).

    ```python
    agent.run_sync(["What does this chart show?", fig])          # a matplotlib Figure
    agent.run_sync(["Describe it.", Image.from_file("photo.jpg")])
    agent.run_sync(["And this one?", Image.from_url("https://example.com/cat.png")])
    ```

    Either `data` (the encoded file: PNG, JPEG, GIF or WebP, checked by its first bytes) or `url`
    (an ``http(s)`` address the provider fetches itself). Stored with the thread (base64 in the
    store's JSON), so a resumed conversation still has it. Use `Image.of` to convert what a notebook
    has at hand: bytes, a path, a PIL image, a matplotlib figure, an ``IPython.display.Image``.

    Attributes:
        data: the image file's bytes (None for a URL image).
        media_type: ``image/png``, ``image/jpeg``, ``image/gif`` or ``image/webp``.
        url: the image's address (None for an image with data).
        detail: OpenAI's ``detail`` hint (``"low"``, ``"high"``, ``"auto"``); None sends none.
    """

    data: bytes | None = field(default=None, repr=False)
    media_type: str | None = None
    url: str | None = None
    detail: Literal["auto", "low", "high"] | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise InvalidPromptError("an Image needs either data (the file's bytes) or url, not both")
        if self.detail not in (None, "auto", "low", "high"):
            raise InvalidPromptError(f"detail must be 'auto', 'low' or 'high', got {self.detail!r}")
        if self.url is not None:
            if not isinstance(self.url, str) or not self.url.startswith(("https://", "http://", "data:image/")):
                raise InvalidPromptError(
                    f"an image URL must start with https://, http:// or data:image/, got {self.url!r}"
                )
            if not self.url.startswith("data:"):
                return
            header, _, payload = self.url.partition(",")
            if not header.endswith(";base64"):
                raise InvalidPromptError("a data: image URL must be base64-encoded (data:image/png;base64,...)")
            try:
                decoded = base64.b64decode(payload, validate=True)
            except ValueError:
                raise InvalidPromptError("the data: image URL is not valid base64") from None
            object.__setattr__(self, "url", None)  # kept as data: stored and sent like any other
            object.__setattr__(self, "data", decoded)
        if not isinstance(self.data, (bytes, bytearray, memoryview)):
            raise InvalidPromptError(f"Image data must be bytes, got {type(self.data).__name__}")
        data = bytes(self.data)
        object.__setattr__(self, "data", data)
        if len(data) > MAX_IMAGE_BYTES:
            raise InvalidPromptError(
                f"the image is {len(data) / 1e6:.1f} MB; models accept at most "
                f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB per image: make it smaller first"
            )
        sniffed = _sniff(data)
        if sniffed is None:
            raise InvalidPromptError(
                "the image data is not PNG, JPEG, GIF or WebP (its first bytes are "
                f"{data[:8]!r}); convert it first, e.g. with PIL: img.save(buf, format='PNG')"
            )
        if self.media_type is not None and self.media_type != sniffed:
            raise InvalidPromptError(f"the image data is {sniffed}, not {self.media_type}")
        object.__setattr__(self, "media_type", sniffed)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, detail: Literal["auto", "low", "high"] | None = None) -> Image:
        """An image read from a file (PNG, JPEG, GIF or WebP)."""
        return cls(Path(path).expanduser().read_bytes(), detail=detail)

    @classmethod
    def from_url(cls, url: str, *, detail: Literal["auto", "low", "high"] | None = None) -> Image:
        """An image the provider fetches from `url` (``https://...``), or a ``data:image/...`` URL."""
        return cls(url=url, detail=detail)

    @classmethod
    def of(cls, value: Any) -> Image:
        """Convert what a notebook has: an `Image`, image bytes, a path (`Path`), an ``http(s)``
        URL string, a PIL image, a matplotlib figure, or anything with ``_repr_png_`` /
        ``_repr_jpeg_`` (``IPython.display.Image``).

        Raises:
            InvalidPromptError: the value is none of these, or its bytes are not an image format
                models accept, or too big.
        """
        if isinstance(value, Image):
            return value
        if isinstance(value, (bytes, bytearray, memoryview)):
            return cls(bytes(value))
        if isinstance(value, os.PathLike):
            return cls.from_file(value)
        if isinstance(value, str):
            if value.startswith(("https://", "http://", "data:image/")):
                return cls.from_url(value)
            raise InvalidPromptError(
                "a string here is taken as text; for an image file pass Path(...) or Image.from_file(...)"
            )
        savefig = getattr(value, "savefig", None)
        if callable(savefig):  # a matplotlib Figure
            buf = io.BytesIO()
            savefig(buf, format="png", bbox_inches="tight")
            return cls(buf.getvalue())
        for name in ("_repr_png_", "_repr_jpeg_"):
            method = getattr(value, name, None)
            if callable(method):
                data = method()
                if isinstance(data, tuple):  # (data, metadata)
                    data = data[0]
                if isinstance(data, str):
                    data = base64.b64decode(data)
                if data:
                    return cls(bytes(data))
        raise InvalidPromptError(
            f"cannot use {type(value).__name__} {value!r:.40} as an image: pass bytes, a Path, an http(s) URL, "
            "a PIL image, a matplotlib figure or an nbagent.Image"
        )

    # ------------------------------------------------------------------ forms
    def data_url(self) -> str:
        """The image as ``data:<type>;base64,...`` (or its `url`)."""
        if self.url is not None:
            return self.url
        assert self.data is not None
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = (
            {"url": self.url} if self.url is not None
            else {"media_type": self.media_type, "data": base64.b64encode(self.data or b"").decode("ascii")}
        )
        if self.detail is not None:
            data["detail"] = self.detail
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Image:
        if "url" in data:
            return cls(url=data["url"], detail=data.get("detail"))
        return cls(base64.b64decode(data["data"]), data.get("media_type"), detail=data.get("detail"))

    def describe(self) -> str:
        """A short label: ``image/png, 12 kB`` or the URL."""
        if self.url is not None:
            return self.url if len(self.url) <= 60 else self.url[:59] + "…"
        return f"{self.media_type}, {max(1, round(len(self.data or b'') / 1000))} kB"


@dataclass(slots=True)
class UserMessage:
    """What the person wrote, and the images they attached (see `Image`)."""

    content: str
    images: list[Image] = field(default_factory=list)
    kind: Literal["user"] = "user"

    def to_dict(self) -> dict[str, Any]:
        if self.images:
            return {"kind": "user", "content": self.content, "images": [i.to_dict() for i in self.images]}
        return {"kind": "user", "content": self.content}


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
    kind: Literal["tool-result"] = "tool-result"

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
            thinking_blocks=[dict(b) for b in data.get("thinking_blocks", ())],
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
        )
    if kind == "user":
        images = data.get("images")
        return UserMessage(data["content"], [Image.from_dict(i) for i in images] if images else [])
    if kind == "system":
        return SystemMessage(data["content"])
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
        else:
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
