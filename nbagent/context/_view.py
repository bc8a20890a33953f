"""`ThreadView`: what a request sends of a thread that grows, kept up to date by the messages
appended since the last request, with running sums of the request's parts.

`visible` and `request_parts` walk the whole thread on every request, so a run's step costs more
the longer its thread: at 1,000 steps the two walks were most of a step. A run's thread only
grows (messages and compaction records are appended, never changed or removed), so a
`ThreadView` applies what was appended since it last looked, sizes each message once, and keeps
the sums of the parts. It gives exactly what the plain functions give (tests/test_context_view.py
compares them over long random sessions). A thread that is not the one it last saw grown by
appends (another list, a shorter one, another message where the last one it saw was) is taken
afresh. Messages a guard blocked are left out as `visible` leaves them (a message is blocked
before it is appended: the run stops when a racing guard blocks its prompt after the fact).

`CACHED` is the switch: ``NBAGENT_CONTEXT_CACHE=0`` in the environment (read at import) turns it
off, and the run loop and the fake models then walk the whole thread on every request as before.
Imports messages and the rest of the context base only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from ..messages import AssistantMessage, CompactionMessage, Message, ToolResultMessage
from ._compaction import Visible, is_blocked, stub

__all__ = ["CACHED", "ThreadView"]

CACHED = os.environ.get("NBAGENT_CONTEXT_CACHE", "").strip() != "0"
"""Whether requests are sized from running sums (`ThreadView`, the fake models' estimate) rather
than by walking the whole thread every time."""


class ThreadView:
    """One thread as requests send it (see the module). `sized` gives a message's tokens."""

    __slots__ = ("cleared", "cut", "effective", "last", "latest", "newest", "others", "records", "results",
                 "seen", "sized", "sized_to", "summary", "system", "thread", "upto", "view")

    def __init__(self, sized: Callable[[Message], int]) -> None:
        self.sized = sized
        self._reset(None)

    def _reset(self, thread: Sequence[Message] | None) -> None:
        self.thread = thread
        self.seen = 0
        """How many messages of `thread` are applied."""
        self.last: Message | None = None
        """``thread[seen - 1]``, to tell a thread that grew from one that changed."""
        self.records = 0
        """Compaction records among them."""
        self.newest: CompactionMessage | None = None
        """The newest summary (or native) record."""
        self.cleared: set[str] = set()
        """The call ids of the results every record cleared."""
        self.effective = False
        """Whether a record changes what is sent (until then the view is the thread itself)."""
        self.view: list[Message] = [] if thread is None else _as_list(thread)
        self.upto = 0
        self.summary: str | None = None
        self.cut = 0
        """Results in the view the model reads cut or cleared (``read_result`` is offered)."""
        self._restart_sums()

    def _restart_sums(self) -> None:
        self.sized_to = 0
        """How many messages of `view` the sums below hold."""
        self.system = self.results = self.others = self.latest = 0

    def follow(self, messages: Sequence[Message]) -> Visible:
        """Catch up with `messages` (the thread as it is now): what `visible(messages)` gives."""
        seen, now = self.seen, len(messages)
        if messages is not self.thread or now < seen or (seen and messages[seen - 1] is not self.last):
            self._reset(messages)
            seen = 0
        if now > seen:
            new = messages[seen:]
            rebuild = False
            cut = 0
            for m in new:
                if m.kind == "tool-result":
                    if m.full_content is not None:  # (counted here for the view that is the thread itself)
                        cut += 1
                elif m.kind == "compaction":
                    self.records += 1
                    if m.policy in ("summary", "native"):
                        self.newest, rebuild = m, True
                    if m.cleared:
                        self.cleared.update(m.cleared)
                        rebuild = True
                elif not self.effective and getattr(m, "blocked", None) is not None:  # (`is_blocked`)
                    rebuild = True  # never sent: the view is no longer the thread
            self.seen, self.last = now, messages[-1]
            if rebuild:
                self._rebuild(messages)
            elif self.effective:
                self._extend(new)
            else:  # no record that matters: the view is the thread itself, as `visible` gives it
                if self.view is not messages:
                    self.view = _as_list(messages)
                self.cut += cut
        return Visible(self.summary, self.view, self.upto)

    def _rebuild(self, messages: Sequence[Message]) -> None:
        """The view from the newest record on (as `visible` builds it; from the start when a blocked
        message, not a record, made the view another list than the thread), its sums to be taken again."""
        newest = self.newest
        upto = newest.upto if newest is not None else 0
        out: list[Message] = []
        if newest is not None and newest.policy == "native":  # the provider's items, sent back as they came
            out.append(AssistantMessage(thinking_blocks=[dict(i) for i in newest.items]))
        elif newest is not None and upto < len(messages) and messages[upto].kind != "user":
            for i in range(upto - 1, -1, -1):  # the turn's user message, so the request starts with it
                if messages[i].kind == "user" and not is_blocked(messages[i]):
                    out.append(messages[i])
                    break
        self.view, self.upto, self.effective = out, upto, True
        self.summary = newest.content if newest is not None and newest.policy == "summary" else None
        self.cut = sum(1 for m in out if m.kind == "tool-result" and m.full_content is not None)
        self._extend(messages[upto:])
        self._restart_sums()

    def _extend(self, new: Sequence[Message]) -> None:
        view, cleared = self.view, self.cleared
        records = self.newest is not None or bool(cleared)  # (`visible` keeps records that change nothing)
        for m in new:
            if (records and m.kind == "compaction") or getattr(m, "blocked", None) is not None:  # (`is_blocked`)
                continue
            if isinstance(m, ToolResultMessage):
                if m.call_id in cleared:
                    m = stub(m)
                if m.full_content is not None:
                    self.cut += 1
            view.append(m)

    def parts(self, system: int, summary: int, tools: int) -> dict[str, int]:
        """The request's parts (as `request_parts` gives them) from the view's running sums and the
        tokens of the system prompt, the summary and the tools (0 where there are none)."""
        view = self.view
        if self.sized_to < len(view):
            sized = self.sized
            for i in range(self.sized_to, len(view)):
                m = view[i]
                size = sized(m)
                kind = m.kind
                if kind == "tool-result":
                    self.results += size
                elif kind == "system":
                    self.system += size
                else:
                    self.others += size
                    if kind == "user":
                        self.latest = size
            self.sized_to = len(view)
        return {"system": system + self.system, "tools": tools, "history": summary + self.others - self.latest,
                "tool_results": self.results, "latest": self.latest}

    def with_record(self, messages: Sequence[Message], record: CompactionMessage) -> ThreadView:
        """A copy of this view (caught up with `messages`) with `record` appended to the thread:
        what the next request sends once the record is kept."""
        self.follow(messages)
        other = ThreadView(self.sized)
        for name in self.__slots__:
            setattr(other, name, getattr(self, name))
        other.cleared, other.view = set(self.cleared), list(self.view)
        other.thread = grown = [*messages, record]
        other.follow(grown)
        return other

    def total(self) -> int:
        """The tokens of the view's messages (the parts less the system prompt, summary and tools)."""
        parts = self.parts(0, 0, 0)
        return parts["system"] + parts["history"] + parts["tool_results"] + parts["latest"]


def _as_list(messages: Sequence[Message]) -> list[Message]:
    return messages if isinstance(messages, list) else list(messages)
