"""Checkpoint stores: where threads (conversations), pending approvals and usage are kept.

`open_store(value)` turns what a user may give for a store into a `Store`: a `Store` as it is,
``"memory"`` (`MemoryStore`), a PostgreSQL URL (`PostgresStore`), or a file path (`SQLiteStore`);
agents of one process that name the same file or URL share one store. None gives
`default_store()`, which picks the store an `Agent` uses when it is given none:

- ``NBAGENT_STORE`` unset: `SQLiteStore` at ``./.nbagent/threads.db`` (relative to the working
  directory when the agent first touches its store; the folder is created on first use);
- ``NBAGENT_STORE=/some/file.db``: `SQLiteStore` at that path;
- ``NBAGENT_STORE=postgresql://user@host/db``: `PostgresStore` (``pip install "nbagent[postgres]"``);
- ``NBAGENT_STORE=memory``: `MemoryStore` (nothing survives the process).

`copy(source, target, threads=...)` copies whole threads between any two stores (SQLite ↔
PostgreSQL); ``python -m nbagent.store`` migrates a PostgreSQL database and copies threads from
the command line.

The backends load when first used (``import nbagent`` loads neither sqlite3 nor psycopg):
``nbagent.store.SQLiteStore`` and ``PostgresStore`` are imported on first access.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import FORMAT_VERSION, Checkpoint, LedgerEntry, Store, ThreadInfo, ThreadState
from .memory import MemoryStore

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .sqlite import SQLiteStore

__all__ = [
    "DEFAULT_PATH",
    "FORMAT_VERSION",
    "Checkpoint",
    "LedgerEntry",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "ThreadInfo",
    "ThreadState",
    "copy",
    "copy_sync",
    "default_store",
    "open_store",
]

DEFAULT_PATH = Path(".nbagent") / "threads.db"
"""Where the default store lives, relative to the working directory."""

_shared: dict[Path | str, Store] = {}
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
    """A `Store` from what ``Agent(store=...)`` and ``NBAGENT_STORE`` accept (module docstring):
    a `Store`, ``"memory"``, a ``postgresql://`` URL or a file path.

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
    from .postgres._conninfo import is_postgres_url

    key: str | Path  # a PostgreSQL URL, or a SQLite file's absolute path
    if isinstance(value, str) and is_postgres_url(value):
        key = value.strip()
    else:
        key = Path(value).expanduser().absolute()
    with _shared_lock:
        store = _shared.get(key)
        if store is None:
            if isinstance(key, str):
                from .postgres import PostgresStore

                store = _shared[key] = PostgresStore(key)
            else:
                from .sqlite import SQLiteStore

                store = _shared[key] = SQLiteStore(key)
        return store


async def copy(
    source: Store | str | os.PathLike[str],
    target: Store | str | os.PathLike[str],
    threads: Iterable[str] | None = None,
    *,
    replace: bool = False,
) -> list[str]:
    """Copy whole threads from one store to another, e.g. from SQLite into PostgreSQL and back.

    ```python
    await copy("threads.db", "postgresql://alice@db/agents", threads=["support-42"])
    ```

    Args:
        source, target: stores, or what `open_store` takes (a file path, a URL, ``"memory"``).
        threads: the thread ids to copy (default: every thread of `source`, oldest first).
        replace: replace a thread that `target` already has (default: refuse).

    Returns:
        The ids copied. Messages and their steps, checkpoints, usage, the ledger and the meta
        record (pending calls, decisions, state) come along, so a paused run can be resumed from
        the copy; version numbers and checkpoint times are the target's own.

    Raises:
        StoreError: a thread is not in `source`.
        ConflictError: a thread is already in `target` and `replace` is False (nothing of that
            thread is written).
    """
    from ._transfer import copy_threads

    return await copy_threads(open_store(source), open_store(target), threads, replace=replace)


def copy_sync(
    source: Store | str | os.PathLike[str],
    target: Store | str | os.PathLike[str],
    threads: Iterable[str] | None = None,
    *,
    replace: bool = False,
) -> list[str]:
    """Blocking twin of `copy`."""
    from .._sync import run_sync

    return run_sync(lambda: copy(source, target, threads, replace=replace))


def __getattr__(name: str) -> Any:
    if name == "SQLiteStore":
        from .sqlite import SQLiteStore

        return SQLiteStore
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'nbagent.store' has no attribute {name!r}")
