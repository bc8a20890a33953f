"""JupyterLab theme tokens, each with the plain value an untrusted notebook keeps, and `css`, the
one way nbagent's HTML writes a themed style declaration.

Owns `Token`, the token table (the constants below) and the builders `css` and `tint`.

nbagent's HTML takes its colours and fonts from JupyterLab's theme variables (``var(--jp-…)``,
each with a light-theme fallback for pages that do not define it: GitHub, nbviewer) and mixes
label tints with ``color-mix(…)``, so light, dark and high-contrast themes all read. A notebook
that was saved elsewhere (a clone, a download) opens untrusted, and JupyterLab then passes every
``text/html`` output through its sanitizer, which keeps only inline declarations whose values are
plain lengths, names and ``#hex`` / ``rgb()`` / ``rgba()`` colours: a declaration with a variable
is dropped, and with it the bubbles, labels, borders and muted text.

So each themed declaration is written after a plain one of the same property (`css`): a trusted
page reads the last declaration it understands, the themed one; the sanitizer drops that one and
keeps the plain one. Plain values do not know the theme, so they are chosen to read on light and
dark pages alike: greys with alpha instead of light greys, label tints as the label colour at
low alpha (``#rrggbbaa``, the shortest form the sanitizer keeps), and none at all for the
theme's text colour and fonts (the text inherits the page's). A value is written with its
fallback where it is built, never patched into finished HTML.

Pure strings; imports nothing from nbagent. Used by `nbagent.display.html` and the views.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "BRAND",
    "BROWN",
    "BUBBLE",
    "CHIP",
    "CODE_FONT",
    "CONTENT_FONT",
    "CONTENT_LINE_HEIGHT",
    "CONTENT_SIZE",
    "DARK_GREY",
    "DASHED_LINE",
    "ERROR",
    "GREY",
    "INFO",
    "LINE",
    "LINE_GREY",
    "MUTED_TEXT",
    "PURPLE",
    "STRONG_WARN",
    "SUCCESS",
    "TEXT",
    "UI_FONT",
    "WARN",
    "Token",
    "css",
    "tint",
]


class Token(NamedTuple):
    """A themed CSS value and its plain fallback.

    Attributes:
        themed: what a trusted page reads: theme variables (each with a light-theme fallback)
            or a ``color-mix``.
        plain: what JupyterLab's sanitizer keeps, read on light and dark pages alike; None where
            the page's own value is the right one (the theme's text colour, its fonts); the same
            as `themed` for a fixed colour.
    """

    themed: str
    plain: str | None

    def within(self, template: str) -> Token:
        """This token in a longer value, both ways: `template` with ``{}`` where the token goes.

        >>> LINE_GREY.within("1px solid {}")
        Token(themed='1px solid var(--jp-border-color2,#ddd)', plain='1px solid #7f7f7f59')
        """
        return Token(template.format(self.themed), None if self.plain is None else template.format(self.plain))


def _fixed(colour: str) -> Token:
    """A colour of nbagent's own (no theme variable): the same both ways."""
    return Token(colour, colour)


def _alpha(hex6: str, fraction: float) -> str:
    """``#rrggbb`` at `fraction` opacity, as ``#rrggbbaa``."""
    return f"{hex6}{round(fraction * 255):02x}"


_MID_GREY = "#7f7f7f"
"""The grey of the plain lines and veils: with alpha, it reads on white and on near-black."""

# --------------------------------------------------------------------------- the token table
TEXT = Token("var(--jp-ui-font-color1,#222)", None)
"""The theme's text colour (on a label's tint): plain, the text inherits the page's."""
MUTED_TEXT = Token("var(--jp-ui-font-color2,#666)", "gray")
"""Secondary text; a mid grey reads on white and on near-black."""
UI_FONT = Token("var(--jp-ui-font-family,system-ui,sans-serif)", None)
CONTENT_FONT = Token("var(--jp-content-font-family,system-ui,sans-serif)", None)
CODE_FONT = Token("var(--jp-code-font-family,monospace)", "monospace")
CONTENT_SIZE = Token("var(--jp-content-font-size1,14px)", "14px")
CONTENT_LINE_HEIGHT = Token("var(--jp-content-line-height,1.6)", "1.6")

LINE_GREY = Token("var(--jp-border-color2,#ddd)", _alpha(_MID_GREY, 0.35))
"""The colour of the frames and rules between rows."""
LINE = LINE_GREY.within("1px solid {}")
DASHED_LINE = Token("var(--jp-border-color1,#bbb)", _alpha(_MID_GREY, 0.55)).within("1px dashed {}")
"""The frame of a bubble that waits to be sent."""
NEST_LINE = Token("var(--jp-border-color1,#bbb)", _alpha(_MID_GREY, 0.55)).within("2px solid {}")
"""The rule down the left of a sub-agent's steps, under its agent call's row."""
BUBBLE = Token("var(--jp-layout-color2,#eef3fb)", _alpha(_MID_GREY, 0.12))
"""A user message's background: a grey veil over the page, plain."""
CHIP = Token("var(--jp-layout-color2,#eee)", _alpha(_MID_GREY, 0.12))
"""The background of inline code in a hint (a thread id, ``agent.resume(...)``)."""

# label colours: text, frames, and (through `tint`) a label's background
GREY = Token("var(--jp-border-color1,#9e9e9e)", _alpha(_MID_GREY, 0.55))
DARK_GREY = Token("var(--jp-border-color1,#757575)", _alpha(_MID_GREY, 0.55))
"""The same theme colour as `GREY` (a cancelled call's label), darker where no theme is defined."""
WARN = Token("var(--jp-warn-color1,#e67e00)", "#e67e00")
STRONG_WARN = Token("var(--jp-warn-color0,#b26b00)", "#b26b00")
"""Warning text on the page (the footer's context line over its threshold)."""
BRAND = Token("var(--jp-brand-color1,#1e6fd9)", "#1e6fd9")
SUCCESS = Token("var(--jp-success-color1,#2e7d32)", "#2e7d32")
ERROR = Token("var(--jp-error-color1,#c62828)", "#c62828")
INFO = Token("var(--jp-info-color1,#0097a7)", "#0097a7")
PURPLE = _fixed("#8e24aa")
BROWN = _fixed("#8d6e63")

_SURFACE = "var(--jp-layout-color1,#fff)"


def tint(colour: Token, percent: int = 22) -> Token:
    """A background of `colour` mixed into the theme's surface, so text in the theme's own colour
    reads on it in light, dark and high-contrast themes; plain, `colour` at `percent` opacity.

    >>> tint(WARN)
    Token(themed='color-mix(in srgb,var(--jp-warn-color1,#e67e00) 22%,var(--jp-layout-color1,#fff))', plain='#e67e0038')
    """
    if colour.plain is None or not colour.plain.startswith("#") or len(colour.plain) not in (7, 9):
        raise ValueError(f"a tint needs a #rrggbb plain colour, not {colour.plain!r}")
    return Token(f"color-mix(in srgb,{colour.themed} {percent}%,{_SURFACE})", _alpha(colour.plain[:7], percent / 100))


def css(prop: str, value: Token) -> str:
    """The declaration ``prop:value``: the themed value after its plain fallback (one declaration
    when there is no fallback or the two are the same).

    >>> css("border", LINE)
    'border:1px solid #7f7f7f59;border:1px solid var(--jp-border-color2,#ddd)'
    >>> css("color", TEXT)
    'color:var(--jp-ui-font-color1,#222)'
    >>> css("border-color", PURPLE)
    'border-color:#8e24aa'
    """
    if value.plain is None or value.plain == value.themed:
        return f"{prop}:{value.themed}"
    return f"{prop}:{value.plain};{prop}:{value.themed}"
