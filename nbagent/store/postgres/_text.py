"""Text PostgreSQL cannot hold: NUL (U+0000), which neither ``text`` nor ``jsonb`` accepts.

Owns the one reversible encoding every string takes on its way to the server, and back:
`guard_json` (the JSON text of a record, with each string that needs it encoded), `restore`
(the decoded records, with those strings decoded) and `restore_text` (one string read from a
column). SQLite and memory keep NUL as it is; a tool's result, a prompt, arguments, the
model's text and the state must come back from PostgreSQL exactly as they do from those.

The encoding marks a string by a leading DLE (U+0010) and, after it, writes DLE as two DLEs and
NUL as DLE ``0``. A string is encoded when it holds a NUL or starts with a DLE (so that the
mark can never be mistaken); every other string, which is every string in practice, is sent as
it is. JSON writes DLE as ``\\u0010`` and NUL as ``\\u0000``, so a search of the JSON text tells
whether anything needs this at all: the usual record costs one or two substring searches.
Only a string written before nbagent 0.2 that starts with a DLE would be read differently.

The derived display columns (a thread's title, a checkpoint's last message) lose their NULs
instead (`display_text`): the messages they are made from keep them.

Imports only the standard library.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["display_text", "encode_text", "guard_json", "is_encoded", "might_need_restore", "restore", "restore_text"]

_MARK = "\x10"
_ENCODED = re.compile("\x10(.)", re.DOTALL)
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_text(text: str) -> str:
    """One string as the server keeps it (encoded only when it holds a NUL or starts with DLE)."""
    if "\x00" not in text and not text.startswith(_MARK):
        return text
    return _MARK + text.replace(_MARK, _MARK + _MARK).replace("\x00", _MARK + "0")


def _decode_pair(match: re.Match[str]) -> str:
    char = match.group(1)
    return "\x00" if char == "0" else char


def is_encoded(value: Any) -> bool:
    """Whether `value` is a string in the encoded form (it starts with the mark)."""
    return isinstance(value, str) and value.startswith(_MARK)


def restore_text(text: Any) -> Any:
    """A string read from the server, decoded where it was encoded (other values as they are)."""
    if is_encoded(text):
        return _ENCODED.sub(_decode_pair, text[1:])
    return text


def _walk(value: Any, change: Any) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {change(k) if isinstance(k, str) else k: _walk(v, change) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, change) for v in value]
    return value


def guard_json(value: Any) -> str:
    """The compact JSON text of `value` (records of dicts, lists, strings, numbers), with every
    string that holds a NUL, or starts with the mark, encoded (dict keys too)."""
    text = _dumps(value)
    if "\\u0000" in text or "\\u0010" in text:
        text = _dumps(_walk(value, encode_text))
    return text


def might_need_restore(json_text: str | bytes) -> bool:
    """Whether JSON text read from the server may hold an encoded string (a DLE anywhere)."""
    if isinstance(json_text, bytes):
        return b"\\u0010" in json_text
    return "\\u0010" in json_text


def restore(value: Any) -> Any:
    """Decoded records (from JSON read from the server), each encoded string decoded."""
    return _walk(value, restore_text)


def display_text(text: str) -> str:
    """A derived display text (title, summary) without NULs, which a ``text`` column refuses."""
    return text.replace("\x00", "") if "\x00" in text else text
