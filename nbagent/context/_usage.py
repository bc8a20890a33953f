"""`ContextUsage`: how full the model's context window was for one request, and of what.

Imports messages and the estimator only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message
from ._estimate import MESSAGE_TOKENS, Counter, message_tokens, text_tokens, tools_tokens

__all__ = ["PARTS", "ContextUsage", "last_sent", "parts_json", "request_parts", "scale_parts"]

PARTS = ("system", "tools", "history", "tool_results", "latest")
"""The parts of a request, in the order a request holds them: the system prompt, the tool
definitions, the conversation before the latest user message (a compaction summary included),
every tool result, and the latest user message."""


def request_parts(
    system: str | None, summary: str | None, messages: Sequence[Message],
    tools: Sequence[dict[str, Any]], count: Counter = text_tokens, provider: str = "",
    *, sized: Callable[[Message], int] | None = None, tools_size: int | None = None,
) -> dict[str, int]:
    """The estimated tokens of each part (`PARTS`) of a request made of a system prompt, a
    compaction summary, the messages sent and the tool definitions (for `provider`: its hidden
    tool prompt is counted with the tools). `sized`: a message's tokens (default `message_tokens`
    with `count`; a caller may remember them); `tools_size`: the tools' tokens when known."""
    parts = dict.fromkeys(PARTS, 0)
    if system:
        parts["system"] = count(system) + MESSAGE_TOKENS
    if summary:
        parts["history"] = count(summary) + MESSAGE_TOKENS
    parts["tools"] = tools_tokens(tools, count, provider) if tools_size is None else tools_size
    latest = -1
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].kind == "user":
            latest = i
            break
    for i, message in enumerate(messages):
        size = message_tokens(message, count) if sized is None else sized(message)
        if message.kind == "tool-result":
            parts["tool_results"] += size
        elif message.kind == "system":
            parts["system"] += size
        elif i == latest:
            parts["latest"] += size
        else:
            parts["history"] += size
    return parts


def _five(parts: Mapping[str, int]) -> tuple[int, int, int, int, int]:
    """`parts`' values in `PARTS` order (0 for a part it lacks)."""
    if len(parts) == 5:
        try:  # the usual case: the five parts, as the gauge makes them
            return parts["system"], parts["tools"], parts["history"], parts["tool_results"], parts["latest"]
        except KeyError:
            pass
    get = parts.get
    return get("system", 0), get("tools", 0), get("history", 0), get("tool_results", 0), get("latest", 0)


def scale_parts(parts: Mapping[str, int], total: int) -> dict[str, int]:
    """`parts` scaled so that they add up to `total` (the provider's count), each an int
    (largest remainders get the rounding, ties in `PARTS` order)."""
    # Written out for the five parts, in integers (exact: remainders that tie compare equal, so
    # they go in PARTS order): the gauge scales a request's parts after every model call.
    s, t, h, r, la = _five(parts)
    estimate = sum(parts.values())
    if estimate <= 0:
        return {"system": 0, "tools": 0, "history": 0, "tool_results": 0, "latest": total}
    if estimate == total == s + t + h + r + la:  # the provider counted what nbagent estimated
        return {"system": s, "tools": t, "history": h, "tool_results": r, "latest": la}
    s, t, h, r, la = s * total, t * total, h * total, r * total, la * total
    out = [s // estimate, t // estimate, h // estimate, r // estimate, la // estimate]
    left = total - (out[0] + out[1] + out[2] + out[3] + out[4])
    if left > 0:  # one each for the `left` largest remainders: each with its place below it, ties first in PARTS
        ranked = sorted(((s % estimate) << 3 | 4, (t % estimate) << 3 | 3, (h % estimate) << 3 | 2,
                         (r % estimate) << 3 | 1, (la % estimate) << 3), reverse=True)
        for k in ranked[:left]:
            out[4 - (k & 7)] += 1
    return {"system": out[0], "tools": out[1], "history": out[2], "tool_results": out[3], "latest": out[4]}


def parts_json(
    parts: Mapping[str, int], window: int | None, estimate: int | None = None, key: Sequence[int] | None = None,
) -> str:
    """`parts` (one entry per `PARTS` name) and `window` as compact JSON (`ModelCallUsage.context`),
    with nbagent's own `estimate` of the request and its compaction state `key` when given (the
    next run on the thread, or a resume after a crash, starts its estimates from them and the
    provider's count, as the process that sent it would go on: `last_sent`)."""
    # By hand (what json.dumps with these separators writes): every model call's usage row has it.
    s, t, h, r, la = _five(parts)
    text = (f'{{"system":{int(s)},"tools":{int(t)},"history":{int(h)},"tool_results":{int(r)},"latest":{int(la)},'
            f'"window":{"null" if window is None else str(window) if type(window) is int else json.dumps(window)}')
    if estimate is not None:
        text += f',"estimate":{int(estimate)}'
    if key is not None:
        text += f',"key":[{int(key[0])},{int(key[1])}]' if len(key) == 2 else \
            ',"key":[' + ",".join(str(int(k)) for k in key) + "]"
    return text + "}"


def last_sent(rows: Sequence[Any]) -> tuple[int, int, tuple[int, int] | None] | None:
    """nbagent's estimate, the provider's count and the compaction state of the last request of a
    thread's own calls (usage rows, oldest first), if they were recorded: where the next run's
    estimates start."""
    for row in reversed(rows):
        if getattr(row, "purpose", "run") != "run":
            continue
        sized = row.context_parts if getattr(row, "context", None) else None
        estimate = (sized or {}).get("estimate")
        if isinstance(estimate, int) and estimate > 0 and row.usage_reported and row.input_tokens > 0:
            key = (sized or {}).get("key")
            if isinstance(key, list) and len(key) == 2 and all(isinstance(k, int) for k in key):
                return estimate, row.input_tokens, (key[0], key[1])
            return estimate, row.input_tokens, None
        return None
    return None


def _short(tokens: int) -> str:
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:.3g}M"
    if tokens >= 1_000:
        return f"{tokens / 1_000:.3g}k"
    return str(tokens)


@dataclass(frozen=True, slots=True)
class ContextUsage:
    """How full the model's context window was for one request (`RunResult.context` is the
    last request of a run).

    ```python
    >>> result.context.fraction, str(result.context)
    (0.38, 'context 38 % of 128k')
    >>> result.context.by_part
    {'system': 212, 'tools': 1034, 'history': 30120, 'tool_results': 17080, 'latest': 198}
    ```
    """

    tokens: int
    """The request's input tokens: what the provider reported where it did, else the estimate."""
    window: int | None
    """The model's context window in tokens (``model.context_window``); None when unknown."""
    by_part: Mapping[str, int] = field(default_factory=dict)
    """Tokens of each part of the request (`PARTS`); they add up to `tokens`."""
    estimated: bool = False
    """True when `tokens` is nbagent's estimate (the provider reported no count)."""
    step: int = 0
    """The thread's step of the request."""
    threshold: float | None = None
    """The agent's compaction threshold (``Compaction.at``), when compaction is on."""

    @property
    def fraction(self) -> float | None:
        """`tokens` / `window` (None when the window is unknown)."""
        return None if not self.window else self.tokens / self.window

    @property
    def over_threshold(self) -> bool:
        """Whether the request passed the compaction threshold (the gauge turns amber)."""
        fraction = self.fraction
        return fraction is not None and self.threshold is not None and fraction >= self.threshold

    def __str__(self) -> str:
        approx = "~" if self.estimated else ""
        if not self.window:
            return f"context {approx}{_short(self.tokens)} tokens"
        return f"context {approx}{round(100 * self.tokens / self.window)} % of {_short(self.window)}"

    def describe(self) -> str:
        """`str` of it, then one line per part: what the view's footer shows on hover."""
        lines = [str(self)]
        lines += [f"{name.replace('_', ' ')}: {self.by_part.get(name, 0):,} tokens" for name in PARTS]
        return "\n".join(lines)
