"""What the frame functions accept, and how it is loaded.

Owns source resolution: a `RunResult`, a list of them, a `Usage`, `ModelCallUsage` rows, a
`ThreadState`, a mapping of usage columns, an `Agent` (its own threads, read from its store) or
a `Store` (every stored thread). Imports the core
only (no pandas). Stores are async: `load_threads` is a coroutine the sync frame functions run
through `nbagent._sync.run_sync`, which works in scripts and inside a notebook's running loop.

Stores have a columnar usage reader, `Store.usage_columns` (``usage_columns(thread=None) ->
UsageColumns``: buffers per column, see its contract); the usage frame is built from it without
materialising one object per model call. A store object that returns a plain mapping of lists
instead (an older third-party store; sync or async) still works.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..agent import Agent
from ..result import RunResult
from ..store.base import Checkpoint, Store, ThreadState, UsageColumns
from ..usage import ModelCallUsage, Usage

__all__ = ["FRAME_COLUMNS", "Loaded", "is_async_source", "load", "scope", "store_of", "thread_names"]

FRAME_COLUMNS = tuple(f.name for f in fields(ModelCallUsage) if f.name != "context")
"""The stored usage columns the usage frame holds (``context``, JSON per row, is read only by
``context_frame``)."""


@dataclass
class Loaded:
    """A source, resolved into what the frame builders read."""

    results: list[RunResult] = field(default_factory=list)
    threads: list[ThreadState] = field(default_factory=list)
    rows: list[ModelCallUsage] = field(default_factory=list)
    columns: list[Mapping[str, Any]] = field(default_factory=list)
    agent: Agent | None = None
    ends: dict[str, dict[str, Checkpoint]] = field(default_factory=dict)
    """Per thread, the last checkpoint of each run by run id (`Store.last_checkpoints`): read
    for the runs frame only."""


def store_of(source: Any) -> Store | None:
    """The store behind an `Agent` or a `Store`, else None."""
    if isinstance(source, Agent):
        return source.store
    if isinstance(source, Store):
        return source
    return None


def is_async_source(source: Any) -> bool:
    """True when reading `source` needs the store (an Agent or a Store)."""
    return store_of(source) is not None


def thread_names(thread: str | Iterable[str] | None) -> list[str] | None:
    """Normalise the ``thread=`` filter: one name, several, or None for all."""
    if thread is None:
        return None
    if isinstance(thread, str):
        return [thread]
    return list(thread)


async def _call(reader: Any, *args: Any, **kwargs: Any) -> Any:
    value = reader(*args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


async def _columns_from_store(
    store: Store, threads: list[str] | None, names: Sequence[str] | None
) -> Mapping[str, Any] | None:
    reader = getattr(store, "usage_columns", None)
    if reader is None:
        return None
    wanted = {"columns": names} if names is not None and _takes_columns(reader) else {}
    if threads is None:
        return await _call(reader, **wanted)
    parts = [await _call(reader, thread=name, **wanted) for name in threads]
    if len(parts) == 1:
        return parts[0]
    if parts and all(isinstance(p, UsageColumns) for p in parts):
        return UsageColumns.concat(parts)
    keys = [k for k in parts[0]] if parts else []
    return {k: [v for part in parts for v in part[k]] for k in keys}


def _takes_columns(reader: Any) -> bool:
    # An older third-party store's reader may take the thread only.
    try:
        return "columns" in inspect.signature(reader).parameters
    except (TypeError, ValueError):
        return False


async def load_threads(store: Store, threads: list[str] | None = None) -> list[ThreadState]:
    """Load threads (all of them by default), oldest first."""
    if threads is None:
        threads = [info.thread for info in reversed(await store.threads())]
    out = []
    for name in threads:
        state = await store.load(name)
        if state is not None:
            out.append(state)
    return out


def _add(loaded: Loaded, item: Any) -> None:
    if isinstance(item, RunResult):
        loaded.results.append(item)
    elif isinstance(item, ModelCallUsage):
        loaded.rows.append(item)
    elif isinstance(item, ThreadState):
        loaded.threads.append(item)
    elif isinstance(item, Usage):
        loaded.rows.extend(item.calls)
    elif isinstance(item, Mapping):
        loaded.columns.append(item)
    else:
        from ..exceptions import UserError

        raise UserError(
            "expected a RunResult, a list of RunResults, ModelCallUsage rows, a Usage, an Agent or a "
            f"Store; got {type(item).__name__}"
        )


def scope(source: Any, threads: list[str] | None) -> list[str] | None:
    """The threads to read: `threads` when given; for an `Agent`, its own threads (those it ran,
    resumed, forked or showed in this process: `Agent.own_threads`), so other agents sharing its
    store do not mix in; None (every thread) for a `Store`."""
    if threads is None and isinstance(source, Agent):
        return source.own_threads()
    return threads


async def load(
    source: Any, *, threads: list[str] | None = None, usage_only: bool = False, ends: bool = False,
    columns: Sequence[str] | None = FRAME_COLUMNS,
) -> Loaded:
    """Resolve `source`; with `usage_only`, a store's columnar reader is used when it has one
    (reading `columns`: the usage frame's by default; None: every stored one); with `ends`, each
    stored thread's last checkpoint of each run is read too (`Loaded.ends`: one query per thread)."""
    loaded = Loaded()
    store = store_of(source)
    if store is not None:
        loaded.agent = source if isinstance(source, Agent) else None
        threads = scope(source, threads)
        if threads is not None and not threads:
            return loaded  # an agent that has no thread yet
        if usage_only:
            read = await _columns_from_store(store, threads, columns)
            if read is not None:
                loaded.columns.append(read)
                return loaded
        loaded.threads = await load_threads(store, threads)
        if ends:  # only threads with earlier runs: the latest run's end is in the meta record
            loaded.ends = {t.thread: await store.last_checkpoints(t.thread) for t in loaded.threads
                           if any(row.run_id != t.meta.run_id for row in t.usage)}
        return loaded
    items = source if isinstance(source, (list, tuple)) else [source]
    for item in items:
        _add(loaded, item)
    return loaded


def load_now(
    source: Any, *, threads: list[str] | None = None, usage_only: bool = False, ends: bool = False,
    columns: Sequence[str] | None = FRAME_COLUMNS,
) -> Loaded:
    """`load` from sync code: in-memory sources directly, stores through ``run_sync``."""
    if not is_async_source(source):
        loaded = Loaded()
        for item in source if isinstance(source, (list, tuple)) else [source]:
            _add(loaded, item)
        return loaded
    from .._sync import run_sync

    return run_sync(lambda: load(source, threads=threads, usage_only=usage_only, ends=ends, columns=columns))
