"""Usage chunks: packing usage rows into columnar blobs and reading columns back.

Owns the ``usage_chunks`` bookkeeping (which id ranges are packed, the unpacked tail, packing a
range into one blob) and `read_blocks`, which turns chunks plus unpacked rows into
`ColumnBlock`s. Imports `_columnar` (the blob format) and `_schema` (the usage columns) only;
every function runs inside the caller's transaction, on the caller's connection.

The sizes ``CHUNK_ROWS`` and ``_SMALL_THREAD`` are this module's globals, read at call time, so
setting them here (tests, benchmarks: ``nbagent.store.sqlite._chunks.CHUNK_ROWS = 8``) changes the
packing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from .._columnar import ColumnBlock, decode_chunk, encode_chunk, encode_rows, keep_matching
from ._schema import USAGE_COLUMNS

_MIN_ID, _MAX_ID = -(2**63), 2**63 - 1
_USAGE_SELECT = ", ".join(USAGE_COLUMNS)

CHUNK_ROWS = 4096
"""Usage rows per chunk. An append that leaves this many rows unpacked packs them (10-40 ms,
once every 4,096 model calls, inside the append's transaction); a bigger chunk makes that pause
longer, a smaller one makes `usage_columns` handle more blobs. Read at call time here and by
`_store`, so setting it takes effect at once."""

_SMALL_THREAD = 4 * CHUNK_ROWS
"""A thread with at most this many usage rows is read through the (thread, id) index (read at
call time, like `CHUNK_ROWS`)."""


def uncovered(conn: sqlite3.Connection) -> tuple[list[tuple[int, int]], int]:
    """The id ranges below the last chunk that no chunk covers, and the first id above it."""
    gaps = []
    cursor = _MIN_ID
    for first, last in conn.execute("SELECT first_id, last_id FROM usage_chunks ORDER BY last_id"):
        if first > cursor:
            gaps.append((cursor, first - 1))
        cursor = last + 1
    return gaps, cursor


def tail_span(conn: sqlite3.Connection, start: int) -> int:
    """How many ids the unpacked rows from `start` on span (an upper bound on their number)."""
    first = conn.execute("SELECT min(id) FROM usage WHERE id >= ?", (start,)).fetchone()[0]
    if first is None:
        return 0
    top = conn.execute("SELECT max(id) FROM usage").fetchone()[0]
    return int(top) - int(first) + 1


def tail_floor(conn: sqlite3.Connection) -> int | None:
    """The id below the unpacked tail: the last chunk's last id, else the lowest id minus one."""
    last = conn.execute("SELECT max(last_id) FROM usage_chunks").fetchone()[0]
    if last is not None:
        return int(last)
    first = conn.execute("SELECT min(id) FROM usage").fetchone()[0]
    return None if first is None else int(first) - 1


def pack_range(conn: sqlite3.Connection, lo: int, hi: int) -> int:
    """Pack the rows with ``lo <= id <= hi`` (the first CHUNK_ROWS of them) into one chunk that
    starts at `lo`; returns the chunk's last id."""
    chunk_rows = CHUNK_ROWS
    rows = conn.execute(
        f"SELECT id, {_USAGE_SELECT} FROM usage WHERE id BETWEEN ? AND ? ORDER BY id LIMIT {chunk_rows}",
        (lo, hi),
    ).fetchall()
    last = rows[-1][0] if len(rows) == chunk_rows else hi
    block = encode_rows([r[1:] for r in rows])
    conn.execute(
        "INSERT INTO usage_chunks (last_id, first_id, rows, data) VALUES (?, ?, ?, ?)",
        (last, lo, len(rows), encode_chunk(block)),
    )
    return int(last)


def pack_tail(conn: sqlite3.Connection, *, limit: int) -> int:
    """Pack the rows above the last chunk while they span CHUNK_ROWS ids, at most `limit`
    chunks; returns how many chunks were written. Costs two index look-ups when there is
    nothing to pack."""
    done = 0
    while done < limit:
        last = conn.execute("SELECT max(last_id) FROM usage_chunks").fetchone()[0]
        start = _MIN_ID if last is None else last + 1
        if tail_span(conn, start) < CHUNK_ROWS:
            break
        top = conn.execute("SELECT max(id) FROM usage").fetchone()[0]
        pack_range(conn, start, top)
        done += 1
    return done


def _rows_block(
    conn: sqlite3.Connection, names: Sequence[str], lo: int, hi: int, thread: str | None
) -> ColumnBlock:
    sql = f"SELECT {', '.join(names)} FROM usage WHERE id BETWEEN ? AND ?"
    params: tuple[Any, ...] = (lo, hi)
    if thread is not None:
        sql += " AND thread = ?"
        params += (thread,)
    return encode_rows(conn.execute(sql + " ORDER BY id", params).fetchall(), names)


def read_blocks(conn: sqlite3.Connection, names: Sequence[str], thread: str | None) -> list[ColumnBlock]:
    lo, hi = _MIN_ID, _MAX_ID
    if thread is not None:
        count, lo, hi = conn.execute(
            "SELECT count(*), min(id), max(id) FROM usage WHERE thread = ?", (thread,)
        ).fetchone()
        if not count:
            return []
        if count <= _SMALL_THREAD:
            return [_rows_block(conn, names, lo, hi, thread)]
    need = list(names) if thread is None or "thread" in names else [*names, "thread"]
    blocks: list[ColumnBlock] = []
    cursor = lo
    chunks = conn.execute(
        "SELECT first_id, last_id, data FROM usage_chunks WHERE last_id >= ? AND first_id <= ? "
        "ORDER BY last_id", (lo, hi),
    ).fetchall()
    for first, last, data in chunks:
        if first > cursor:
            blocks.append(_rows_block(conn, names, cursor, first - 1, thread))
        try:
            block = decode_chunk(data, need)
        except (ValueError, KeyError, TypeError, IndexError):
            block = None  # a damaged blob: the chunk is only a copy, the rows are the record
        if block is None:  # written by a newer nbagent, or damaged: read its rows instead
            block = _rows_block(conn, names, first, last, thread)
        elif thread is not None:
            block = keep_matching(block, "thread", thread)
            if block is not None and len(need) > len(names):
                block = ColumnBlock(block.length, {n: block.parts[n] for n in names}, block.keep)
        if block is not None:
            blocks.append(block)
        cursor = last + 1
    if cursor <= hi:
        blocks.append(_rows_block(conn, names, cursor, hi, thread))
    return blocks
