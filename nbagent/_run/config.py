"""`RunConfig`: everything a run needs to know about its agent, frozen when the run starts.

Frozen for real: its containers are immutable copies (`MappingProxyType`, tuples), so changing
the agent (``agent.settings["temperature"] = 0``, ``agent.system = ...``) never reaches a run
that already started; it applies to the runs started after it (`Agent.config` notices).

`Agent` builds one per run (`Agent.config`); the loop (`loop`), the run preparation
(`prepare`) and the tool phase (`plan`, `execute`) read only this, never the `Agent`, so the
loop does not import `agent`. Imports models, tools, output, retry, store, usage, the agent's
tool sources (`sources`) and its guards (`guarding.GuardSet`, the hook the run asks at four points).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..context import CHARS_PER_TOKEN, Compaction
from ..models.base import Model
from ..output import OutputSpec
from ..retry import Retry
from ..store.base import Store
from ..tools import Tool
from ..usage import ModelCallUsage

if TYPE_CHECKING:
    from ..result import RunResult
    from .guardset import GuardSet
    from .sources import SourceSet

__all__ = ["RunConfig"]


@dataclass(frozen=True, slots=True)
class RunConfig:
    """The agent's settings as one run sees them (see `Agent` for each one's meaning)."""

    model: Model
    tools: Mapping[str, Tool]
    """Read-only (`MappingProxyType`)."""
    tool_definitions: Sequence[dict[str, Any]]
    """The tools as the model is told of them (the output tool included), a tuple."""
    request_settings: Mapping[str, Any]
    """The settings sent with each request, read-only."""
    store: Store
    retry: Retry
    system: str | None = None
    max_steps: int = 20
    tools_in_order: bool = False
    token_budget: int | None = None
    cost_budget: float | None = None
    stop_when: Callable[[RunResult], bool] | None = None
    output: OutputSpec | None = None
    output_retries: int = 2
    prices: Mapping[str, Any] | None = None
    state_type: type | None = None
    sources: SourceSet | None = None
    """The agent's tool sources (None: Python tools only). A run starts with
    ``await sources.current(config)``: `tools` and `tool_definitions` with the sources' tools."""
    compaction: Compaction | None = None
    summarizer: Model | None = None
    """The model that writes compaction summaries (the agent's own unless `compaction` names one)."""
    max_result_fraction: float | None = 0.1
    name: str | None = None
    """The agent's name (`Agent(name=...)`), for what reports on the run (tracing)."""
    guards: GuardSet | None = None
    """The agent's guards by stage (None: none), asked before the prompt is written, while the
    first model call runs (parallel ones), before an answer is committed or shown (output, tool
    arguments) and before a tool's result is (`guarding`)."""
    derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """What is worked out from this config once and kept with it (`window.with_reader`'s config):
    an agent's runs share its config while its settings stay the same. A copy
    (``dataclasses.replace``) starts with none."""

    @property
    def context_window(self) -> int | None:
        """The model's context window in tokens (None: unknown)."""
        window = self.model.context_window
        return window if isinstance(window, int) and window > 0 else None  # a subclass's may be anything

    def result_cap(self, tool: Tool, window: int | None) -> int | None:
        """The most characters of `tool`'s result the model reads: its ``max_result_tokens``, else
        `max_result_fraction` of `window` (the model's, as read: `context_window`); None when
        neither is known."""
        tokens = tool.max_result_tokens
        if tokens is None:
            if window is None or not self.max_result_fraction:
                return None
            tokens = int(window * self.max_result_fraction)
        return max(1, int(tokens * CHARS_PER_TOKEN))

    def price(self, row: ModelCallUsage) -> None:
        """Fill the cost columns of a usage row (prices are looked up when the row is made)."""
        if not self.model.priced and not self.prices:
            return
        from ..pricing import price_row

        price_row(row, self.prices)

    def restore_state(self, stored: Any) -> Any:
        """The user's state object from its stored JSON (rebuilt as `state_type` if set)."""
        if stored is None or self.state_type is None:
            return stored
        validate = getattr(self.state_type, "model_validate", None)
        if callable(validate):
            return validate(stored)
        if isinstance(stored, dict):
            return self.state_type(**stored)
        return stored
