"""Forking a thread: copy it up to a step into a new thread, to try another path from there.

Owns `fork_thread` (what `Threads.fork` and `Agent.fork` do; `Threads.fork`'s docstring has the
rules) and the edit of the fork point's message. Imports exceptions, messages and store only.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from ..exceptions import UserError
from ..messages import AssistantMessage, Message, SystemMessage, ToolResultMessage, UserMessage, unanswered_calls
from ..store.base import Store
from ..store.meta import ThreadMeta

__all__ = ["fork_thread"]


async def fork_thread(
    store: Store,
    thread: str,
    at_step: int | None = None,
    new_thread: str | None = None,
    edit: str | Mapping[str, Any] | Message | None = None,
) -> str:
    """See `Threads.fork`."""
    loaded = await store.load(thread)
    if loaded is None:
        raise UserError(f"thread {thread!r} is not in the store ({store!r})")
    if at_step is not None and (not isinstance(at_step, int) or at_step < 0):
        raise UserError(f"at_step must be a step number >= 0, got {at_step!r}")
    steps = loaded.message_steps
    count = len(steps) if at_step is None else bisect.bisect_right(steps, at_step)
    messages = loaded.messages[:count]
    while unanswered_calls(messages):
        count = max(i for i, m in enumerate(messages) if m.kind == "assistant")
        messages = messages[:count]
    last = None
    if edit is not None:
        if not messages:
            raise UserError(f"nothing to edit: thread {thread!r} has no message at step {at_step}")
        last = _edited(messages[-1], edit)
    new_thread = new_thread or f"{thread}-fork-{os.urandom(4).hex()}"
    meta = ThreadMeta(
        status="forked",
        thread_step=steps[count - 1] if count else 0,
        always_allowed=list(loaded.meta.always_allowed),
        forked_from={"thread": thread, "at_step": at_step, "messages": count},
    )
    await store.copy(thread, new_thread, messages=count, last=last, meta=meta)
    return new_thread


def _edited(message: Message, edit: str | Mapping[str, Any] | Message) -> Message:
    """The fork point's message after `Agent.fork`'s `edit`."""
    if isinstance(edit, (SystemMessage, UserMessage, AssistantMessage, ToolResultMessage)):
        new: Message = edit
    else:
        if isinstance(edit, str):
            changes: dict[str, Any] = {"text" if message.kind == "assistant" else "content": edit}
        elif isinstance(edit, Mapping):
            changes = dict(edit)
        else:
            raise UserError(f"edit must be a str, a dict of fields or a message, got {type(edit).__name__}")
        names = {f.name for f in dataclasses.fields(message)} - {"kind"}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise UserError(f"edit names fields {unknown} that a {message.kind} message does not have; "
                            f"its fields: {sorted(names)}")
        new = dataclasses.replace(message, **changes)
    if message.kind == "tool-result" and (
        new.kind != "tool-result" or new.call_id != message.call_id
    ):
        raise UserError(
            f"the fork point is the result of call {message.call_id!r}; the edit must stay a result "
            "of that call (same call_id), or the call would be left without a result"
        )
    if new.kind == "assistant" and new.tool_calls:
        raise UserError(
            "an edited answer at the fork point may not have tool calls: they would have no results"
        )
    return new
