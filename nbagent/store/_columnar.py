"""Stored usage rows column by column: `UsageColumns` (what `Store.usage_columns` returns)
and the binary chunk format `SQLiteStore` packs usage rows into.

Owns the columnar shape and its encoding; imports the standard library, `nbagent.usage` and
`nbagent.exceptions` only (no numpy, no pandas: the store is core). Every numeric part is a
buffer, an ``array.array`` or a ``memoryview`` into a chunk blob, so the pandas edge turns a
column of a million rows into one numpy array with ``np.frombuffer`` + ``np.concatenate``,
never touching the values one by one.

Chunk blob, format 1 (all numbers little-endian)::

    byte 0          format (1); a reader that does not know the byte ignores the chunk and
                    reads its rows from the usage table instead
    bytes 1-4       length H of the JSON header (uint32)
    bytes 5..5+H    {"rows": n, "columns": [[name, kind, offset, size], ...],
                     "categories": {name: [distinct text values, in order of first use]}}
    then            each column's bytes at its offset (counted from the end of the header,
                    8-byte aligned in the blob): kind "q" int64,
                    "d" float64 (NaN where the value is None), "B" bool as one 0/1 byte,
                    "s" text as int32 codes into the column's categories (-1 is None)
"""

from __future__ import annotations

import json
import math
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Union

from ..exceptions import UserError
from ..usage import ModelCallUsage

__all__ = [
    "ADDED_COLUMNS",
    "CHUNK_FORMAT",
    "USAGE_FIELDS",
    "USAGE_KINDS",
    "ColumnBlock",
    "TextPart",
    "UsageColumns",
    "column_names",
    "decode_chunk",
    "encode_chunk",
    "encode_rows",
    "keep_matching",
]

USAGE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelCallUsage))
"""The usage columns, in `ModelCallUsage` field order."""

USAGE_KINDS: dict[str, str] = {
    "run_id": "s", "thread": "s", "step": "q", "time": "d", "provider": "s", "model": "s",
    "input_tokens": "q", "cache_read_tokens": "q", "cache_write_tokens": "q", "output_tokens": "q",
    "reasoning_tokens": "q", "latency_s": "d", "finish_reason": "s", "tool_calls": "q",
    "cost_input": "d", "cost_output": "d", "cost_total": "d", "currency": "s", "usage_reported": "B",
    "purpose": "s", "context": "s", "replayed": "B", "recorded_cost": "d", "agent": "s", "depth": "q",
    "parent_call_id": "s", "batch": "B",
}
"""Column -> how it is held: ``"q"`` int64, ``"d"`` float64 (None is NaN: a missing cost and a
NaN cost are one value, as in SQLite, which stores NaN as NULL), ``"B"`` bool (one byte),
``"s"`` dictionary-encoded text (`TextPart`)."""

CHUNK_FORMAT = 1
"""The first byte of a chunk blob."""

ADDED_COLUMNS: dict[str, str | int | None] = {
    "purpose": "run", "context": None, "agent": None, "depth": 0, "parent_call_id": None,
    "batch": False,
}
"""Columns added after chunks existed -> the value of every row a chunk without the column holds
(text, an int for ``depth``, a bool for ``batch``). Such a chunk was packed before its store
gained the column (SQLite files of a newer format are refused by older nbagents, so none packs
one later), and all its rows have that value."""

_NAN = math.nan
_BIG_ENDIAN = sys.byteorder == "big"


@dataclass(slots=True, frozen=True)
class TextPart:
    """Dictionary-encoded text: value *i* is ``categories[codes[i]]``; code -1 is None."""

    categories: list[str]
    """The distinct values, in order of first use."""
    codes: array[int] | memoryview
    """int32 codes (a buffer: ``np.frombuffer(part.codes, np.int32)``)."""

    def __len__(self) -> int:
        return len(self.codes)

    def tolist(self) -> list[str | None]:
        """The values as a list (None where missing)."""
        cats = self.categories
        return [None if c < 0 else cats[c] for c in self.codes]


Part = Union["array[Any]", memoryview, TextPart]
"""One column of a block: a buffer typed by `USAGE_KINDS` (``array.array`` or ``memoryview``
of typecode ``q`` / ``d`` / ``B``), or a `TextPart` for text."""


@dataclass(slots=True)
class ColumnBlock:
    """Consecutive usage rows, column by column: one stored chunk, or rows read one by one."""

    length: int
    """Rows held by the parts (before `keep`)."""
    parts: dict[str, Part]
    keep: array[int] | None = None
    """Positions (int32) of the rows that belong to the result, in order; None keeps them all.
    Set when a chunk shared by several threads is filtered to one thread."""

    @property
    def rows(self) -> int:
        """Rows this block contributes."""
        return self.length if self.keep is None else len(self.keep)

    def values(self, name: str) -> list[Any]:
        """One column as Python values (None for missing text and costs)."""
        part = self.parts[name]
        kind = USAGE_KINDS[name]
        if kind == "s":
            out: list[Any] = part.tolist()
        elif kind == "d":
            out = [None if v != v else v for v in part.tolist()]  # NaN -> None
        elif kind == "B":
            out = [bool(v) for v in part.tolist()]
        else:
            out = part.tolist()
        if self.keep is not None:
            out = [out[i] for i in self.keep]
        return out


class UsageColumns(Mapping[str, list[Any]]):
    """Usage rows column by column, in write order, as `Store.usage_columns` returns them.

    The fast way in is `blocks`: each `ColumnBlock` holds one buffer per column (see
    `USAGE_KINDS`), which pandas reads without a per-value step. As a mapping, ``cols["model"]``
    decodes one column into a Python list (for small reads, tests and code without numpy).

    Args:
        blocks: the row blocks, in order.
        names: the columns the blocks hold (a subset of `USAGE_FIELDS`, in that order).
    """

    __slots__ = ("blocks", "names")

    def __init__(self, blocks: Iterable[ColumnBlock] = (), names: Sequence[str] = USAGE_FIELDS) -> None:
        self.blocks: list[ColumnBlock] = [b for b in blocks if b.rows]
        self.names: tuple[str, ...] = tuple(names)

    @property
    def length(self) -> int:
        """Number of rows."""
        return sum(b.rows for b in self.blocks)

    def __getitem__(self, name: str) -> list[Any]:
        if name not in self.names:
            raise KeyError(name)
        out: list[Any] = []
        for block in self.blocks:
            out.extend(block.values(name))
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"<UsageColumns: {self.length} rows in {len(self.blocks)} blocks, {len(self.names)} columns>"

    def to_rows(self) -> list[ModelCallUsage]:
        """One `ModelCallUsage` per row (needs every column)."""
        columns = [self[name] for name in USAGE_FIELDS]
        return [ModelCallUsage(*values) for values in zip(*columns, strict=True)]

    @classmethod
    def from_rows(cls, rows: Iterable[ModelCallUsage], names: Sequence[str] = USAGE_FIELDS) -> UsageColumns:
        """Columns of `ModelCallUsage` rows (one block)."""
        tuples = [tuple(getattr(r, n) for n in names) for r in rows]
        return cls([encode_rows(tuples, names)], names)

    @classmethod
    def concat(cls, parts: Sequence[UsageColumns]) -> UsageColumns:
        """The rows of several `UsageColumns` (with the same columns), one after the other."""
        names = parts[0].names if parts else USAGE_FIELDS
        if any(p.names != names for p in parts):
            raise ValueError("cannot concatenate usage columns with different column sets")
        return cls([b for p in parts for b in p.blocks], names)


def column_names(columns: Iterable[str] | None) -> tuple[str, ...]:
    """The ``columns=`` argument of `Store.usage_columns`, checked: the names in field order."""
    if columns is None:
        return USAGE_FIELDS
    wanted = {columns} if isinstance(columns, str) else set(columns)
    unknown = wanted - set(USAGE_FIELDS)
    if unknown:
        raise UserError(f"unknown usage columns {sorted(unknown)}; the columns are {', '.join(USAGE_FIELDS)}")
    return tuple(name for name in USAGE_FIELDS if name in wanted)


# ---------------------------------------------------------------------------------------- encoding


def _encode(kind: str, values: Sequence[Any]) -> Part:
    if kind == "s":
        categories = list(dict.fromkeys(values))  # distinct, in order of first use
        index: dict[str | None, int] = {v: i for i, v in enumerate(categories)}
        if None in index:
            categories.remove(None)
            index = {v: i for i, v in enumerate(categories)}
            index[None] = -1
        return TextPart(categories, array("i", map(index.__getitem__, values)))
    if kind == "d":
        try:
            return array("d", values)
        except TypeError:  # None (a missing cost) -> NaN
            return array("d", [_NAN if v is None else v for v in values])
    if kind == "B":
        return array("B", [1 if v else 0 for v in values])
    try:
        return array("q", values)
    except TypeError:  # NULL in a hand-edited file: count it as 0
        return array("q", [0 if v is None else int(v) for v in values])


def encode_rows(rows: Sequence[Sequence[Any]], names: Sequence[str] = USAGE_FIELDS) -> ColumnBlock:
    """A block from row tuples (values in `names` order), e.g. rows of a SELECT."""
    columns: Iterable[Sequence[Any]] = zip(*rows, strict=True) if rows else [() for _ in names]
    parts = {name: _encode(USAGE_KINDS[name], col) for name, col in zip(names, columns, strict=True)}
    return ColumnBlock(len(rows), parts)


def keep_matching(block: ColumnBlock, name: str, value: str) -> ColumnBlock | None:
    """`block` limited to the rows whose text column `name` is `value` (None when no row is)."""
    part = block.parts[name]
    assert isinstance(part, TextPart)
    try:
        code = part.categories.index(value)
    except ValueError:
        return None
    codes = part.codes
    if len(part.categories) == 1 and -1 not in codes:
        return block
    keep = array("i", [i for i, c in enumerate(codes) if c == code])
    if block.keep is not None:
        wanted = set(block.keep)
        keep = array("i", [i for i in keep if i in wanted])
    return ColumnBlock(block.length, block.parts, keep)


def _buffer_bytes(part: array[Any]) -> bytes:
    if _BIG_ENDIAN:
        part = array(part.typecode, part)
        part.byteswap()
    return part.tobytes()


def encode_chunk(block: ColumnBlock) -> bytes:
    """The chunk blob of a block (every row; `keep` must be None)."""
    if block.keep is not None:
        raise ValueError("a filtered block cannot be stored as a chunk")
    payload: list[bytes] = []
    layout: list[list[Any]] = []
    categories: dict[str, list[str]] = {}
    size = 0
    for name, part in block.parts.items():
        kind = USAGE_KINDS[name]
        if isinstance(part, TextPart):
            categories[name] = part.categories
            data = _buffer_bytes(part.codes if isinstance(part.codes, array) else array("i", part.codes))
        else:
            data = _buffer_bytes(part if isinstance(part, array) else array(kind, part))
        layout.append([name, kind, size, len(data)])
        pad = -len(data) % 8
        payload.append(data + b"\0" * pad)
        size += len(data) + pad
    header = json.dumps(
        {"rows": block.length, "columns": layout, "categories": categories},
        ensure_ascii=False, separators=(",", ":"),
    ).encode()
    header += b" " * (-(5 + len(header)) % 8)  # JSON allows trailing spaces; aligns the columns
    return bytes([CHUNK_FORMAT]) + len(header).to_bytes(4, "little") + header + b"".join(payload)


def decode_chunk(blob: bytes, names: Sequence[str]) -> ColumnBlock | None:
    """The block stored in a chunk blob, with the columns `names`; None when the blob is of an
    unknown format or lacks a column (the caller then reads those rows from the usage table),
    except a column of `ADDED_COLUMNS`, which a chunk packed before it existed gets filled in."""
    if not blob or blob[0] != CHUNK_FORMAT:
        return None
    size = int.from_bytes(blob[1:5], "little")
    try:
        header = json.loads(blob[5 : 5 + size])
    except ValueError:
        return None
    view = memoryview(blob)
    base = 5 + size
    layout = {c[0]: c for c in header["columns"]}
    parts: dict[str, Part] = {}
    n = header["rows"]
    for name in names:
        entry = layout.get(name)
        if entry is None and name in ADDED_COLUMNS:
            value = ADDED_COLUMNS[name]
            if isinstance(value, int):  # (a bool too: ``batch``, held as "B")
                parts[name] = array(USAGE_KINDS[name], [int(value)]) * n
            else:
                parts[name] = (TextPart([value], array("i", bytes(4 * n))) if value is not None
                               else TextPart([], array("i", [-1]) * n))
            continue
        if entry is None or entry[1] != USAGE_KINDS[name]:
            return None
        _, kind, offset, length = entry
        raw = view[base + offset : base + offset + length]
        typecode = "i" if kind == "s" else kind
        buf: Any
        if _BIG_ENDIAN:
            buf = array(typecode, raw.tobytes())
            buf.byteswap()
        else:
            buf = raw.cast(typecode)  # type: ignore[arg-type]  # typeshed lists only "c"
        if len(buf) != n:
            return None
        parts[name] = TextPart(header["categories"][name], buf) if kind == "s" else buf
    return ColumnBlock(n, parts)
