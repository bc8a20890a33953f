"""`Compaction`: the policy that keeps a long conversation inside the model's context window, and
the pure functions that apply stored compaction records to what a request sends.

A compaction never changes the thread: it appends a `CompactionMessage` record, and `visible`
turns the thread into what the model is sent (the summary in place of the messages it replaced,
stubs in place of cleared results). Imports messages only; the run loop (``_run.compact``) makes
the summary call and writes the record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ..exceptions import UserError
from ..messages import AssistantMessage, CompactionMessage, Message, ToolResultMessage, UserMessage

__all__ = ["STUB_MIN_CHARS", "Compaction", "NativeContext", "Visible", "clear_candidates", "cut_point", "is_blocked",
           "transcript", "visible"]

STUB_MIN_CHARS = 300
"""`Compaction.clear_results` leaves results shorter than this as they are (a stub saves nothing)."""

SUMMARY_INSTRUCTIONS = (
    "You compact a conversation between a user and an AI assistant that uses tools, so that the "
    "assistant can go on without the full transcript. Write a summary of at most {words} words: the "
    "user's goals and requests, what the assistant found out (facts, numbers, names, file and column "
    "names, results of tool calls that matter), decisions made, and what is still open. Keep exact "
    "values. Write only the summary."
)


@dataclass(frozen=True, slots=True)
class Compaction:
    """How an agent keeps a long conversation inside the model's context window.

    ```python
    Agent(model, tools=[...], compaction=Compaction(at=0.8, keep_last=6))         # a summary
    Agent(model, compaction=Compaction(summarizer=OpenAIModel("gpt-4o-mini")))     # a cheaper model writes it
    Agent(model, compaction=Compaction.clear_results())                            # no model call
    Agent(OpenAIResponsesModel("gpt-5.4"), compaction=Compaction.native())        # the provider compacts
    Agent(AnthropicModel("claude-sonnet-4-5"), compaction=Compaction.native())    # the API clears old results
    ```

    When the next request would fill more than `at` of the window (``model.context_window``),
    the older messages are replaced *in the request* by one summary, written by `summarizer` (None:
    the agent's own model; it is offered no tools). The last `keep_last` messages, the system prompt
    and the latest user message are always sent whole, and a tool call is never separated from its
    result. A provider's context-overflow refusal triggers one compaction and a retry. The thread
    keeps every message; the compaction is a stored record (`CompactionMessage`) with its own usage
    row (``purpose="compaction"``).

    Attributes:
        at: the fraction of the window that triggers a compaction (0 < at <= 1).
        keep_last: messages at the end of the conversation never compacted.
        summarizer: the model that writes the summary (a `Model` or a model string); None: the agent's.
        policy: ``"summary"``, ``"clear_results"`` (old tool results become one-line stubs) or
            ``"native"`` (the model's provider manages the context: see `native`).
        summary_words: the summary's length the summarizer is asked for.
    """

    at: float = 0.8
    keep_last: int = 6
    summarizer: Any = None
    policy: Literal["summary", "clear_results", "native"] = "summary"
    summary_words: int = 300

    def __post_init__(self) -> None:
        if isinstance(self.at, bool) or not isinstance(self.at, (int, float)) or not 0 < self.at <= 1:
            raise UserError(f"Compaction(at=...) must be a fraction of the window in (0, 1], not {self.at!r}")
        for name in ("keep_last", "summary_words"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "keep_last" else 1):
                raise UserError(f"Compaction({name}=...) must be a whole number >= 0, not {value!r}")
        if self.policy not in ("summary", "clear_results", "native"):
            raise UserError(f"Compaction(policy=...) is 'summary', 'clear_results' or 'native', not {self.policy!r}")

    def native_request(self, window: int | None) -> NativeContext | None:
        """What a request asks the provider to do with its context (None: not `native`)."""
        if self.policy != "native":
            return None
        return NativeContext(None if window is None else int(self.at * window), max(1, self.keep_last // 2))

    @classmethod
    def clear_results(cls, at: float = 0.8, keep_last: int = 6) -> Compaction:
        """Old tool results become stubs (``[result of get_rows cleared: 48,213 characters ...]``),
        with no model call; the model can read one again with ``read_result``."""
        return cls(at=at, keep_last=keep_last, policy="clear_results")

    @classmethod
    def native(cls, at: float = 0.8, keep_last: int = 6) -> Compaction:
        """The model's provider manages the context, where it can (`Agent` refuses a model that
        cannot):

        - `OpenAIResponsesModel` (a ``compact`` method) sends the older messages to OpenAI's
          ``/v1/responses/compact`` past `at` of the window and keeps the items it returns (the
          user's messages and an encrypted compaction item) in the record; later requests send
          those items, as they came, in place of the messages they stand for.
        - `AnthropicModel` (``native_context``): each request asks the API to clear old tool
          results once it passes `at` of the window, keeping the last ``max(1, keep_last // 2)``
          tool uses (``context_management``). When the API still refuses a request as too long,
          nbagent writes a summary as `Compaction` does."""
        return cls(at=at, keep_last=keep_last, policy="native")


@dataclass(frozen=True, slots=True)
class NativeContext:
    """Provider-side context management a request asks for (`Compaction.native`): clear old tool
    results once the request passes `trigger_tokens`, keeping the last `keep_tool_uses`. Sent by
    models whose ``native_context`` is True (`AnthropicModel`); others ignore it."""

    trigger_tokens: int | None
    """Input tokens past which the provider clears (None: the provider's default)."""
    keep_tool_uses: int
    """The most recent tool uses kept whole."""


class Visible(NamedTuple):
    """What a request sends of a thread (see `visible`)."""

    summary: str | None
    """The summary that stands for the replaced messages (sent after the system prompt)."""
    messages: list[Message]
    """The messages sent, compaction records left out and cleared results as stubs."""
    upto: int
    """Thread messages before this index are replaced by `summary`."""


def stub(result: ToolResultMessage) -> ToolResultMessage:
    """A cleared result as the model sees it: one line, the whole text kept for ``read_result``."""
    whole = result.whole_text
    text = (f"[result of {result.name} cleared to save context: {len(whole):,} characters; "
            f"read_result(call_id=\"{result.call_id}\", offset=0, limit=...) reads it again]")
    return dataclasses.replace(result, content=text, images=[], full_content=whole)


def is_blocked(message: Message) -> bool:
    """Whether a guard refused `message` (`UserMessage.blocked`, `AssistantMessage.blocked`): it
    stays in the thread and is never sent to a model."""
    return getattr(message, "blocked", None) is not None


def visible(messages: Sequence[Message], blocked: bool = True) -> Visible:
    """What the model is sent of `messages`: after the newest summary record, its summary and the
    messages from its `upto` on (the last user message before `upto` first when the cut fell
    inside a turn, so the request starts with the user's message, whole); every result cleared
    by a record as a stub; records and blocked messages (`is_blocked`) never. Without records:
    the messages as they are. `blocked`: False when the caller knows `messages` hold no blocked
    message (the run's `Window` keeps count), which saves looking at each."""
    last: CompactionMessage | None = None
    cleared: set[str] = set()
    for m in messages:
        if isinstance(m, CompactionMessage):
            if m.policy in ("summary", "native"):
                last = m
            cleared.update(m.cleared)
    if last is None and not cleared:
        if blocked:
            return Visible(None, [m for m in messages if not is_blocked(m)], 0)
        return Visible(None, messages if isinstance(messages, list) else list(messages), 0)
    upto = last.upto if last is not None else 0
    out: list[Message] = []
    if last is not None and last.policy == "native":  # the provider's items, sent back as they came
        out.append(AssistantMessage(thinking_blocks=[dict(i) for i in last.items]))
    elif last is not None and upto < len(messages) and messages[upto].kind != "user":
        anchor = next((m for m in reversed(messages[:upto]) if m.kind == "user" and not is_blocked(m)), None)
        if anchor is not None:
            out.append(anchor)
    for m in messages[upto:]:
        if m.kind == "compaction" or (blocked and is_blocked(m)):
            continue
        out.append(stub(m) if isinstance(m, ToolResultMessage) and m.call_id in cleared else m)
    summary = last.content if last is not None and last.policy == "summary" else None
    return Visible(summary, out, upto)


def cut_point(messages: Sequence[Message], keep_last: int, start: int) -> int | None:
    """Where a new summary's replaced messages end: the latest user or assistant message that
    leaves `keep_last` messages after it and comes after `start` (the current summary's end);
    never a tool result, so no call is separated from its result. None: nothing to replace."""
    for i in range(len(messages) - keep_last, start, -1):
        if 0 <= i < len(messages) and messages[i].kind in ("user", "assistant"):
            return i
    return None


def clear_candidates(messages: Sequence[Message], keep_last: int) -> list[str]:
    """The call ids `Compaction.clear_results` clears: results before the last `keep_last`
    messages, not cleared yet, of at least `STUB_MIN_CHARS` characters."""
    cleared = {c for m in messages if isinstance(m, CompactionMessage) for c in m.cleared}
    end = len(messages) - keep_last
    return [m.call_id for m in messages[:max(end, 0)]
            if isinstance(m, ToolResultMessage) and m.call_id not in cleared and len(m.content) >= STUB_MIN_CHARS]


def _line(message: Message, width: int) -> str | None:
    if isinstance(message, UserMessage):
        text = f"User: {message.content}"
    elif isinstance(message, AssistantMessage):
        calls = "; ".join(f"{c.name}({c.args_json})" for c in message.tool_calls)
        text = "Assistant: " + (message.text or "") + (f" [called {calls}]" if calls else "")
    elif isinstance(message, ToolResultMessage):
        text = f"Result of {message.name}: {message.model_text()}"
    else:
        return None
    return _cut_middle(text, width)


def transcript(summary: str | None, messages: Sequence[Message], limit: int) -> str:
    """The text a summarizer reads: the previous summary, then one entry per message, each cut to
    an equal share of `limit` characters so the whole fits."""
    lines = [f"Summary of the conversation before this part:\n{_cut_middle(summary, limit // 3)}"] if summary else []
    shown = [m for m in messages if m.kind in ("user", "assistant", "tool-result") and not is_blocked(m)]
    room = max(0, limit - sum(len(x) for x in lines))
    width = room // max(1, len(shown))
    if width < 200:  # too many messages for their share: the latest ones, 200 characters each
        keep = max(1, room // 200)
        lines.append(f"[{len(shown) - keep:,} earlier messages left out]")
        shown, width = shown[-keep:], 200
    lines += [line for m in shown if (line := _line(m, width)) is not None]
    return "\n\n".join(lines)


def _cut_middle(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    half = max(1, width // 2)
    return f"{text[:half]} […{len(text) - 2 * half:,} characters…] {text[-half:]}"


def summary_instructions(words: int) -> str:
    """The summarizer's system prompt."""
    return SUMMARY_INSTRUCTIONS.format(words=words)
