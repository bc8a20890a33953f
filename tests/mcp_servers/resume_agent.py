"""One step of a conversation with an MCP tool, in a process of its own (tests/test_mcp_resume.py).

    python resume_agent.py STORE THREAD run        # the model asks for two destructive calls: paused
    python resume_agent.py STORE THREAD approve    # approve both; they run one after the other
    python resume_agent.py STORE THREAD continue   # resume after a crash

Prints the run's status and its tool results as JSON. The server's log (KITCHEN_LOG) counts the
calls that really ran.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from nbagent import Agent
from nbagent.mcp import MCPTools
from nbagent.models import FunctionModel, tool_call

SERVER = Path(__file__).with_name("kitchen.py")


def answer(messages: list[Any], request: Any) -> Any:
    if messages[-1].kind == "user":
        return [tool_call("write_note", text="once"), tool_call("slow_write", text="late", seconds=20)]
    return "done: " + " | ".join(m.content for m in messages if m.kind == "tool-result")


def main() -> None:
    store, thread, step = sys.argv[1:4]
    env = {k: os.environ[k] for k in ("KITCHEN_LOG", "KITCHEN_PIDS")}
    kitchen = MCPTools.stdio(sys.executable, [str(SERVER)], env=env)
    agent = Agent(FunctionModel(answer), tools=[kitchen], store=store, tools_in_order=True)
    if step == "run":
        result = agent.run_sync("write the notes", thread=thread)
    elif step == "approve":
        pending = agent.pending_sync(thread)
        result = agent.resume_sync(thread=thread, approve=[p.id for p in pending])
    else:
        result = agent.resume_sync(thread=thread)
    tool_results = [(m.name, m.status, m.content) for m in result.messages if m.kind == "tool-result"]
    print(json.dumps({"status": result.status, "results": tool_results, "output": result.output}), flush=True)


if __name__ == "__main__":
    main()
