"""MCP servers as tool sources: the tools of a Model Context Protocol server, for an `Agent`.

```python
from nbagent import Agent
from nbagent.mcp import MCPTools

files = MCPTools.stdio("python", ["-m", "my_server"], env={"TOKEN": "..."}, prefix="fs")
tracker = MCPTools.http("http://127.0.0.1:8000/mcp", headers={"Authorization": "Bearer ..."})
agent = Agent(model, tools=[get_weather, files, tracker])
```

Built on the official ``mcp`` SDK (``pip install "nbagent[mcp]"``), imported when a server is
first reached: ``import nbagent.mcp`` stays light. An `MCPTools` is an `nbagent.ToolSource`: its
tools are listed when a run first needs them, listed again when the server says they changed,
and run through the same approvals, ledger and view as Python tools.

Approvals: with no ``requires_approval=``, a tool needs approval unless the server marks it
read-only (``readOnlyHint``) and not destructive (``destructiveHint``). See docs/mcp.md.
"""

from __future__ import annotations

from ._adapt import ApprovalSetting
from ._tools import MCPTools

__all__ = ["ApprovalSetting", "MCPTools"]
