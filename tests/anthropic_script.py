"""Scripted Anthropic Messages API answers for the replay server (`ReplayServer.add_case`).

A scripted answer is a whole ``message`` object (often a recorded one, or one built from recorded
blocks), served either as JSON or as the event stream the API would send for it
(`stream_case`): ``message_start``, each block's ``content_block_start`` / deltas (text,
thinking, signature, tool input in pieces) / ``content_block_stop``, a ``ping``, then
``message_delta`` with the stop reason, stop details and usage, and ``message_stop``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

SOURCE = {"source": "scripted by the nbagent tests", "source_commit": "-", "interaction_index": 0,
          "license": "MIT", "provider": "anthropic"}


def message(content: list[dict[str, Any]], stop_reason: str, *, usage: dict[str, Any] | None = None,
            model: str = "claude-sonnet-4-5", stop_details: dict[str, Any] | None = None,
            id: str = "msg_scripted") -> dict[str, Any]:
    """A Messages API ``message`` object."""
    msg = {"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
           "stop_reason": stop_reason, "stop_sequence": None,
           "usage": usage or {"input_tokens": 10, "output_tokens": 5}}
    if stop_details is not None:
        msg["stop_details"] = stop_details
    return msg


def json_case(msg: dict[str, Any]) -> dict[str, Any]:
    """A case answering with `msg` as one JSON body."""
    return {**SOURCE, "name": "scripted", "request": {"method": "POST", "path": "/v1/messages", "body": {}},
            "response": {"status": 200, "headers": {"content-type": "application/json",
                                                    "request-id": "req_scripted"}, "body": msg}}


def _pieces(text: str, n: int = 3) -> list[str]:
    step = max(1, -(-len(text) // n))
    return [text[i:i + step] for i in range(0, len(text), step)] or [""]


def _event(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def sse(msg: dict[str, Any]) -> str:
    """The event stream the Messages API sends for `msg`."""
    usage = dict(msg["usage"])
    start = {**{k: v for k, v in msg.items() if k not in ("content", "stop_details")}, "content": [],
             "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    out = [_event("message_start", {"message": start})]
    for index, block in enumerate(msg["content"]):
        block = copy.deepcopy(block)
        kind = block["type"]
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            deltas = [{"type": "text_delta", "text": t} for t in _pieces(block["text"])]
            block["text"] = ""
        elif kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": t} for t in _pieces(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
            block["thinking"], block["signature"] = "", ""
        elif kind in ("tool_use", "server_tool_use"):
            deltas = [{"type": "input_json_delta", "partial_json": t} for t in _pieces(json.dumps(block["input"]))]
            block["input"] = {}
        out.append(_event("content_block_start", {"index": index, "content_block": block}))
        if index == 0:
            out.append(_event("ping", {}))
        out.extend(_event("content_block_delta", {"index": index, "delta": d}) for d in deltas)
        out.append(_event("content_block_stop", {"index": index}))
    delta = {"stop_reason": msg["stop_reason"], "stop_sequence": None}
    if msg.get("stop_details") is not None:
        delta["stop_details"] = msg["stop_details"]
    out.append(_event("message_delta", {"delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}))
    out.append(_event("message_stop", {}))
    return "".join(out)


def stream_case(msg: dict[str, Any]) -> dict[str, Any]:
    """A case answering with `msg` as an event stream."""
    return {**SOURCE, "name": "scripted",
            "request": {"method": "POST", "path": "/v1/messages", "body": {"stream": True}},
            "response": {"status": 200, "headers": {"content-type": "text/event-stream",
                                                    "request-id": "req_scripted"}, "sse": sse(msg)}}
