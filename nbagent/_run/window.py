"""The run's view of the model's context window: what each request sends (compaction records
applied), how big the next one will be, the gauge after each call (`ContextUsage`), compaction,
and the built-in ``read_result`` tool.

Owns `Window` (one per run) and `read_result_tool`. Imports the context base, messages, models'
request shapes, pricing, tools, usage and the run's config and state; never the store (the loop
commits what this returns).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from ..context import (
    CHARS_PER_TOKEN,
    MESSAGE_TOKENS,
    ContextUsage,
    NativeContext,
    ThreadView,
    Visible,
    _view,
    clear_candidates,
    counter_for,
    cut_point,
    message_tokens,
    parts_json,
    request_parts,
    scale_parts,
    transcript,
    visible,
)
from ..context._compaction import summary_instructions
from ..context._estimate import tools_tokens
from ..exceptions import ContextOverflowError, ModelError, ModelResponseError
from ..messages import CompactionMessage, Message, SystemMessage, ToolResultMessage, UserMessage
from ..models.base import ModelRequest, ModelResponse
from ..tools import RunContext, Tool
from ..usage import ModelCallUsage
from .config import RunConfig

__all__ = ["READ_RESULT", "SUMMARY_HEADER", "Unused", "Window", "overflow_error", "read_result_tool", "with_reader"]

READ_RESULT = "read_result"
SUMMARY_HEADER = "Summary of the earlier part of this conversation (the full messages were compacted):\n"
Trigger = Literal["threshold", "overflow"]
"""Why a compaction runs (`CompactionMessage.trigger`)."""
OVERFLOW_COMPACTIONS = 2
"""How many times one model call's overflow refusal is met by a compaction and a retry."""
READ_LIMIT = 20_000
"""The most characters one ``read_result`` call returns when the window is unknown."""


@functools.lru_cache(maxsize=64)
def read_result_tool(limit_max: int | None) -> Tool:
    """The built-in tool that pages through a result the model saw cut (or cleared): offered
    with every request that holds such a result, needs no approval, recorded like any call."""
    most = limit_max or READ_LIMIT

    def read_result(ctx: RunContext[Any], call_id: str, offset: int = 0, limit: int = 4000) -> str:
        """Read part of a tool result that was cut short or cleared to save context.

        Args:
            call_id: the id of the tool call whose whole result to read (the cut marker names it).
            offset: the first character to read (0: the start).
            limit: how many characters to read.
        """
        found = next((m for m in ctx.messages if isinstance(m, ToolResultMessage) and m.call_id == call_id), None)
        if found is None:
            raise ValueError(f"no tool result has call_id {call_id!r}")
        whole = found.whole_text
        offset = max(0, offset)
        limit = max(1, min(limit, most))
        end = min(len(whole), offset + limit)
        more = f"; offset={end} reads on" if end < len(whole) else "; that is the end"
        return f"[characters {offset:,} to {end:,} of {len(whole):,}{more}]\n{whole[offset:end]}"

    reader = Tool.from_function(read_result, idempotent=True)
    reader.builtin = True
    return reader


def with_reader(config: RunConfig) -> RunConfig:
    """`config` with the built-in ``read_result`` among its tools (a tool of the agent's own by that
    name wins); it is offered to the model only once a result was cut (`Window.request`). Made
    once per config and page size (kept in `RunConfig.derived`: the config goes with it), so the
    runs of an agent whose settings do not change share it."""
    if READ_RESULT in config.tools:
        return config
    limit = config.result_cap(_PROBE, config.context_window)  # (the bundled local model learns its window late)
    made = config.derived.get(READ_RESULT)
    if made is not None and made[0] == limit:
        return made[1]
    reader = read_result_tool(limit)
    out = dataclasses.replace(config, tools=MappingProxyType({**config.tools, READ_RESULT: reader}))
    config.derived[READ_RESULT] = (limit, out)
    return out


_PROBE = Tool(READ_RESULT, "", {})
"""A tool with no cap of its own: `RunConfig.result_cap` of it is the window's share."""


_TOOLS: dict[tuple[int, Any, str], tuple[Any, int]] = {}
"""Tool definitions (by identity, with the counter and provider that sized them) -> their tokens."""


@dataclass(slots=True)
class _Sent:
    """The last request sent: its estimate, the provider's count, and its compaction state."""

    estimate: int
    reported: int | None
    key: tuple[int, int]


class Window:
    """One run's bookkeeping of the context window (see the module)."""

    def __init__(self, config: RunConfig, last: tuple[int, int, tuple[int, int] | None] | None = None) -> None:
        """`last`: the estimate, the provider's count and the compaction state of the thread's last
        request before this run (`StoredThread.last_sent`): the first request is sized from them
        as the process that sent it would have (so a resume sends what a crashed run would)."""
        model = config.model
        self.count = counter_for(model.provider, model.model_name)
        self.provider = model.provider
        self.sent: _Sent | None = None if last is None else _Sent(last[0], last[1], last[2] or (-1, -1))
        self.pending: tuple[int, tuple[int, int], dict[str, int]] | None = None
        """The request being sent: its estimate, compaction state and parts."""
        self._sizes: dict[int, tuple[Message, int]] = {}
        """Each message's estimated tokens, counted once per run (by identity: a thread's
        messages are appended, never changed)."""
        self._tools: tuple[Any, int] = ((), 0)
        """The tool definitions last counted and their tokens (they change only with the sources)."""
        self._texts: dict[str, int] = {}
        """The system prompt's and the summary's tokens (each counted once per run)."""
        self._offered: tuple[Any, Any, tuple[dict[str, Any], ...]] = ((), None, ())
        """The tool definitions, the ``read_result`` tool and the two together, as last sent."""
        self.thread: ThreadView | None = ThreadView(self.sized) if _view.CACHED else None
        """The thread as requests send it, kept up to date step by step (None: the plain path,
        the whole thread walked on every request; ``NBAGENT_CONTEXT_CACHE=0``)."""
        self._blocked: tuple[int, int, bool] = (0, 0, False)
        """(id of the messages list, how many were looked at, whether one of them is blocked)."""
        self.size: int | None = config.context_window
        """The model's window as last read: when the run starts, then for each request (read once a
        step: the gauge and the result caps of the step's calls use that reading)."""

    def any_blocked(self, messages: Sequence[Message]) -> bool:
        """Whether `messages` hold a message a guard blocked (`context.is_blocked`): looks only at the
        messages appended since the last question (a run's thread only grows)."""
        ident, seen, found = self._blocked
        if ident != id(messages) or seen > len(messages):
            seen, found = 0, False
        if not found:
            for i in range(seen, len(messages)):
                if getattr(messages[i], "blocked", None) is not None:  # (`is_blocked`, without a call each)
                    found = True
                    break
        self._blocked = (id(messages), len(messages), found)
        return found

    def sized(self, message: Message) -> int:
        """`message_tokens` of `message`, counted once."""
        key = id(message)
        found = self._sizes.get(key)
        if found is not None and found[0] is message:
            return found[1]
        size = message_tokens(message, self.count)
        self._sizes[key] = (message, size)
        return size

    def tools_size(self, tools: Sequence[dict[str, Any]]) -> int:
        """`tools_tokens` of `tools`, counted again only when the definitions are another object
        (an agent's runs share theirs, so its first run counts them)."""
        if self._tools[0] is not tools:
            key = (id(tools), self.count, self.provider)
            found = _TOOLS.get(key)
            if found is None or found[0] is not tools:
                if len(_TOOLS) >= 64:
                    _TOOLS.clear()
                found = _TOOLS[key] = (tools, tools_tokens(tools, self.count, self.provider))
            self._tools = found
        return self._tools[1]

    # ------------------------------------------------------------------ requests
    def request(self, config: RunConfig, messages: Sequence[Message], step: int) -> ModelRequest:
        """The request for the thread's `messages`: compaction records applied, the summary after
        the system prompt, ``read_result`` offered when a result sent was cut or cleared."""
        self.size = config.context_window
        view = self.visible(messages)
        system = config.system
        if view.summary:
            system = (system + "\n\n" if system else "") + SUMMARY_HEADER + view.summary
        sent: list[Message] = [SystemMessage(system), *view.messages] if system else list(view.messages)
        tools = self.offered(config, view)
        parts = self.parts(config, view, tools)
        if len(self._sizes) > 2 * len(messages) + 64:  # stubs of cleared results are new objects each time
            self._sizes.clear()
        thread = self.thread
        key = (view.upto, sum(1 for m in messages if m.kind == "compaction") if thread is None else thread.records)
        self.pending = (sum(parts.values()), key, parts)
        return ModelRequest(sent, tools, config.request_settings, step,
                            config.output.name if config.output is not None else None, not config.tools_in_order,
                            native_request(config))

    def visible(self, messages: Sequence[Message]) -> Visible:
        """`visible(messages)`: from the running view when there is one (`messages` is the run's
        thread: another list would start it afresh)."""
        if self.thread is None:
            return visible(messages, self.any_blocked(messages))
        return self.thread.follow(messages)

    def offered(self, config: RunConfig, view: Visible) -> Sequence[dict[str, Any]]:
        """The tool definitions a request offers: the config's, with ``read_result`` once a result
        the model reads was cut or cleared (the same tuple while neither changes)."""
        tools: Sequence[dict[str, Any]] = config.tool_definitions
        reader = config.tools.get(READ_RESULT)
        if reader is None or not (any(m.kind == "tool-result" and m.full_content is not None
                                      for m in view.messages) if self.thread is None else self.thread.cut):
            return tools
        if all(d.get("name") != READ_RESULT for d in tools):
            base, known, both = self._offered
            if base is not tools or known is not reader:
                both = (*tools, reader.definition())
                self._offered = (tools, reader, both)
            return both
        return tools

    def parts(self, config: RunConfig, view: Visible, tools: Sequence[dict[str, Any]]) -> dict[str, int]:
        """The estimated tokens of each part of the request (`request_parts`)."""
        thread = self.thread
        if thread is None:
            return request_parts(config.system, view.summary, view.messages, tools, self.count, self.provider,
                                 sized=self.sized, tools_size=self.tools_size(tools))
        system, summary = config.system, view.summary
        return thread.parts(self.text_size(system) if system else 0, self.text_size(summary) if summary else 0,
                            self.tools_size(tools))

    def text_size(self, text: str | None) -> int:
        """The tokens of the system prompt or of a summary as `request_parts` counts them (0: none)."""
        if not text:
            return 0
        size = self._texts.get(text)
        if size is None:
            if len(self._texts) > 8:
                self._texts.clear()
            size = self._texts[text] = self.count(text) + MESSAGE_TOKENS
        return size

    def tokens(self) -> int:
        """The size of the request `request` made last, in tokens: the provider's count of the
        previous request plus the estimate of what was added since (the same compaction state),
        else the estimate corrected by the previous request's measured ratio, else the estimate."""
        assert self.pending is not None
        estimate, key, _ = self.pending
        sent = self.sent
        if sent is None or sent.reported is None or sent.estimate <= 0:
            return estimate
        if sent.key == key:
            return max(0, sent.reported + estimate - sent.estimate)
        return round(estimate * sent.reported / sent.estimate)

    def observe(self, config: RunConfig, response: ModelResponse, step: int) -> ContextUsage:
        """The gauge for the request just answered (and the base of the next estimate)."""
        assert self.pending is not None
        estimate, key, parts = self.pending
        counts = response.usage
        reported = counts.input_tokens if counts.reported and counts.input_tokens > 0 else None
        tokens = reported if reported is not None else self.tokens()
        self.sent = _Sent(estimate, reported, key)
        compaction = config.compaction
        return ContextUsage(tokens, self.size, scale_parts(parts, tokens), reported is None, step,
                            compaction.at if compaction is not None else None)

    def row_context(self, usage: ContextUsage) -> str:
        """What a usage row keeps of its request (`ModelCallUsage.context`): the parts, the
        window and nbagent's estimate of the request."""
        sent = self.sent
        return parts_json(usage.by_part, usage.window, *((sent.estimate, sent.key) if sent is not None else ()))

    def over_threshold(self, config: RunConfig) -> int | None:
        """The next request's tokens when they pass the compaction threshold, else None."""
        window, compaction = config.context_window, config.compaction
        if window is None or compaction is None or native_request(config) is not None:
            return None  # (with native context management, the provider clears at the threshold)
        tokens = self.tokens()
        return tokens if tokens >= compaction.at * window else None

    # ------------------------------------------------------------------ compaction
    async def compact(
        self, config: RunConfig, run_id: str, thread: str, messages: Sequence[Message], step: int,
        trigger: Trigger, tokens_before: int, limit: int | None = None,
    ) -> tuple[CompactionMessage, ModelCallUsage | None] | Unused | None:
        """A compaction record for `messages` (and the summary call's usage row), or None when
        nothing can be compacted, or `Unused` when the call was billed but gave nothing to use.
        `limit`: the window a refusal named (when the model's is not known). Raises the
        summarizer's error when its call fails."""
        compaction = config.compaction
        assert compaction is not None
        if compaction.policy == "clear_results":
            cleared = clear_candidates(messages, compaction.keep_last)
            if not cleared:
                return None
            record = CompactionMessage("", policy="clear_results", upto=self.visible(messages).upto,
                                       cleared=cleared, replaced=len(cleared), tokens_before=tokens_before,
                                       trigger=trigger)
            record.tokens_after = self._after(config, messages, record, tokens_before)
            return record, None
        if compaction.policy == "native" and config.model.native_compaction:
            return await self._native(config, run_id, thread, messages, step, trigger, tokens_before)
        view = self.visible(messages)
        upto = cut_point(messages, compaction.keep_last, view.upto)
        if upto is None:
            return None
        replaced = [m for m in messages[view.upto:upto] if m.kind != "compaction"]
        summarizer = config.summarizer or config.model
        window = summarizer.context_window or (
            None if config.summarizer is not None else config.context_window or limit) or 100_000
        budget = int(window * 0.5 * CHARS_PER_TOKEN)
        started = time.time()
        clock = time.perf_counter()
        while True:  # the transcript is made shorter while the summarizer refuses it as too long
            text = transcript(view.summary, replaced, budget)
            request = ModelRequest([SystemMessage(summary_instructions(compaction.summary_words)),
                                    UserMessage(text)], [], {}, step)
            try:
                response = await _ask(config, summarizer.request, request)
                break
            except ContextOverflowError:
                if budget < 2_000:
                    raise
                budget //= 3
        counts = response.usage
        row = _compaction_row(summarizer, response, run_id, thread, step, started, clock,
                              response.message.finish_reason)
        asked = request_parts(summary_instructions(compaction.summary_words), None, request.messages[1:], [],
                              self.count)
        asked["history"], asked["latest"] = asked["latest"], 0  # its one message is the history it reads
        row.context = parts_json(scale_parts(asked, counts.input_tokens if counts.reported else sum(asked.values())),
                                 summarizer.context_window)
        _price(row, summarizer, config)
        summary = (response.message.text or "").strip()
        if response.error is not None or not summary:
            return Unused(row, response.error or _no_summary(summarizer, response))
        record = CompactionMessage(summary, policy="summary", upto=upto, replaced=len(replaced),
                                   tokens_before=tokens_before, trigger=trigger,
                                   model=response.model or summarizer.model_name,
                                   summary_tokens=counts.output_tokens or self.count(summary))
        record.tokens_after = self._after(config, messages, record, tokens_before)
        return record, row

    async def _native(
        self, config: RunConfig, run_id: str, thread: str, messages: Sequence[Message], step: int,
        trigger: Trigger, tokens_before: int,
    ) -> tuple[CompactionMessage, ModelCallUsage] | Unused | None:
        """`Compaction.native`: the model's provider compacts the messages before the cut (sent as
        a request would send them); its items go into the record, its usage into the row."""
        compaction, model = config.compaction, config.model
        assert compaction is not None
        view = self.visible(messages)
        upto = cut_point(messages, compaction.keep_last, view.upto)
        if upto is None:
            return None
        replaced = [m for m in messages[view.upto:upto] if m.kind != "compaction"]
        before = visible(messages[:upto]).messages  # (the plain function: another list than the thread)
        request = ModelRequest([SystemMessage(config.system), *before] if config.system else before, [],
                               config.request_settings, step)
        started, clock = time.time(), time.perf_counter()
        response = await _ask(config, model.compact, request)
        counts = response.usage
        row = _compaction_row(model, response, run_id, thread, step, started, clock, None)
        _price(row, model, config)
        if response.error is not None:
            return Unused(row, response.error)
        record = CompactionMessage("", policy="native", upto=upto, replaced=len(replaced), tokens_before=tokens_before,
                                   trigger=trigger, model=response.model or model.model_name,
                                   summary_tokens=counts.output_tokens,
                                   items=[dict(i) for i in response.message.thinking_blocks])
        record.tokens_after = self._after(config, messages, record, tokens_before)
        return record, row

    def _after(self, config: RunConfig, messages: Sequence[Message], record: CompactionMessage, before: int) -> int:
        """The next request's size once `record` applies: `before` less the estimated saving (in
        the provider's units: scaled as the previous request's estimate was off)."""
        sent = self.sent
        ratio = sent.reported / sent.estimate if sent is not None and sent.reported and sent.estimate > 0 else 1.0
        return max(0, before - round(ratio * self._saving(config, messages, record)))

    def _saving(self, config: RunConfig, messages: Sequence[Message], record: CompactionMessage) -> int:
        """The estimated tokens `record` takes off the next request."""
        thread = self.thread
        if thread is not None:  # the system prompt and the tools are in both: only the messages and summary differ
            after = thread.with_record(messages, record)
            return (self.text_size(thread.summary) + thread.total()) - (self.text_size(after.summary) + after.total())
        tools = config.tool_definitions

        def estimate(thread: Sequence[Message]) -> int:
            view = visible(thread)
            return sum(request_parts(config.system, view.summary, view.messages, tools, self.count,
                                     self.provider).values())

        return estimate(messages) - estimate([*messages, record])


@dataclass(frozen=True, slots=True)
class Unused:
    """A compaction's model call that was billed but gave nothing to use (an empty summary, a
    refusal): its usage row is kept, and the compaction fails with `error` as if the call had
    raised it (at the threshold: a warning, the turns kept, tried again at the next one)."""

    row: ModelCallUsage
    error: ModelError


def _compaction_row(model: Any, response: ModelResponse, run_id: str, thread: str, step: int, started: float,
                    clock: float, finish: str | None) -> ModelCallUsage:
    """The usage row of a compaction's model call (a summary, or the provider's compaction)."""
    counts = response.usage
    return ModelCallUsage(
        run_id, thread, step, started, model.provider, response.model or model.model_name,
        counts.input_tokens, counts.cache_read_tokens, counts.cache_write_tokens, counts.output_tokens,
        counts.reasoning_tokens, time.perf_counter() - clock, finish, 0, usage_reported=counts.reported,
        purpose="compaction", batch=response.batch,
    )


def _price(row: ModelCallUsage, model: Any, config: RunConfig) -> None:
    """Fill `row`'s cost columns when `model` is priced or the agent has its own prices."""
    if model.priced or config.prices:
        from ..pricing import price_row

        price_row(row, config.prices)


def native_request(config: RunConfig) -> NativeContext | None:
    """The provider-side context management a request asks for: ``Compaction.native()`` on a
    model that can ask for it (`Model.native_context`), else None."""
    compaction = config.compaction
    if compaction is None or not config.model.native_context:
        return None
    return compaction.native_request(config.context_window)


async def _ask(config: RunConfig, call: Callable[[ModelRequest], Awaitable[ModelResponse]],
               request: ModelRequest) -> ModelResponse:
    """`call`'s answer to `request` (the summarizer's ``request``, or the model's ``compact``),
    retried as the agent's `Retry` says (a billed answer that cannot be used is returned with
    its `ModelResponse.error`: the caller keeps its usage row)."""
    return await config.retry.call(lambda: call(request))


def _no_summary(summarizer: Any, response: ModelResponse) -> ModelResponseError:
    """The error of a summary answer with no text (empty, blank, or only a tool call)."""
    what = "only a tool call" if response.message.tool_calls else "an empty answer"
    return ModelResponseError(f"the summarizer ({response.model or summarizer.model_name}) wrote no summary: "
                              f"{what}", provider=summarizer.provider)


def threshold_failed(exc: BaseException) -> None:
    """A compaction at the threshold failed: the run goes on uncompacted (it still fits), loudly."""
    warnings.warn(f"nbagent: the conversation could not be compacted ({type(exc).__name__}: {exc}); "
                  "the request is sent whole", RuntimeWarning, stacklevel=3)


def overflow_error(exc: ModelError, compaction_on: bool) -> ModelError:
    """The provider's overflow refusal as the run's error, with the fix named."""
    if compaction_on:
        hint = ("compaction found nothing more to compact (the last messages, kept whole, do not fit: "
                "lower Compaction(keep_last=...) or cap the tools' results with max_result_tokens)")
    else:
        hint = ("the conversation no longer fits the model's context window: "
                "Agent(compaction=Compaction(...)) keeps a long conversation going (docs/context.md)")
    new = copy.copy(exc)
    new.message = f"{exc.message}; {hint}"
    new.args = (new.message,)
    return new
