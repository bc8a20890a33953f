"""nbagent: Jupyter-first LLM agents with tools.

```python
from nbagent import Agent, tool
from nbagent.models import TestModel

@tool
def get_weather(city: str) -> str:
    \"\"\"Current weather for a city.\"\"\"
    return f"Sunny in {city}"

result = Agent(TestModel(), tools=[get_weather]).run_sync("Weather in Paris?")
```
`import nbagent` imports neither openai, ipywidgets nor pandas: they load at the edge, when used.
"""

from __future__ import annotations

from typing import Any

# Agent and runs
from .agent import Agent, RunHandle

# Events
from .events import (
    ApprovalRequested,
    ClientCallRequested,
    Event,
    ModelResponseEvent,
    ModelRetryEvent,
    PendingCall,
    ReasoningDelta,
    RunEnded,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    UsageEvent,
)

# Errors
from .exceptions import (
    ArgumentsMismatchError,
    ConflictError,
    InvalidArgumentsError,
    InvalidPromptError,
    ModelError,
    ModelRetry,
    NbagentError,
    NotResumableError,
    PendingCallsError,
    ToolDefinitionError,
    UnknownCallError,
    UserError,
)

# Messages
from .messages import (
    AssistantMessage,
    Image,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from .result import RunResult
from .retry import Retry

# Tools
from .tools import RunContext, Tool, tool

# Usage
from .usage import ModelCallUsage, Usage

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "ApprovalRequested",
    "ArgumentsMismatchError",
    "AssistantMessage",
    "ClientCallRequested",
    "ConflictError",
    "Event",
    "Image",
    "InvalidArgumentsError",
    "InvalidPromptError",
    "Message",
    "ModelCallUsage",
    "ModelError",
    "ModelResponseEvent",
    "ModelRetry",
    "ModelRetryEvent",
    "NbagentError",
    "NotResumableError",
    "PendingCall",
    "PendingCallsError",
    "ReasoningDelta",
    "Retry",
    "RunContext",
    "RunEnded",
    "RunHandle",
    "RunResult",
    "RunStarted",
    "SystemMessage",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolDefinitionError",
    "ToolResultMessage",
    "UnknownCallError",
    "Usage",
    "UsageEvent",
    "UserError",
    "UserMessage",
    "__version__",
    "tool",
]


def __getattr__(name: str) -> Any:
    # The pandas edge loads only when asked for.
    if name in ("usage_frame", "tool_calls_frame", "runs_frame", "batch", "abatch", "output_frame"):
        from . import dataframe

        return getattr(dataframe, name)
    raise AttributeError(f"module 'nbagent' has no attribute {name!r}")
