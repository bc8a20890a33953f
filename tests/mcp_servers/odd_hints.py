"""A minimal MCP server over stdio, written without the SDK (which would correct what it sends),
whose tools declare ``readOnlyHint`` with values that are not JSON ``true`` (1, "true") beside
one that is: for nbagent's fail-safe reading of annotations. Each call appends the tool's name
to the file named by ``ODD_LOG``. With ``ODD_SILENT_LIST=1`` it never answers ``tools/list``."""

from __future__ import annotations

import json
import os
import sys

TOOLS = [
    {"name": name, "description": f"Declared read-only with {hint!r}.",
     "inputSchema": {"type": "object", "properties": {}}, "annotations": {"readOnlyHint": hint}}
    for name, hint in (("one", 1), ("text_true", "true"), ("real", True))
]


def answer(request: dict) -> dict | None:
    method, params = request.get("method"), request.get("params") or {}
    if "id" not in request:  # a notification
        return None
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "odd-hints", "version": "1"}}
    elif method == "tools/list":
        if os.environ.get("ODD_SILENT_LIST"):  # never answers the listing
            return None
        result = {"tools": TOOLS}
    elif method == "tools/call":
        with open(os.environ["ODD_LOG"], "a", encoding="utf-8") as log:
            log.write(params["name"] + "\n")
        result = {"content": [{"type": "text", "text": f"{params['name']} ran"}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


for line in sys.stdin:
    if line.strip():
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
