"""What `tests.wire.batch_server.BatchServer` answers each request of a batch with (standard library only).

A *responder* is a callable ``responder(request: BatchRequest) -> answer``. It runs once for each
request line of a batch, when the batch ends, and its answer is one of:

- `Text` or `ToolCall` (or a list of `ToolCall`, parallel calls): the server wraps it into the
  body the request's API returns (`chat_completion`, `response_object`, `anthropic_message`),
  with ids, a stop reason and ``usage``;
- a ``dict``: the response body itself, sent as is;
- an outcome that is not an answer: `RequestError` (the provider refused this one request with an
  HTTP error and a message), `RequestExpired` (it never ran before the batch's window closed),
  `ServerFault` (it failed inside the provider without an HTTP answer).

`BatchRequest` says what was asked: the API (``"chat"``, ``"responses"`` or ``"messages"``), the
``custom_id``, the request ``body`` (an OpenAI line's ``body``, an Anthropic request's ``params``),
and, read from the body, the ``prompt`` (the first user text), the ``step`` (how many model turns
the conversation already holds: 0 on a row's first request, 1 once it carries one tool round
trip...), the ``tool_results`` of its last turn and the ``tools`` offered.

Ready responders:

- `auto` (the default): a tool-using agent in one rule, as tests/wire/scripted_server.py answers:
  tools offered and the last turn is the prompt: a call of the first tool with its first
  parameter set to the prompt; the last turn holds tool results: ``answer to <prompt>:
  <results joined by "; ">``; no tools: ``answer to <prompt>``. A prompt containing ``[fail]``
  gets `RequestError`, ``[expire]`` `RequestExpired`, ``[server-error]`` `ServerFault` (handy
  when the server runs in another process, where a test cannot hand it a Python callable);
- ``script(step0, step1, ...)``: the answer to a request at step *k* is the *k*-th item (the last
  one past the end); an item is any answer above or a callable ``(BatchRequest) -> answer``::

      two_step = script(ToolCall("get_weather", {"city": "Paris"}), Text("Sunny in Paris."))

- ``route({"row-2": script(...), ...}, default=auto)``: by the longest key that starts the
  request's ``custom_id``.

Token counts are deterministic: input ``ceil(len(json of the messages/input and tools) / 4)``,
output ``ceil(len(text or name + arguments) / 4) + 1`` (so a later step, carrying more history,
costs more input tokens than the first).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Answer", "BatchRequest", "RequestError", "RequestExpired", "Responder", "ServerFault", "Text",
           "ToolCall", "anthropic_message", "auto", "body_for", "chat_completion", "response_object", "route",
           "script"]

Api = Literal["chat", "responses", "messages"]


# ----------------------------------------------------------------------------------- answers
@dataclass(frozen=True)
class Text:
    """The model answers with this text (its final answer)."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """The model calls tool `name` with `arguments`; `call_id` defaults to one derived from the request."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    call_id: str | None = None


@dataclass(frozen=True)
class RequestError:
    """The provider answered this request with an HTTP error (the other requests of the batch run on).

    OpenAI: an error-file line whose ``response`` holds `status` and the body ``{"error": {message,
    type, param, code}}``. Anthropic: an ``errored`` result with ``{"type": "error", "error":
    {"type": type, "message": message}}``.
    """

    message: str
    status: int = 400
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None


@dataclass(frozen=True)
class RequestExpired:
    """The request was not run before the batch's completion window closed (OpenAI: an error-file
    line with code ``batch_expired``, and the batch ends ``expired``; Anthropic: an ``expired`` result)."""


@dataclass(frozen=True)
class ServerFault:
    """The request failed inside the provider with no HTTP answer (OpenAI: an error-file line with
    ``response: null`` and ``error: {code, message}``; Anthropic: ``errored`` with an ``api_error``)."""

    message: str = "The server had an error while processing your request. Sorry about that!"
    code: str = "server_error"


Outcome = RequestError | RequestExpired | ServerFault
Answer = Text | ToolCall | Sequence[ToolCall] | dict[str, Any] | Outcome


# ----------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class BatchRequest:
    """One request of a batch, as the responder sees it (see the module docstring)."""

    api: Api
    custom_id: str
    body: dict[str, Any]
    batch_id: str = ""
    line: int = 0
    """Its 1-based position in the batch's input."""

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The conversation: chat ``messages``, Responses ``input`` items, Anthropic ``messages``."""
        items = self.body.get("input" if self.api == "responses" else "messages")
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return [item for item in items or () if isinstance(item, dict)]

    @property
    def prompt(self) -> str:
        """The first user message's text ("" for none)."""
        return next((_text(t.get("content")) for t in self.turns if t.get("role") == "user"), "")

    @property
    def step(self) -> int:
        """How many model turns the conversation holds (consecutive tool calls count as one turn)."""
        count, in_model_turn = 0, False
        for item in self.turns:
            model = item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning")
            count += model and not in_model_turn
            in_model_turn = model
        return count

    @property
    def tool_results(self) -> list[str]:
        """The texts of the tool results the last turn carries ([] when it is a prompt)."""
        turns = self.turns
        if self.api == "messages":
            last = turns[-1] if turns else {}
            blocks = last.get("content") if isinstance(last.get("content"), list) else []
            return [_text(b.get("content")) for b in blocks if b.get("type") == "tool_result"]
        kind = ("role", "tool") if self.api == "chat" else ("type", "function_call_output")
        results: list[str] = []
        for item in reversed(turns):
            if item.get(kind[0]) != kind[1]:
                break
            results.insert(0, _text(item.get("content" if self.api == "chat" else "output")))
        return results

    @property
    def tools(self) -> list[tuple[str, dict[str, Any]]]:
        """``(name, JSON schema of its parameters)`` of each function tool offered, in order."""
        out = []
        for tool in self.body.get("tools") or ():
            if self.api == "chat":
                function = tool.get("function") or {}
                out.append((function.get("name", ""), function.get("parameters") or {}))
            elif self.api == "responses" and tool.get("type") == "function":
                out.append((tool.get("name", ""), tool.get("parameters") or {}))
            elif self.api == "messages" and "name" in tool:
                out.append((tool["name"], tool.get("input_schema") or {}))
        return out


def _text(content: Any) -> str:
    """A message's (or a tool result's) text: the string, or its text parts joined."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


Responder = Callable[[BatchRequest], Answer]


# ----------------------------------------------------------------------------------- responders
def auto(request: BatchRequest) -> Answer:
    """The default responder (see the module docstring)."""
    prompt = request.prompt
    if "[fail]" in prompt:
        return RequestError(f"the batch server refuses {prompt!r}")
    if "[expire]" in prompt:
        return RequestExpired()
    if "[server-error]" in prompt:
        return ServerFault()
    results = request.tool_results
    if results:
        return Text(f"answer to {prompt}: {'; '.join(results)}")
    if request.tools:
        name, schema = request.tools[0]
        params = list(schema.get("properties") or {})
        return ToolCall(name, {params[0]: prompt} if params else {})
    return Text(f"answer to {prompt}")


def script(*steps: Answer | Callable[[BatchRequest], Answer]) -> Responder:
    """A responder answering a request at step *k* with ``steps[k]`` (the last one past the end)."""
    if not steps:
        raise ValueError("script() needs at least one step")

    def respond(request: BatchRequest) -> Answer:
        step = steps[min(request.step, len(steps) - 1)]
        return step(request) if callable(step) else step

    return respond


def route(by_prefix: Mapping[str, Responder], default: Responder = auto) -> Responder:
    """A responder choosing, for each request, the responder whose key is the longest prefix of its
    ``custom_id`` (`default` when none is)."""
    keys = sorted(by_prefix, key=len, reverse=True)

    def respond(request: BatchRequest) -> Answer:
        key = next((k for k in keys if request.custom_id.startswith(k)), None)
        return (by_prefix[key] if key is not None else default)(request)

    return respond


# ----------------------------------------------------------------------------------- bodies
def body_for(request: BatchRequest, answer: Text | ToolCall | Sequence[ToolCall]) -> dict[str, Any]:
    """The response body `request`'s API returns for `answer`."""
    build = {"chat": chat_completion, "responses": response_object, "messages": anthropic_message}[request.api]
    return build(request, answer)


def _calls(answer: Text | ToolCall | Sequence[ToolCall]) -> list[ToolCall]:
    if isinstance(answer, Text):
        return []
    return [answer] if isinstance(answer, ToolCall) else list(answer)


def _hex(*parts: object, n: int = 24) -> str:
    """A stable id fragment: the same request always gets the same ids."""
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:n]


def _call_id(request: BatchRequest, call: ToolCall, index: int, prefix: str) -> str:
    return call.call_id or f"{prefix}{_hex(request.batch_id, request.custom_id, request.step, index)}"


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _usage(request: BatchRequest, answer: Text | ToolCall | Sequence[ToolCall]) -> tuple[int, int]:
    asked = json.dumps([request.body.get("input" if request.api == "responses" else "messages"),
                        request.body.get("system"), request.body.get("tools")])
    said = answer.text if isinstance(answer, Text) else "".join(
        c.name + json.dumps(dict(c.arguments)) for c in _calls(answer))
    return max(1, _tokens(asked)), _tokens(said) + 1


def chat_completion(request: BatchRequest, answer: Text | ToolCall | Sequence[ToolCall]) -> dict[str, Any]:
    """A ``chat.completion`` as OpenAI's batch output lines carry it (the shape of the real line in
    tests/test_batch_server.py's `REAL_OPENAI_LINE`)."""
    calls = _calls(answer)
    message: dict[str, Any] = {"role": "assistant", "content": answer.text if isinstance(answer, Text) else None,
                               "refusal": None, "annotations": []}
    if calls:
        message["tool_calls"] = [
            {"id": _call_id(request, c, i, "call_"), "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))}} for i, c in enumerate(calls)]
    prompt_tokens, completion_tokens = _usage(request, answer)
    return {
        "id": "chatcmpl-" + _hex(request.batch_id, request.custom_id, n=29), "object": "chat.completion",
        "created": int(time.time()), "model": request.body.get("model", "gpt-4o-mini"),
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default", "system_fingerprint": "fp_" + _hex("batch-server", n=10),
    }


def response_object(request: BatchRequest, answer: Text | ToolCall | Sequence[ToolCall]) -> dict[str, Any]:
    """A Responses API ``response`` (status ``completed``) as a ``/v1/responses`` batch line carries it."""
    key = (request.batch_id, request.custom_id)
    if isinstance(answer, Text):
        output: list[dict[str, Any]] = [{
            "id": "msg_" + _hex(*key, "msg", n=48), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}]}]
    else:
        output = [{"id": "fc_" + _hex(*key, "fc", i, n=48), "type": "function_call", "status": "completed",
                   "call_id": _call_id(request, c, i, "call_"), "name": c.name,
                   "arguments": json.dumps(dict(c.arguments))} for i, c in enumerate(_calls(answer))]
    input_tokens, output_tokens = _usage(request, answer)
    now = int(time.time())
    body = request.body
    return {
        "id": "resp_" + _hex(*key, n=48), "object": "response", "created_at": now, "completed_at": now,
        "status": "completed", "background": False, "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model", "gpt-4o-mini"), "output": output, "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"), "reasoning": {"effort": None, "summary": None},
        "service_tier": "default", "store": body.get("store", True), "temperature": 1.0,
        "text": {"format": {"type": "text"}}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [], "top_p": 1.0, "truncation": "disabled", "user": None,
        "metadata": body.get("metadata") or {},
        "usage": {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": input_tokens + output_tokens},
    }


def anthropic_message(request: BatchRequest, answer: Text | ToolCall | Sequence[ToolCall]) -> dict[str, Any]:
    """A Messages API ``message`` as a ``succeeded`` batch result carries it (the shape of the real
    line in tests/test_batch_server.py's `REAL_ANTHROPIC_LINE`, ``service_tier: "batch"``)."""
    calls = _calls(answer)
    content = ([{"type": "text", "text": answer.text}] if isinstance(answer, Text) else
               [{"type": "tool_use", "id": _call_id(request, c, i, "toolu_01"), "name": c.name,
                 "input": dict(c.arguments)} for i, c in enumerate(calls)])
    input_tokens, output_tokens = _usage(request, answer)
    return {
        "model": request.body.get("model", "claude-sonnet-4-5-20250929"),
        "id": "msg_01" + _hex(request.batch_id, request.custom_id, n=22), "type": "message", "role": "assistant",
        "content": content, "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                  "output_tokens": output_tokens, "service_tier": "batch", "inference_geo": "not_available"},
    }
