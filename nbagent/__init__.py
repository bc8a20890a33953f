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
`import nbagent` imports neither openai, ipywidgets nor pandas (they load at the edge, when used),
nor a store backend, a provider SDK or asyncio (they load with the first run or store).
"""

from __future__ import annotations

from typing import Any

# Agent and runs (RunHandle: below, with the run's machinery, loaded on first use)
from .agent import Agent

# Approvals
from .approvals import Decision, Decisions, PendingCall

# Context window
from .context import Compaction, ContextUsage

# Events
from .events import (
    ApprovalRequestedEvent,
    ClientCallRequestedEvent,
    CompactionEvent,
    Event,
    GuardTrippedEvent,
    ModelFallbackEvent,
    ModelResponseEvent,
    ModelRetryEvent,
    ReasoningDeltaEvent,
    RunEndedEvent,
    RunStartedEvent,
    TextDeltaEvent,
    TextHeldEvent,
    ToolCallFinishedEvent,
    ToolCallStartedEvent,
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
    SubAgentError,
    ToolDefinitionError,
    ToolSourceError,
    UnknownCallError,
    UserError,
)

# Messages
from .messages import (
    AssistantMessage,
    CompactionMessage,
    Image,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from .result import RunResult
from .retry import Retry

# Stored threads (also agent.threads_api)
from .threads import Threads

# Tools
from .tools import RunContext, Tool, ToolSource, tool

# Usage
from .usage import ModelCallUsage, Usage

__version__ = "0.2.0.dev0"

_EDGE = ("context_frame", "output_frame", "runs_frame", "tool_calls_frame", "usage_frame")
"""The pandas edge's frames, loaded on first use (``import nbagent`` stays light)."""

__all__ = [
    "Agent",
    "ApprovalRequestedEvent",
    "ArgumentsMismatchError",
    "AssistantMessage",
    "ClientCallRequestedEvent",
    "Compaction",
    "CompactionEvent",
    "CompactionMessage",
    "ConflictError",
    "ContextUsage",
    "Decision",
    "Decisions",
    "Event",
    "GuardTrippedEvent",
    "Image",
    "InvalidArgumentsError",
    "InvalidPromptError",
    "Message",
    "ModelCallUsage",
    "ModelError",
    "ModelFallbackEvent",
    "ModelResponseEvent",
    "ModelRetry",
    "ModelRetryEvent",
    "NbagentError",
    "NotResumableError",
    "PendingCall",
    "PendingCallsError",
    "ReasoningDeltaEvent",
    "Retry",
    "RunContext",
    "RunEndedEvent",
    "RunHandle",
    "RunResult",
    "RunStartedEvent",
    "SubAgentError",
    "SystemMessage",
    "TextDeltaEvent",
    "TextHeldEvent",
    "Threads",
    "Tool",
    "ToolCall",
    "ToolCallFinishedEvent",
    "ToolCallStartedEvent",
    "ToolDefinitionError",
    "ToolResultMessage",
    "ToolSource",
    "ToolSourceError",
    "UnknownCallError",
    "Usage",
    "UsageEvent",
    "UserError",
    "UserMessage",
    "__version__",
    "compare",
    "context_frame",
    "output_frame",
    "runs_frame",
    "tool",
    "tool_calls_frame",
    "usage_frame",
]


def __getattr__(name: str) -> Any:
    if name == "RunHandle":  # its module loads asyncio: on first use, like the run itself
        from ._run.handle import RunHandle

        return RunHandle
    if name in _EDGE:
        from . import dataframe

        return getattr(dataframe, name)
    if name == "compare":  # the evals edge (pandas), loaded on first use
        from .evals import compare

        return compare
    raise AttributeError(f"module 'nbagent' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nbagent``: register the ``%%agent`` and ``%agent`` magics (see
    `nbagent.notebook`; IPython is loaded only now)."""
    from .notebook import load_ipython_extension as register

    register(ipython)
