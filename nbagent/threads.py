"""`Threads`: the stored threads of an agent (or of a whole store): list, inspect, fork, delete.

Owns `Threads`, the thread management that `Agent`'s methods `threads`, `checkpoints`,
`pending`, `thread_usage`, `fork`, `delete_thread` and `revoke` hand their work to
(``agent.threads_api`` is this object for the agent's store and threads). Layer 4, beside
`agent`: imports the base, the store, `_watch` and `_run.fork` / `_run.prepare`; never `agent`,
widgets or pandas.

```python
from nbagent import Threads

threads = Threads("threads.db")            # every thread of a store, without an agent
for info in threads.list_sync():
    print(info.thread, [p.name for p in threads.pending_sync(info.thread)])
```
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from ._run.fork import fork_thread
from ._run.prepare import refuse_live
from ._sync import twin
from ._watch import ThreadChangedNotice, publish
from .approvals import PendingCall
from .exceptions import UserError
from .messages import Message
from .store import Store, open_store
from .store.base import Checkpoint, ThreadInfo, UsageColumns
from .usage import Usage

__all__ = ["Threads"]


class Threads:
    """Stored threads: list them, read their checkpoints, pending calls and usage, fork and
    delete them, revoke an "always allow". Each method is a coroutine with a blocking twin that adds ``_sync``.

    ``agent.threads_api`` is the `Threads` of an agent: its store, scoped to the agent's threads
    (the ones it ran, resumed, forked or showed in a view in this process; see `Agent`), and
    `Agent.threads`, `checkpoints`, `pending`, `thread_usage`, `fork`, `delete_thread` and
    `revoke` are its methods reached from the agent. ``Threads(store)`` manages every thread of a store, e.g.
    in a notebook that looks after the threads other kernels wrote.

    Args:
        store: a `Store`, a file path (`SQLiteStore`) or ``"memory"``, as `Agent(store=...)`
            takes them (default: `nbagent.store.default_store()`).
        scope: the thread ids `list` lists, as an ordered dict used as a set (an agent passes
            its own: `fork` adds the new thread to it, `delete` removes the deleted one). None:
            every thread of the store.
    """

    __slots__ = ("_scope", "store")

    def __init__(self, store: Store | str | os.PathLike[str] | None = None, *,
                 scope: dict[str, None] | None = None) -> None:
        self.store: Store = open_store(store)
        self._scope = scope

    def __repr__(self) -> str:
        n = None if self._scope is None else len(self._scope)
        scope = "every thread" if n is None else f"{n} thread" if n == 1 else f"{n} threads"
        return f"Threads({self.store!r}, {scope})"

    async def list(self) -> builtins.list[ThreadInfo]:
        """The stored threads in scope (`ThreadInfo`), most recently updated first."""
        stored = await self.store.threads()
        if self._scope is None:
            return stored
        return [info for info in stored if info.thread in self._scope]

    list_sync = twin(list)

    async def checkpoints(self, thread: str) -> builtins.list[Checkpoint]:
        """The checkpoints of a thread (`Checkpoint`: step, time, last message, usage so far)."""
        return await self.store.checkpoints(thread)

    checkpoints_sync = twin(checkpoints)

    async def pending(self, thread: str) -> builtins.list[PendingCall]:
        """The calls of a stored thread that wait for a decision or a client result, e.g. after
        a kernel restart: ``await agent.resume(thread=t, approve=await threads.pending(t))``."""
        loaded = await self.store.load(thread)
        return loaded.open_pending() if loaded is not None else []

    pending_sync = twin(pending)

    async def usage(self, thread: str) -> Usage:
        """All model calls stored for a thread, summed (read column-wise, without the messages)."""
        columns = await self.store.usage_columns(thread)
        if isinstance(columns, UsageColumns):
            return Usage.of(columns.to_rows())
        loaded = await self.store.load(thread)  # a store overriding usage_columns with plain lists
        return Usage.of(loaded.usage if loaded else [])

    usage_sync = twin(usage)

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
        continue the fork. Pending approvals are not copied. The new thread joins the scope.

        Go live from a step: with ``replay(recording, then=real_model)`` as the model, a fork
        edited at step *n* and resumed takes nothing from the model up to step *n* (the copied
        steps, or a replayed run that rebuilt the thread from the recording) and asks the real
        model from step *n + 1* on (the first request the recording does not hold; docs/replay.md).

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
        if self._scope is not None:
            self._scope.setdefault(new, None)
        return new

    fork_sync = twin(fork)

    async def delete(self, thread: str) -> bool:
        """Delete a stored thread with everything kept for it: messages, usage, checkpoints,
        pending calls and its recorded model calls (`nbagent.models.record`); True if it existed.
        It leaves the scope."""
        if self._scope is not None:
            self._scope.pop(thread, None)
        return await self.store.delete_thread(thread)

    delete_sync = twin(delete)

    async def revoke(self, thread: str, *tools: str) -> builtins.list[str]:
        """Take back "always allow" on a thread: the next call of each tool named waits for a
        person again (as do calls already waiting). With no tool named, every always-allowed
        tool of the thread is revoked. Revoking a tool that is not always-allowed does nothing.
        The views of this process that show the thread update their list.

        ```python
        agent.revoke_sync("support-42", "refund")    # -> the tools still always allowed
        ```

        Returns:
            The tools still always allowed on the thread, sorted.

        Raises:
            UserError: the thread is not in the store.
            ConflictError: a run goes on on the thread (stop it or let it pause first: it keeps
                its own copy until it ends), or the thread changed while it was revoked.
        """
        loaded = await self.store.load(thread)
        if loaded is None:
            raise UserError(f"thread {thread!r} is not in the store ({self.store!r})")
        refuse_live(loaded)
        kept = sorted(set(loaded.meta.always_allowed) - set(tools)) if tools else []
        if kept == sorted(loaded.meta.always_allowed):
            return kept
        # A new record: a store may hand out the very object it keeps (`MemoryStore`).
        meta = dataclasses.replace(loaded.meta, always_allowed=kept)
        await self.store.append(thread, version=loaded.version, step=loaded.step, meta=meta)
        publish(thread, None, ThreadChangedNotice(thread))
        return kept

    revoke_sync = twin(revoke)
