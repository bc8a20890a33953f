"""The stored-thread methods of `Agent`: list threads, their checkpoints, waiting calls, usage,
and fork them.

Owns `ThreadMethods`, a base class of `Agent` (it needs only the agent's `store`), so `Agent`
itself stays about running; it also keeps which threads are the agent's own. Imports the fork,
the run state, sync helpers, approvals, messages, store and usage.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from ._fork import fork_thread
from ._state import RunState
from ._sync import run_sync
from .approvals import PendingCall
from .messages import Message
from .store.base import Checkpoint, Store, ThreadInfo, UsageColumns
from .usage import Usage

__all__ = ["ThreadMethods"]


class ThreadMethods:
    """What an `Agent` can do with its stored threads (see `Agent`).

    An agent's threads are the ones it has worked with in this process: run, resumed, forked
    (the new thread) or shown in a view (`Agent.chat` with a ``thread``). `threads` lists them,
    and the DataFrame functions given an agent read only them, so agents of other notebooks
    sharing the store (``./.nbagent/threads.db``) do not mix in. Every stored thread:
    ``await agent.store.threads()``, ``nbagent.usage_frame(agent.store)``.
    """

    _own_threads: dict[str, None]
    """This agent's threads, in the order it first touched them (a dict as an ordered set)."""

    @property
    def store(self) -> Store:
        raise NotImplementedError  # Agent's store

    def _touch(self, thread: str) -> None:
        """Count `thread` among this agent's threads (see the class docstring)."""
        self._own_threads.setdefault(thread, None)

    async def _prepared(self, preparing: Awaitable[RunState]) -> RunState:
        """The prepared run (of `Agent.run`, `stream`, `resume`, `start`), its thread counted."""
        run = await preparing
        self._touch(run.thread)
        return run

    def own_threads(self) -> list[str]:
        """The ids of this agent's threads (class docstring), in the order it first touched them.
        Whether each is still stored is not checked: `threads` lists the stored ones."""
        return list(self._own_threads)

    async def threads(self) -> list[ThreadInfo]:
        """This agent's stored threads (`ThreadInfo`: see the class docstring), most recently
        updated first. After a kernel restart a new agent has none yet: list every thread of the
        store with ``await agent.store.threads()``."""
        return [info for info in await self.store.threads() if info.thread in self._own_threads]

    async def checkpoints(self, thread: str) -> list[Checkpoint]:
        """The checkpoints of a thread (`Checkpoint`: step, time, last message, usage so far)."""
        return await self.store.checkpoints(thread)

    async def pending(self, thread: str) -> list[PendingCall]:
        """The calls of a stored thread that wait for a decision or a client result, e.g. after
        a kernel restart: ``await agent.resume(thread=t, approve=await agent.pending(t))``."""
        loaded = await self.store.load(thread)
        return loaded.open_pending() if loaded is not None else []

    async def thread_usage(self, thread: str) -> Usage:
        """All model calls stored for a thread, summed (read column-wise, without the messages)."""
        columns = await self.store.usage_columns(thread)
        if isinstance(columns, UsageColumns):
            return Usage.of(columns.to_rows())
        loaded = await self.store.load(thread)  # a store overriding usage_columns with plain lists
        return Usage.of(loaded.usage if loaded else [])

    async def fork(
        self,
        thread: str,
        *,
        at_step: int | None = None,
        new_thread: str | None = None,
        edit: str | Mapping[str, Any] | Message | None = None,
    ) -> str:
        """Copy a thread up to a step into a new thread, to try another path from there.

        ```python
        for c in await agent.checkpoints("support-42"):         # step, last message, tokens so far
            print(c.step, c.last_message)
        alt = await agent.fork("support-42", at_step=2, edit={"content": "order 42 was never shipped"})
        result = await agent.resume(thread=alt)             # the model sees the edited tool result
        ```

        Which messages are copied: every message written at a step ``<= at_step`` (all of them
        when `at_step` is None). The prompt that starts a thread has step 0; the model's answer of
        step *n* and the results of its tool calls have step *n*; a prompt sent after the final
        answer of step *n* also has step *n*, so it is copied too (and can be edited). A fork
        never leaves a tool call without its result: when the copy would end with an answer some
        of whose calls have no result (the source was paused or interrupted in that step), the
        copy ends before that answer (its partial results and its usage row stay behind too).
        The usage rows of the copied steps and the ledger entries of the copied tool calls come
        along, so no copied call runs again. The user's state object is not copied (the store
        keeps only its latest value, which may reflect later steps): pass ``state=`` when you
        continue the fork. Pending approvals are not copied.

        Args:
            thread: the thread to copy (it is not changed).
            at_step: the last step to copy (see `checkpoints`); None copies the whole thread.
            new_thread: the new thread's id (default: ``"<thread>-fork-<random>"``).
            edit: changes the last copied message, the one at the fork point: a ``str`` replaces
                its text (``content`` of a prompt or tool result, ``text`` of an answer); a dict
                sets fields, e.g. ``{"content": "...", "is_error": False}``; a message instance
                replaces it (a tool result must keep the ``call_id``, an answer may not add tool
                calls).

        Returns:
            The new thread's id. Continue it with ``agent.resume(thread=new)`` (when it ends with
            a prompt or a tool result) or ``agent.run(prompt, thread=new)``.

        Raises:
            UserError: the thread does not exist, `at_step` is negative, or `edit` does not fit.
            ConflictError: `new_thread` already exists.
        """
        new = await fork_thread(self.store, thread, at_step, new_thread, edit)
        self._touch(new)
        return new

    def threads_sync(self) -> list[ThreadInfo]:
        """`threads` from sync code."""
        return run_sync(self.threads)

    def checkpoints_sync(self, thread: str) -> list[Checkpoint]:
        """`checkpoints` from sync code."""
        return run_sync(lambda: self.checkpoints(thread))

    def pending_sync(self, thread: str) -> list[PendingCall]:
        """`pending` from sync code."""
        return run_sync(lambda: self.pending(thread))

    def thread_usage_sync(self, thread: str) -> Usage:
        """`thread_usage` from sync code."""
        return run_sync(lambda: self.thread_usage(thread))

    def fork_sync(
        self,
        thread: str,
        *,
        at_step: int | None = None,
        new_thread: str | None = None,
        edit: str | Mapping[str, Any] | Message | None = None,
    ) -> str:
        """`fork` from sync code."""
        return run_sync(lambda: self.fork(thread, at_step=at_step, new_thread=new_thread, edit=edit))

