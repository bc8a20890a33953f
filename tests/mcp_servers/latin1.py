"""A minimal MCP server over stdio whose log lines go to stdout in Latin-1, as a server written
for a non-UTF-8 locale does: for nbagent's handling of bytes that are not UTF-8 on the channel
its messages come by. Written without the SDK, whose server moves stray stdout writes to stderr.

Tools: ``pid`` (the process id), ``echo``, ``slow`` (answers after ``seconds``) and ``log``
(writes ``log: <text>`` to stdout in Latin-1, then answers). Each call runs on a thread of its
own, so a slow call is still waiting when another one logs. With ``LATIN1_BANNER`` set, it
writes that text in Latin-1 to stdout when it starts, before any answer.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

TOOLS = [
    {"name": name, "description": description, "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": properties}}
    for name, description, properties in (
        ("pid", "The server's process id.", {}),
        ("echo", "Say the text back.", {"text": {"type": "string"}}),
        ("slow", "Wait, then answer.", {"seconds": {"type": "number"}}),
        ("log", "Log the text (in Latin-1, on stdout), then answer.", {"text": {"type": "string"}}),
    )
]
_write = threading.Lock()


def send(data: bytes) -> None:
    with _write:  # one line at a time: a log line never lands inside a message
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def reply(request_id: object, result: dict) -> None:
    send((json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n").encode())


def call(request_id: object, name: str, args: dict) -> None:
    if name == "pid":
        text = str(os.getpid())
    elif name == "echo":
        text = args.get("text", "")
    elif name == "slow":
        time.sleep(float(args.get("seconds", 1)))
        text = "slept"
    else:
        send(f"log: {args.get('text', '')}\n".encode("latin-1"))
        text = "logged"
    reply(request_id, {"content": [{"type": "text", "text": text}], "isError": False})


def main() -> None:
    if os.environ.get("LATIN1_BANNER"):
        send(f"{os.environ['LATIN1_BANNER']}\n".encode("latin-1"))
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        method, params = request.get("method"), request.get("params") or {}
        if "id" not in request:  # a notification
            continue
        if method == "initialize":
            reply(request["id"], {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                                  "capabilities": {"tools": {}}, "serverInfo": {"name": "latin1", "version": "1"}})
        elif method == "tools/list":
            reply(request["id"], {"tools": TOOLS})
        elif method == "tools/call":
            threading.Thread(target=call, args=(request["id"], params["name"], params.get("arguments") or {}),
                             daemon=True).start()
        else:
            reply(request["id"], {})


if __name__ == "__main__":
    main()
