"""Checkpoint stores: where threads (conversations), pending approvals and usage are kept.

`open_store(value)` turns what a user may give for a store into a `Store`: a `Store` as it is,
``"memory"`` (`MemoryStore`), or a file path (`SQLiteStore`; agents of one process that name the
same file share one); None gives `default_store()`, which picks the store an `Agent` uses when it
is given none:

- ``NBAGENT_STORE`` unset: `SQLiteStore` at ``./.nbagent/threads.db`` (relative to the working
  directory when the agent first touches its store; the folder is created on first use);
- ``NBAGENT_STORE=/some/file.db``: `SQLiteStore` at that path;
- ``NBAGENT_STORE=memory``: `MemoryStore` (nothing survives the process).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .base import FORMAT_VERSION, Checkpoint, LedgerEntry, Store, ThreadInfo, ThreadState
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = [
    "DEFAULT_PATH",
    "FORMAT_VERSION",
    "Checkpoint",
    "LedgerEntry",
    "MemoryStore",
    "SQLiteStore",
    "Store",
    "ThreadInfo",
    "ThreadState",
    "default_store",
    "open_store",
]

DEFAULT_PATH = Path(".nbagent") / "threads.db"
"""Where the default store lives, relative to the working directory."""

_shared: dict[Path, SQLiteStore] = {}
_shared_lock = threading.Lock()


def _new_shared_lock() -> None:
    # In a forked child: the parent's lock may have been held by a thread the child does not have.
    global _shared_lock
    _shared_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_shared_lock)


def default_store() -> Store:
    """The store an `Agent` uses when none is given (see the module docstring).

    Agents of one process that use the same file share one `SQLiteStore` (one connection).
    """
    return open_store(os.environ.get("NBAGENT_STORE", "").strip() or DEFAULT_PATH)


def open_store(value: Store | str | os.PathLike[str] | None) -> Store:
    """A `Store` from what ``Agent(store=...)`` and ``NBAGENT_STORE`` accept (module docstring).

    Raises:
        UserError: `value` is none of those.
    """
    if value is None:
        return default_store()
    if isinstance(value, Store):
        return value
    if not isinstance(value, (str, os.PathLike)):
        from ..exceptions import UserError

        raise UserError(f"store must be a Store, a file path or 'memory', got {type(value).__name__}")
    if isinstance(value, str) and value.strip().lower() == "memory":
        return MemoryStore()
    path = Path(value).expanduser().absolute()
    with _shared_lock:
        store = _shared.get(path)
        if store is None:
            store = _shared[path] = SQLiteStore(path)
        return store
