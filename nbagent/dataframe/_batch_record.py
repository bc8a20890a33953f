"""Where ``agent.map(..., batch_api=True)`` keeps its provider batches: a record in the agent's
store, so that the same map after a kernel restart, a kill -9 or a closed laptop finds the
batches in flight again and submits nothing twice.

The record is the meta record (``ThreadMeta.state``) of a thread of its own, ``<thread
prefix>~batch-api`` (the map's rows are ``<thread prefix>-<row>-<hash>``), with no messages and
no usage rows. Every store already keeps threads with versioned, conflict-checked appends, in
memory, in SQLite and in PostgreSQL, so no store needed a new table; and one record per map,
written twice per round, costs two appends a round instead of two per row. Its JSON::

    {"kind": "nbagent.batch_api", "version": 1, "batches": [
        {"label": "nbagent-…", "api": "openai-chat", "id": "batch_…" | null,
         "created": 1765432100.0, "rows": {"<custom id>": "<thread>", ...}}, ...]}

An entry is written before its batch is submitted (its label and rows, ``id`` null) and again
once the provider gave its id; an entry still without an id after a crash is looked up by its
label (`BatchWire.find`). A custom id leaves the record once its row took the answer (committed in
the row's own thread) or failed; an entry leaves with its last custom id, or 30 days after it was
made (the providers keep results for 29-30 days). Two kernels mapping the same rows merge their
writes (`Store.update`: the record is read again after a conflict).

Imports the core's store and exceptions only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import StoreError
from ..store.base import Change, Store, ThreadState
from ..store.meta import ThreadMeta

__all__ = ["KEEP_S", "BatchRecord", "Entry", "record_thread"]

KIND = "nbagent.batch_api"
VERSION = 1
KEEP_S = 30 * 24 * 3600.0
"""How long an entry is kept at most (seconds): the providers keep a batch's results about 30 days."""


def record_thread(prefix: str) -> str:
    """The thread holding the record of the map whose rows' thread ids start with `prefix`."""
    return f"{prefix}~batch-api"


@dataclass(slots=True)
class Entry:
    """One provider batch of the record."""

    label: str
    api: str
    rows: dict[str, str]
    """custom id -> the row's thread, for the requests still to be taken."""
    id: str | None = None
    """The provider's batch id; None between the record's write and the provider's answer."""
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "api": self.api, "id": self.id, "created": self.created, "rows": self.rows}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        return cls(str(data["label"]), str(data.get("api") or ""), dict(data.get("rows") or {}), data.get("id"),
                   float(data.get("created") or 0.0))


def new_label() -> str:
    return f"nbagent-{uuid.uuid4().hex[:24]}"


class BatchRecord:
    """The record of one map, in memory, and its writes (see the module docstring)."""

    def __init__(self, store: Store, thread: str) -> None:
        self.store = store
        self.thread = thread
        self.entries: dict[str, Entry] = {}
        self._by_row: dict[str, Entry] = {}
        self._dropped: set[str] = set()
        self._forgotten: set[str] = set()
        self.dirty = False

    async def load(self) -> None:
        """Read the record (none yet: empty); entries past `KEEP_S` are left out."""
        loaded = await self.store.load(self.thread)
        self.entries = {e.label: e for e in _entries(loaded)}
        self._index()

    def _index(self) -> None:
        self._by_row = {cid: e for e in self.entries.values() for cid in e.rows}

    def entry_of(self, custom_id: str) -> Entry | None:
        """The batch holding `custom_id`, if the record has one."""
        return self._by_row.get(custom_id)

    def add(self, api: str, rows: dict[str, str]) -> Entry:
        """A new entry for a batch about to be submitted (write it with `save` first)."""
        entry = Entry(new_label(), api, rows)
        self.entries[entry.label] = entry
        for cid in rows:
            self._by_row[cid] = entry
        self.dirty = True
        return entry

    def drop(self, entry: Entry) -> None:
        """Forget a whole entry (its batch was never made, or is gone)."""
        self.entries.pop(entry.label, None)
        self._dropped.add(entry.label)
        for cid in entry.rows:
            if self._by_row.get(cid) is entry:
                del self._by_row[cid]
        self.dirty = True

    def forget(self, custom_ids: Iterable[str]) -> None:
        """Rows whose answers (or failures) were taken: they leave the record at the next `save`."""
        for cid in custom_ids:
            entry = self._by_row.pop(cid, None)
            if entry is None:
                continue
            entry.rows.pop(cid, None)
            self._forgotten.add(cid)
            self.dirty = True
            if not entry.rows:
                self.drop(entry)

    async def save(self) -> None:
        """Write the record (merged with what another writer wrote since it was read)."""
        if not self.dirty:
            return
        ours, dropped, forgotten = dict(self.entries), set(self._dropped), set(self._forgotten)

        def change(loaded: ThreadState) -> Change:
            merged = {e.label: e for e in _entries(loaded) if e.label not in dropped}
            for entry in merged.values():
                for cid in forgotten & entry.rows.keys():
                    del entry.rows[cid]
            merged.update(ours)
            return Change(meta=_meta([e for e in merged.values() if e.rows]))

        written = await self.store.update(self.thread, change)
        if written is None:  # no record yet: start its thread (another writer may start it first)
            made = await self.store.create_or_load(self.thread, meta=_meta(list(ours.values())))
            if not isinstance(made, int) and await self.store.update(self.thread, change) is None:
                raise StoreError(f"the batch record {self.thread!r} could not be written")
        self._dropped -= dropped
        self._forgotten -= forgotten
        self.dirty = False


def _entries(loaded: ThreadState | None) -> list[Entry]:
    state = loaded.meta.state if loaded is not None else None
    if not isinstance(state, dict) or state.get("kind") != KIND:
        return []
    cutoff = time.time() - KEEP_S
    found = []
    for item in state.get("batches") or ():
        try:
            entry = Entry.from_dict(item)
        except (KeyError, TypeError, ValueError):
            continue  # an entry nbagent cannot read is left out (its batch is not waited for)
        if entry.created >= cutoff and entry.rows:
            found.append(entry)
    return found


def _meta(entries: list[Entry]) -> ThreadMeta:
    return ThreadMeta(state={"kind": KIND, "version": VERSION, "batches": [e.to_dict() for e in entries]})
