"""Plain colour fallbacks for saved HTML, so an untrusted notebook keeps its look.

Owns `with_plain_fallbacks`. nbagent's HTML takes its colours from JupyterLab's theme variables
(``var(--jp-…)``) and mixes label tints with ``color-mix(…)``. A notebook that was saved
elsewhere (a clone, a download) opens untrusted, and JupyterLab then passes every ``text/html``
output through its sanitizer, which keeps only inline declarations whose values are plain
lengths, names and ``#hex`` / ``rgb()`` / ``rgba()`` colours: every declaration with a variable
was dropped, so bubbles, labels, borders and the muted text all vanished.

`with_plain_fallbacks` writes, in front of each such declaration, the same property with a
plain value. A trusted page (and GitHub, nbviewer, any browser) reads the last declaration it
understands, the theme one; the sanitizer drops that one and keeps the plain one. The plain
values do not know the theme, so they are chosen to read on light and dark backgrounds alike:
greys with alpha instead of light greys, label tints as the label colour at low alpha, and no
fallback for the theme's main text colour (the text inherits the page's).

Pure string work (no imports beyond ``re``); used at the two places a saved output is made: the
static summary of a run and a chat view's saved copy.
"""

from __future__ import annotations

import re

__all__ = ["plain_value", "with_plain_fallbacks"]

_GREY = "127,127,127"
_NEUTRAL: dict[str, str | None] = {
    # the theme's own text colours: no plain value, the text inherits the page's
    "--jp-ui-font-color0": None,
    "--jp-ui-font-color1": None,
    "--jp-content-font-color0": None,
    "--jp-content-font-color1": None,
    # muted text: a mid grey reads on white and on near-black
    "--jp-ui-font-color2": "gray",
    "--jp-ui-font-color3": "gray",
    "--jp-content-font-color2": "gray",
    "--jp-content-font-color3": "gray",
    # surfaces: the page itself, or a grey veil over it
    "--jp-layout-color0": "transparent",
    "--jp-layout-color1": "transparent",
    "--jp-layout-color2": f"rgba({_GREY},.12)",
    "--jp-layout-color3": f"rgba({_GREY},.22)",
    "--jp-layout-color4": f"rgba({_GREY},.32)",
    # lines
    "--jp-border-color0": f"rgba({_GREY},.7)",
    "--jp-border-color1": f"rgba({_GREY},.55)",
    "--jp-border-color2": f"rgba({_GREY},.35)",
    "--jp-border-color3": f"rgba({_GREY},.25)",
}
"""Theme variables whose own fallback (a light-theme colour) would not read on a dark page."""

_STYLE = re.compile(r"""(\sstyle=(["']))(.*?)(\2)""")
_HEX = re.compile(r"#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})")
_RGBA = re.compile(r"rgba?\((\d{1,3}),(\d{1,3}),(\d{1,3})(,[^)]*)?\)")


def _call(text: str, name: str) -> tuple[int, int, str] | None:
    """The first ``name(…)`` in `text`: its start, its end and what is inside (balanced)."""
    start = text.find(name + "(")
    if start < 0:
        return None
    depth, i = 0, start + len(name)
    for i in range(start + len(name), len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return start, i + 1, text[start + len(name) + 1 : i]
    return None


def _split_top(text: str) -> list[str]:
    """`text` split at its top-level commas (not those inside parentheses)."""
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[last:i])
            last = i + 1
    parts.append(text[last:])
    return [p.strip() for p in parts]


def _rgb(colour: str) -> str | None:
    """``"r,g,b"`` of a ``#hex``, ``rgb()`` or ``rgba()`` colour, or None."""
    if (rgba := _RGBA.fullmatch(colour.strip())) is not None:
        return ",".join(rgba.group(1, 2, 3))
    match = _HEX.fullmatch(colour.strip())
    if not match:
        return None
    digits = match.group(1)
    if len(digits) == 3:
        digits = "".join(d * 2 for d in digits)
    return ",".join(str(int(digits[i : i + 2], 16)) for i in (0, 2, 4))


def plain_value(value: str) -> str | None:
    """`value` with every ``var()`` and ``color-mix()`` replaced by a plain, theme-neutral value,
    or None where there is none (the declaration is then best left to the page's own).

    >>> plain_value("1px solid var(--jp-border-color2,#ddd)")
    '1px solid rgba(127,127,127,.35)'
    >>> plain_value("color-mix(in srgb,var(--jp-warn-color1,#e67e00) 22%,var(--jp-layout-color1,#fff))")
    'rgba(230,126,0,.22)'
    >>> plain_value("var(--jp-ui-font-color1,#222)") is None
    True
    """
    while (found := _call(value, "var")) is not None:
        start, end, inside = found
        name, _, fallback = inside.partition(",")
        name = name.strip()
        plain = _NEUTRAL[name] if name in _NEUTRAL else (fallback.strip() or None)
        if plain is None:
            return None
        value = value[:start] + plain + value[end:]
    while (found := _call(value, "color-mix")) is not None:
        start, end, inside = found
        parts = _split_top(inside)  # "in srgb", "<colour> <p>%", "<surface>"
        colour, _, percent = parts[1].rpartition(" ") if len(parts) == 3 else ("", "", "")
        rgb = _rgb(colour)
        if rgb is None or not percent.endswith("%"):
            return None
        alpha = f"{float(percent[:-1]) / 100:.2f}".lstrip("0").rstrip("0").rstrip(".") or "0"
        value = value[:start] + f"rgba({rgb},{alpha})" + value[end:]
    return value


def _with_fallbacks(style: str) -> str:
    out: list[str] = []
    for declaration in style.split(";"):
        prop, colon, value = declaration.partition(":")
        if colon and ("var(" in value or "color-mix(" in value):
            plain = plain_value(value)
            if plain is not None and (not out or out[-1] != f"{prop}:{plain}"):  # once, if run twice
                out.append(f"{prop}:{plain}")
        out.append(declaration)
    return ";".join(out)


def with_plain_fallbacks(html: str) -> str:
    """`html` with a plain declaration written before each inline one that uses a theme variable
    or ``color-mix``, so that JupyterLab's sanitizer (an untrusted notebook) keeps a look close
    to the themed one, in light and dark themes.

    >>> with_plain_fallbacks('<div style="border:1px solid var(--jp-border-color2,#ddd)">x</div>')
    '<div style="border:1px solid rgba(127,127,127,.35);border:1px solid var(--jp-border-color2,#ddd)">x</div>'
    """
    if "var(" not in html and "color-mix(" not in html:
        return html
    return _STYLE.sub(lambda m: m.group(1) + _with_fallbacks(m.group(3)) + m.group(4), html)
