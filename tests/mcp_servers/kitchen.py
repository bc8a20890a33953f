"""A real MCP server for nbagent's tests, written with the SDK's server class (``MCPServer``).

    python tests/mcp_servers/kitchen.py                 # stdio
    python tests/mcp_servers/kitchen.py --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp

Its tools cover what nbagent must get right: read-only and destructive tools (annotations), text
and structured results, an error, an image, a slow tool, a tool that kills the server, a tool
that adds a tool (tools/list_changed), the environment it was given, untrusted text. Destructive
calls append a line to the file named by ``KITCHEN_LOG`` (when set), so a test can count how
many times a call really ran, across processes; ``KITCHEN_PIDS`` names a file it adds its process
id to when it starts.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(destructive_hint=True)
PAYLOAD = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>"
# A 2x2 red PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000020000000208020000009c4e9f540000001249444154789c63f8cfc0f09f"
    "8181e1ff7f00001ffb04fd46e0e0240000000049454e44ae426082"
)

server = MCPServer("kitchen", instructions="nbagent's test server")


@server.tool(annotations=READ_ONLY, structured_output=True)
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool(annotations=READ_ONLY, structured_output=False)
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool(annotations=DESTRUCTIVE, structured_output=False)
def write_note(text: str) -> str:
    """Write a note (destructive: it is logged, and counted by the tests)."""
    log = os.environ.get("KITCHEN_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    return f"wrote {text!r}"


@server.tool(structured_output=False)
async def slow_write(text: str, seconds: float) -> str:
    """Write a note after a while (no annotations: needs approval)."""
    await asyncio.sleep(seconds)
    return write_note(text)


@server.tool(annotations=READ_ONLY, structured_output=False)
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(message)


@server.tool(annotations=READ_ONLY)
def picture() -> Image:
    """A small red picture."""
    return Image(data=PNG, format="png")


@server.tool(annotations=READ_ONLY, structured_output=False)
async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return f"waited {seconds} s"


@server.tool(annotations=READ_ONLY, structured_output=False)
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool(annotations=READ_ONLY, structured_output=False)
def die() -> str:
    """Ends the server process at once."""
    os._exit(3)


@server.tool(annotations=READ_ONLY, structured_output=False)
def env_names() -> str:
    """The names of the server's environment variables."""
    return " ".join(sorted(os.environ))


@server.tool(annotations=READ_ONLY, structured_output=False)
def env_value(name: str) -> str:
    """One environment variable's value (to check that nbagent hides secrets)."""
    return f"{name}={os.environ.get(name, '')}"


@server.tool(annotations=READ_ONLY, structured_output=False)
def authorization(ctx: Context) -> str:
    """The Authorization header of the HTTP request that called this tool ("" over stdio)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return headers.get("authorization", "") if headers is not None else ""


@server.tool(annotations=READ_ONLY, structured_output=False)
def request_url(ctx: Context) -> str:
    """The path and query of the HTTP request that called this tool, as a server's debug output
    would show it ("" over stdio)."""
    request = ctx.request_context.request
    url = getattr(request, "url", None)
    return f'{{"path": "{url.path}?{url.query}"}}' if url is not None else ""


@server.tool(description=f"Untrusted description {PAYLOAD}", annotations=READ_ONLY, structured_output=False)
def untrusted() -> str:
    """Returns HTML that must stay text."""
    return f"result {PAYLOAD} **not bold?**"


@server.tool(annotations=READ_ONLY, structured_output=False)
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called `name` and announces that the list changed."""

    def extra(x: int) -> str:
        """A tool that appeared later."""
        return f"{name} {x}"

    server.add_tool(extra, name=name, annotations=READ_ONLY, structured_output=False)
    await ctx.notify_tools_changed()  # 2026-07-28 clients: subscriptions/listen
    await ctx.request_context.session.send_tool_list_changed()  # earlier clients: a notification
    return "grown"


if __name__ == "__main__":
    if os.environ.get("KITCHEN_PIDS"):  # so that a test can stop a server whose client was killed
        with open(os.environ["KITCHEN_PIDS"], "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import anyio

        anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=int(sys.argv[2])))
    else:
        server.run()
