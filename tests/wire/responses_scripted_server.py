"""A scripted OpenAI Responses API server on 127.0.0.1 (standard library only), a reasoning model
with tools, answering by what the conversation holds (where `replay_server` replays recordings):

- the latest input item is a user message that says ``Use the <tool> tool for <City>``, and that
  tool is offered: a reasoning item (a summary, an ``encrypted_content`` of its own) and a call of
  the tool with its first parameter set to the city;
- the latest input item is a function call output: the text ``<output> (from <tool>).``;
- anything else: ``answer to <the latest user text>``.

Streamed (``"stream": true``) the answer comes as OpenAI sends it: ``response.created``, each
item's ``output_item.added``, its deltas (summary text, output text), its ``output_item.done``,
then ``response.completed``. Every request is kept (`requests`), and the reasoning items it
answered with (`reasoning`), so a test can check that each later request carries them back.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.wire.scripted_server import EventStream, LoopbackServer

__all__ = ["ResponsesScriptedServer"]

_ASKED = re.compile(r"Use the (\w+) tool for (\w+)")


class ResponsesScriptedServer(LoopbackServer):
    """The server; `start` (or ``with``) runs it on a daemon thread (see the module docstring)."""

    thread_name = "responses-scripted-server"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.requests: list[dict[str, Any]] = []
        """The JSON body of every POST to ``/v1/responses``, in order."""
        self.reasoning: dict[str, dict[str, Any]] = {}
        """The reasoning items answered, by id."""

    async def _answer(self, method: str, path: str, body: bytes, peer_port: int) -> tuple[int, dict[str, str], Any]:
        if method != "POST" or not path.endswith("/v1/responses"):
            return 404, {}, {"error": {"message": f"no route {method} {path}", "type": "invalid_request_error"}}
        request = json.loads(body or b"{}")
        with self._lock:
            self.requests.append(request)
            n = len(self.requests)
        output = self._output(request, n)
        response = {"id": f"resp_{n}", "object": "response", "created_at": 0, "status": "completed",
                    "model": request.get("model", "scripted"), "output": output, "parallel_tool_calls": True,
                    "tool_choice": "auto", "tools": [], "store": request.get("store", True),
                    "usage": {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 8},
                              "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 12},
                              "total_tokens": 60}}
        if not request.get("stream"):
            return 200, {}, response
        return 200, {}, _events(response)

    def _output(self, request: dict[str, Any], n: int) -> list[dict[str, Any]]:
        items = request.get("input") or []
        last = items[-1] if isinstance(items, list) and items else {}
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            name = next((i.get("name") for i in items if i.get("type") == "function_call"
                         and i.get("call_id") == last.get("call_id")), "?")
            return [_message(f"msg_{n}", f"{last.get('output')} (from {name}).")]
        text = _text(last) if isinstance(last, dict) else str(items)
        asked = _ASKED.search(text)
        tools = {t.get("name"): t for t in request.get("tools") or () if t.get("type") == "function"}
        if asked is None or asked.group(1) not in tools:
            return [_message(f"msg_{n}", f"answer to {text}")]
        tool = tools[asked.group(1)]
        params = list((tool.get("parameters") or {}).get("properties") or {})
        reasoning = {"id": f"rs_{n}", "type": "reasoning", "encrypted_content": f"gAAAAB-scripted-{n}-" + "x" * 40,
                     "summary": [{"type": "summary_text", "text": f"**Calling {tool['name']}**\n\nThe user names it."}]}
        with self._lock:
            self.reasoning[reasoning["id"]] = reasoning
        call = {"id": f"fc_{n}", "type": "function_call", "status": "completed", "call_id": f"call_{n}",
                "name": tool["name"], "arguments": json.dumps({params[0]: asked.group(2)} if params else {})}
        return [reasoning, call]


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _message(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _events(response: dict[str, Any]) -> EventStream:
    """The stream of `response`, event by event, as OpenAI sends it."""
    seq = iter(range(10**6))
    events = EventStream()

    def add(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": next(seq), **fields})

    add("response.created", response={**response, "status": "in_progress", "output": []})
    for index, item in enumerate(response["output"]):
        early = {**item, "status": "in_progress"}
        if item["type"] == "reasoning":
            early.update(summary=[], encrypted_content=item["encrypted_content"][:-4] + "0000")  # differs
        elif item["type"] == "message":
            early["content"] = []
        add("response.output_item.added", output_index=index, item=early)
        for part_index, part in enumerate(item.get("summary") or ()):
            add("response.reasoning_summary_part.added", item_id=item["id"], output_index=index,
                summary_index=part_index, part={"type": "summary_text", "text": ""})
            for word in re.findall(r"\S+\s*", part["text"]):
                add("response.reasoning_summary_text.delta", item_id=item["id"], output_index=index,
                    summary_index=part_index, delta=word)
        for part in item.get("content") or () if item["type"] == "message" else ():
            for word in re.findall(r"\S+\s*", part["text"]):
                add("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                    delta=word, logprobs=[])
        add("response.output_item.done", output_index=index, item=item)
    add("response.completed", response=response)
    return events
