"""Characters a reader cannot see, made visible: what a person approves is what they read.

Owns `INVISIBLE` (the characters), `hidden_characters` (which of them a text holds, named),
`reveal` (each replaced by its escape, ``\\u202e``) and `reveal_json` (the same inside JSON text,
where the escape keeps the value: ``json.loads`` gives back the very same string).

Why: bidirectional controls reorder what a browser shows ("Trojan Source", CVE-2021-42574: the
code a reviewer reads is not the code that runs) and zero-width or tag characters carry text no
one sees (hidden instructions, or a name that looks like another). Tool arguments go through
`reveal_json` before they are shown, and a row that holds any of these says so
(`nbagent.display.html.args_html`).

The characters: the bidirectional controls (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F,
U+061C), zero-width and joiner characters (U+200B-U+200D, U+2060, U+FEFF, U+034F), invisible
operators and deprecated format controls (U+2061-U+206F), the soft hyphen, Hangul and Khmer fillers,
Mongolian selectors, the line and paragraph separators, interlinear annotation marks, musical
format controls, variation selectors (U+FE00-U+FE0F, U+E0100-U+E01EF) and tag characters
(U+E0000-U+E007F), and the control characters other than tab and newline. An emoji's joiner or
variation selector is flagged too: a false alarm costs a glance, a missed one an approval.

Layer 2 (`nbagent.display`): the standard library only.
"""

from __future__ import annotations

import json
import re
import unicodedata

__all__ = ["INVISIBLE", "hidden_characters", "reveal", "reveal_json", "revealed_json"]

_RANGES = (
    (0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F),  # control characters (tab and newline stay)
    (0xAD, 0xAD), (0x34F, 0x34F), (0x61C, 0x61C), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB), (0x1D173, 0x1D17A), (0xE0000, 0xE007F),
    (0xE0100, 0xE01EF),
)
INVISIBLE = re.compile("[" + "".join(
    re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _RANGES
) + "]")
"""One character a reader cannot see (or that reorders what they see)."""


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _json_escape(ch: str) -> str:
    return json.dumps(ch)[1:-1]  # a character beyond U+FFFF: its surrogate pair, as JSON spells it


def hidden_characters(text: str) -> list[str]:
    """The invisible characters of `text`, each once, named (``"U+202E RIGHT-TO-LEFT OVERRIDE"``),
    in the order they first occur; empty for a text with none.

    >>> hidden_characters("abc\\u202edef\\u200b\\u202e")
    ['U+202E RIGHT-TO-LEFT OVERRIDE', 'U+200B ZERO WIDTH SPACE']
    """
    if INVISIBLE.search(text) is None:  # the common case: one scan
        return []
    found = dict.fromkeys(INVISIBLE.findall(text))
    return [f"U+{ord(ch):04X} {unicodedata.name(ch, 'CONTROL CHARACTER')}" for ch in found]


def reveal(text: str) -> str:
    """`text` with each invisible character replaced by its escape (Python's spelling: what the
    character means in a Python or JSON string literal).

    >>> reveal("if access != 'user\\u202e \\u2066// admin\\u2069 \\u2066':")
    "if access != 'user\\\\u202e \\\\u2066// admin\\\\u2069 \\\\u2066':"
    """
    if INVISIBLE.search(text) is None:
        return text
    return INVISIBLE.sub(lambda m: _escape(m.group()), text)


def reveal_json(text: str) -> str:
    """`reveal` for JSON text: the escapes are JSON's own (a character beyond U+FFFF as its
    surrogate pair), so the text still parses to the same value.

    >>> shown = reveal_json('{"to": "bob\\u200b@example.com"}')
    >>> shown, json.loads(shown) == {"to": "bob\\u200b@example.com"}
    ('{"to": "bob\\\\u200b@example.com"}', True)
    """
    return revealed_json(text)[0]


def revealed_json(text: str) -> tuple[str, list[str]]:
    """`reveal_json` and `hidden_characters` of `text` together (one scan when it has none)."""
    if INVISIBLE.search(text) is None:
        return text, []
    return INVISIBLE.sub(lambda m: _json_escape(m.group()), text), hidden_characters(text)
