"""The shape of a recorded model call: the normalised request it is matched by, and its answer.

Owns `Recording` (one call: the request's content, its streamed deltas with their relative times,
the whole answer), `request_content` (what a request is matched by: what the model reads, never
ids, timings, headers, query parameters or what looks like a secret: `recorded_settings`),
`request_key`, `first_difference`, and the two protocols recordings travel
through: `RecordingSink` (where `record` keeps them) and `RecordingSource` (where `replay` reads
them); every `nbagent.store.Store` is both. Imports messages, usage and `base` only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..messages import AssistantMessage, Message, ToolResultMessage, message_from_dict
from ..usage import TokenCounts
from .base import ModelRequest, ModelResponse, ReasoningText, StreamItem

__all__ = ["RECORDING_FORMAT", "Recording", "RecordingSink", "RecordingSource", "answered_key", "first_difference",
           "message_content", "messages_content", "recorded_settings", "request_content", "request_key", "tool_results"]

RECORDING_FORMAT = 1
"""Version of a recording's JSON (``"format"`` in each entry)."""


class RecordingSink(Protocol):
    """Where a recording model's calls are kept (`Model.keep_recording`): the run loop passes its
    store."""

    async def add_recording(self, thread: str, entry: Mapping[str, Any]) -> None:
        """Keep one recorded call (`Recording.to_dict`) with `thread`."""


@runtime_checkable
class RecordingSource(Protocol):
    """What `replay` reads recorded calls from: a store."""

    async def recordings(self, threads: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The recorded calls (`Recording.to_dict`) of `threads` (None: of every thread)."""


def message_content(message: Message, positions: dict[str, int] | None = None) -> dict[str, Any]:
    """What the model reads of one message: no call ids (a live model makes new ones), no
    timings or decisions, the edited-arguments note included. A tool result names the call it
    answers by its place in that answer's calls (``"call"``, from `positions`: call id -> place),
    so results that came in out of order still answer the right call."""
    if isinstance(message, AssistantMessage):
        data: dict[str, Any] = {"kind": "assistant", "text": message.text or None}
        if message.tool_calls:
            data["tool_calls"] = [[c.name, c.args_json] for c in message.tool_calls]
        return data
    if isinstance(message, ToolResultMessage):
        return {"kind": "tool-result", "name": message.name, "call": (positions or {}).get(message.call_id),
                "content": message.model_text(), "is_error": message.is_error}
    data = message.to_dict()
    return data


def messages_content(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """`message_content` of each message, each tool result's call placed in its answer. The
    results that follow one another are put in the order of their calls: concurrent calls
    finish in any order, and a replay (or results taken from the recording) must match anyway."""
    positions: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    run = 0  # where the current run of tool results started in `out`
    for m in messages:
        if isinstance(m, AssistantMessage) and m.tool_calls:
            positions.update((c.id, i) for i, c in enumerate(m.tool_calls))
        if not isinstance(m, ToolResultMessage):
            _sort_results(out, run)
            run = len(out) + 1
        out.append(message_content(m, positions))
    _sort_results(out, run)
    return out


def _sort_results(out: list[dict[str, Any]], start: int) -> None:
    """Order ``out[start:]`` (tool results only) by their calls' places."""
    if len(out) - start > 1:
        out[start:] = sorted(out[start:], key=lambda m: m["call"] if isinstance(m["call"], int) else -1)


UNRECORDED_SETTINGS = frozenset({"extra_headers", "extra_query"})
"""Settings that become HTTP headers or URL query parameters (a gateway's key, an
``Authorization``, an ``api-key`` query): never recorded, so never matched on either (a replay
without the gateway, or with a new key, still matches)."""
REDACTED = "[redacted]"
_SECRET_WORDS = frozenset({"secret", "secrets", "password", "passwd", "credential", "credentials",
                           "authorization", "cookie", "apikey", "bearer"})
_SECRET_LAST_WORDS = frozenset({"key", "token", "auth", "signature"})
"""Words that name a secret only at the end of a name (``api_key``, ``access_token``; not
``stop_token_ids``)."""
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def _secret_name(name: object) -> bool:
    """Whether a field's name says its value is a secret: ``api_key``, ``X-Portkey-Api-Key``,
    ``accessToken``, ``client_secret``... (not ``max_tokens`` or ``stop_token_ids``)."""
    if not isinstance(name, str):
        return False
    words = [w.lower() for w in _WORD.findall(name)]
    return bool(words) and (words[-1] in _SECRET_LAST_WORDS or any(w in _SECRET_WORDS for w in words))


def _redacted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: REDACTED if _secret_name(k) else _redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(v) for v in value]
    return value


def recorded_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings as a recording keeps them: without `UNRECORDED_SETTINGS`, and with the value
    of every field whose name looks like a secret's (in ``extra_body``, ``metadata``..., at any
    depth) replaced by ``"[redacted]"``. The name stays, so a request still matches only one
    that sent the same fields; the body parameters themselves change the answer and are kept."""
    return {k: REDACTED if _secret_name(k) else _redacted(v) for k, v in settings.items()
            if k not in UNRECORDED_SETTINGS}


def request_content(request: ModelRequest) -> dict[str, Any]:
    """A request as plain JSON data, for matching: its messages (`message_content`), tools,
    settings (`recorded_settings`: no headers, query parameters or secrets) and output tool; not
    its step (matching is by content, not by position)."""
    return {
        "messages": messages_content(request.messages),
        "tools": [dict(t) for t in request.tools],
        "settings": recorded_settings(request.settings),
        "output_tool": request.output_tool,
    }


def canonical(value: Any) -> str:
    """Deterministic JSON of `value` (sorted keys; what JSON cannot hold becomes its ``str``)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def request_key(content: dict[str, Any]) -> str:
    """The hash a request is looked up by (sha256 of its canonical content)."""
    import hashlib  # not loaded by importing nbagent

    return hashlib.sha256(canonical(content).encode()).hexdigest()


@dataclass(slots=True)
class Recording:
    """One recorded model call."""

    key: str
    request: dict[str, Any]
    """`request_content` of the request."""
    message: dict[str, Any]
    """The answer (`AssistantMessage.to_dict`)."""
    usage: dict[str, Any] = field(default_factory=dict)
    """The answer's `TokenCounts`, as a dict."""
    deltas: list[list[Any]] = field(default_factory=list)
    """The streamed pieces as ``[seconds since the call started, "text" | "reasoning", text]``
    (empty for a call that was not streamed)."""
    provider: str = "unknown"
    model: str = "unknown"
    """The model name the server reported (else the model's own)."""
    priced: bool = True
    thread: str | None = None
    step: int = 0
    time: float = 0.0
    latency_s: float = 0.0
    context_window: int | None = None
    """The recorded model's context window in tokens (None: unknown): a replay reports it, so the
    replayed run cuts results and sizes requests as the recorded one did."""

    def to_dict(self) -> dict[str, Any]:
        """The recording as JSON data (one line of an exported file)."""
        return {"format": RECORDING_FORMAT, "key": self.key, "thread": self.thread, "step": self.step,
                "time": self.time, "latency_s": self.latency_s, "provider": self.provider, "model": self.model,
                "priced": self.priced, "context_window": self.context_window, "request": self.request,
                "message": self.message, "usage": self.usage, "deltas": self.deltas}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recording:
        """A recording from `to_dict`'s data (its key recomputed when absent). One made before
        `recorded_settings` loses the headers, query parameters and secrets of its settings here
        (and its key is recomputed), so it still matches and `export_recording` drops them."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a recorded call is a JSON object, not {type(data).__name__}")
        request, key = data["request"], data.get("key")
        if not isinstance(request, Mapping) or not isinstance(request.get("messages"), list):
            raise ValueError("its request is not a recorded request (an object with messages)")
        settings = request.get("settings")
        if isinstance(settings, Mapping) and (cleaned := recorded_settings(settings)) != settings:
            request, key = {**request, "settings": cleaned}, None
        message = data["message"]
        if not isinstance(message, Mapping) or message.get("kind") != "assistant":
            raise ValueError("its message is not a model's answer (kind 'assistant')")
        return cls(key or request_key(request), dict(request), dict(message), _usage(data.get("usage") or {}),
                   _deltas(data.get("deltas") or []), data.get("provider", "unknown"), data.get("model", "unknown"),
                   bool(data.get("priced", True)), data.get("thread"), int(data.get("step", 0)),
                   float(data.get("time", 0.0)), float(data.get("latency_s", 0.0)), data.get("context_window"))

    def response(self) -> ModelResponse:
        """The recorded answer, as a fresh `ModelResponse` marked `replayed`."""
        message = message_from_dict(self.message)
        assert isinstance(message, AssistantMessage)
        counts = TokenCounts(**{k: v for k, v in self.usage.items() if k in TokenCounts.__slots__})
        return ModelResponse(message, counts, model=self.model, replayed=True)

    def stream_items(self) -> list[StreamItem]:
        """The recorded deltas (or the answer's text as one, when none were recorded), then the
        answer."""
        items: list[StreamItem] = []
        for _, kind, text in self.deltas:
            items.append(ReasoningText(text) if kind == "reasoning" else str(text))
        if not self.deltas and self.message.get("text"):
            items.append(str(self.message["text"]))
        items.append(self.response())
        return items


def _usage(usage: Any) -> dict[str, Any]:
    """A recording's token counts, checked: each a whole number, ``reported`` a boolean."""
    if not isinstance(usage, Mapping):
        raise ValueError(f"its usage is {type(usage).__name__}, not an object of token counts")
    for name, value in usage.items():
        if name == "reported" and not isinstance(value, bool):
            raise ValueError(f"its usage's reported is {value!r}, not true or false")
        if name in TokenCounts.__slots__ and name != "reported" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"its usage's {name} is {value!r}, not a whole number of tokens")
    return dict(usage)


def _deltas(deltas: Any) -> list[list[Any]]:
    """A recording's streamed pieces, checked: ``[seconds, "text" | "reasoning", text]`` each."""
    if not isinstance(deltas, list):
        raise ValueError(f"its deltas are {type(deltas).__name__}, not a list")
    for delta in deltas:
        if not (isinstance(delta, list) and len(delta) == 3 and isinstance(delta[0], (int, float))
                and delta[1] in ("text", "reasoning") and isinstance(delta[2], str)):
            raise ValueError(f"its delta {_short(delta, 60)} is not [seconds, 'text' or 'reasoning', text]")
    return list(deltas)


def _short(value: Any, width: int = 160) -> str:
    text = canonical(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def first_difference(recorded: dict[str, Any], new: dict[str, Any]) -> str:
    """Where two `request_content` values first differ, as a sentence people can read."""
    old_messages, new_messages = recorded["messages"], new["messages"]
    for i, (old, now) in enumerate(zip(old_messages, new_messages, strict=False)):
        if old != now:
            return f"message {i} ({now.get('kind')}) differs: recorded {_short(old)}, now {_short(now)}"
    if len(old_messages) != len(new_messages):
        return (f"the recorded request has {len(old_messages)} messages, this one {len(new_messages)}"
                f" (the first {min(len(old_messages), len(new_messages))} are the same)")
    for name in ("tools", "settings", "output_tool"):
        if recorded.get(name) != new.get(name):
            return f"the {name} differ: recorded {_short(recorded.get(name))}, now {_short(new.get(name))}"
    return "no difference found"


def common_prefix(recorded: dict[str, Any], new: dict[str, Any]) -> int:
    """How many leading messages two request contents share."""
    count = 0
    for old, now in zip(recorded["messages"], new["messages"], strict=False):
        if old != now:
            break
        count += 1
    return count


def answered_key(messages: list[dict[str, Any]], answer: dict[str, Any]) -> str:
    """The key of a conversation (`messages_content`) followed by an answer (its
    `message_content`): what the results of the answer's calls are found by (`tool_results`)."""
    return request_key({"messages": [*messages, answer]})


def tool_results(recordings: Iterable[Recording]) -> dict[str, dict[int, dict[str, Any]]]:
    """The recorded tool results, for ``replay(tools="recorded")``: by `answered_key` of the
    conversation up to the answer that asked for them, each result by its call's place in the
    answer. A recorded request holds the results of its last answer with tool calls; the results
    of a recorded run's last tool step are in no request (the run ended before sending them)."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for entry in recordings:
        messages = entry.request["messages"]
        last = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].get("kind") == "assistant" and messages[i].get("tool_calls")), None)
        if last is None:
            continue
        results = {m["call"]: m for m in messages[last + 1:]
                   if m.get("kind") == "tool-result" and isinstance(m.get("call"), int)}
        if results:
            found.setdefault(answered_key(messages[:last], messages[last]), results)
    return found
