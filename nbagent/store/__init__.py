"""Checkpoint stores: where threads (conversations), pending approvals and usage are kept."""

from __future__ import annotations

from .base import FORMAT_VERSION, Checkpoint, LedgerEntry, Store, ThreadInfo, ThreadState
from .memory import MemoryStore

__all__ = [
    "FORMAT_VERSION",
    "Checkpoint",
    "LedgerEntry",
    "MemoryStore",
    "Store",
    "ThreadInfo",
    "ThreadState",
    "default_store",
]


def default_store() -> Store:
    """The store an `Agent` uses when none is given."""
    return MemoryStore()
