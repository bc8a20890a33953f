"""Token usage: one `ModelCallUsage` row per model call, summed by `Usage`.

Owns plain data only; imports nothing from nbagent. Column names follow the vocabulary shared by
the README, notebooks and DataFrames (`input_tokens` includes cached input, as the API reports
`prompt_tokens`; `cache_read_tokens` is the cached part of it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["ModelCallUsage", "TokenCounts", "Usage", "usd"]


def usd(value: float | None) -> str:
    """A cost as people read it, the same everywhere nbagent shows one: ``$0``, ``$0.000200``
    (three significant digits below a dollar), ``$1.24``, ``$1,234.50``; ``n/a`` when the price
    is unknown (None or NaN)."""
    if value is None or value != value:
        return "n/a"
    if value == 0:
        return "$0"
    size = abs(value)
    if size >= 1:
        return f"${value:,.2f}"
    digits = 3
    while size < 0.1 and digits < 12:  # one more decimal for each leading zero
        size *= 10
        digits += 1
    return f"${value:.{digits}f}"


@dataclass(slots=True)
class TokenCounts:
    """Token counts a provider reported for one model call."""

    input_tokens: int = 0
    """All prompt tokens, the cached ones included."""
    cache_read_tokens: int = 0
    """The part of `input_tokens` served from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the cache (providers that bill for it)."""
    output_tokens: int = 0
    """Completion tokens, reasoning tokens included."""
    reasoning_tokens: int = 0
    """The part of `output_tokens` spent on hidden reasoning."""
    reported: bool = True
    """False when the provider sent no usage at all (e.g. Ollama streams): counts are then 0."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class ModelCallUsage:
    """One model call: what it cost in tokens, time and money. Persisted with the messages.

    A sub-agent's calls (`Agent.as_tool`) are rows of its own thread, with `agent`, `depth`
    and `parent_call_id` saying where in the tree of agents they were made; the top run's
    `RunResult.usage` holds the rows of the whole tree.

    `purpose` tells what the call was for, so cost frames can tell the kinds apart: ``"run"``
    (the default) for an agent's own model calls, ``"compaction"`` for a context-compaction
    summary, ``"eval"`` for an evaluator's judge call, ``"guard"`` for an LLM judge a guard asked
    (`nbagent.guards`); other strings are allowed.
    """

    run_id: str
    thread: str | None
    step: int
    time: float
    """Start of the call, seconds since the epoch (UTC)."""
    provider: str
    model: str
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str | None = None
    tool_calls: int = 0
    """How many tool calls the answer asked for."""
    cost_input: float | None = None
    """USD; None where the price is unknown."""
    cost_output: float | None = None
    cost_total: float | None = None
    currency: str = "USD"
    usage_reported: bool = True
    """False when the provider reported no usage: counts are 0, not measured; or, for a call a
    parallel input guard cancelled (``finish_reason="cancelled"``), nbagent's estimate of what the
    call had spent (the provider reports usage at the end of a stream)."""
    purpose: str = "run"
    """What the call was for: ``"run"`` (an agent's own step), ``"compaction"`` (a context
    summary), ``"eval"`` (a judge call), ``"guard"`` (a guard's LLM judge), or another string;
    rows stored without it read as ``"run"``."""
    context: str | None = None
    """The request's size by part, as compact JSON: the tokens of each part (``system``,
    ``tools``, ``history``, ``tool_results``, ``latest``; they add up to `input_tokens`) and the
    model's ``window`` (null when unknown). None for a call nbagent did not size (rows stored
    before it did). `context_parts` reads it; ``nbagent.context_frame`` spreads it into columns."""
    replayed: bool = False
    """True for a call answered from a recording (`nbagent.models.replay`): its cost columns are
    0 (nothing was spent), and `recorded_cost` holds what the recorded call cost."""
    recorded_cost: float | None = None
    """For a replayed call: the recorded call's price (USD; None when unknown or not replayed)."""
    agent: str | None = None
    """The name of the agent that made the call (`Agent(name=...)`; None for an agent with
    none, and in rows stored before sub-agents)."""
    depth: int = 0
    """How deep in a tree of agents the call was made: 0 for the agent that was run, 1 for its
    sub-agent (`Agent.as_tool`), 2 for that one's, ..."""
    parent_call_id: str | None = None
    """For a sub-agent's call: the id of the tool call of its parent agent that ran it (a call
    of the parent's thread; the row's `thread` is the sub-agent's own). None at depth 0."""
    batch: bool = False
    """True for a call answered through a provider's batch API (``agent.map(..., batch_api=True)``,
    docs/batch_api.md): its cost columns are at the batch price (`nbagent.pricing.price_row`)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def context_parts(self) -> dict[str, int | None] | None:
        """`context` read: part name -> tokens, plus ``window``; None when not recorded (or
        unreadable)."""
        if not self.context:
            return None
        try:
            value = json.loads(self.context)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def to_dict(self) -> dict[str, Any]:
        """The row as a plain dict, one key per field (`purpose` included)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelCallUsage:
        """A row from `to_dict`'s dict; unknown keys are ignored, missing ones take their
        defaults (a dict written before `purpose` existed reads as ``"run"``)."""
        return cls(**{k: v for k, v in data.items() if k in _ROW_FIELDS})


_ROW_FIELDS = frozenset(f.name for f in fields(ModelCallUsage))


@dataclass(slots=True)
class Usage:
    """Usage of a run (or of a thread): sums over its model calls, and the calls themselves."""

    requests: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    tool_calls: int = 0
    """Tool calls the model asked for."""
    cost_total: float | None = None
    """USD over the calls with a known price; None when no call had one."""
    calls: list[ModelCallUsage] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, row: ModelCallUsage) -> None:
        """Add one model call."""
        # Written out (not a loop over the names with getattr/setattr): every model call adds one.
        self.calls.append(row)
        self.requests += 1
        self.input_tokens += row.input_tokens
        self.cache_read_tokens += row.cache_read_tokens
        self.cache_write_tokens += row.cache_write_tokens
        self.output_tokens += row.output_tokens
        self.reasoning_tokens += row.reasoning_tokens
        self.tool_calls += row.tool_calls
        if row.cost_total is not None:
            self.cost_total = (self.cost_total or 0.0) + row.cost_total

    def snapshot(self) -> Usage:
        """A copy of the sums as they are now, with its own list of calls (what a `UsageEvent`
        carries: the total at that moment, not the live sums)."""
        return Usage(requests=self.requests, input_tokens=self.input_tokens,
                     cache_read_tokens=self.cache_read_tokens, cache_write_tokens=self.cache_write_tokens,
                     output_tokens=self.output_tokens, reasoning_tokens=self.reasoning_tokens,
                     tool_calls=self.tool_calls, cost_total=self.cost_total, calls=list(self.calls))

    @classmethod
    def of(cls, rows: list[ModelCallUsage]) -> Usage:
        """Sum a list of rows."""
        usage = cls()
        for row in rows:
            usage.add(row)
        return usage

    def rows(self) -> list[dict[str, Any]]:
        """One plain dict per model call, for pandas or CSV (see `nbagent.usage_frame`)."""
        return [row.to_dict() for row in self.calls]

    def __repr__(self) -> str:
        cost = "unknown" if self.cost_total is None else usd(self.cost_total)
        return (
            f"Usage(requests={self.requests}, input_tokens={self.input_tokens}, "
            f"cache_read_tokens={self.cache_read_tokens}, output_tokens={self.output_tokens}, "
            f"reasoning_tokens={self.reasoning_tokens}, tool_calls={self.tool_calls}, cost_total={cost})"
        )
