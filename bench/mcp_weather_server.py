"""The MCP server of bench/bench_mcp.py: one read-only tool, written with the SDK's ``MCPServer``.

    python bench/mcp_weather_server.py     # stdio
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("weather")


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"Sunny, 22 °C in {city}"


if __name__ == "__main__":
    server.run()
