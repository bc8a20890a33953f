"""Untrusted text -> safe HTML: Markdown through markdown-it-py + nh3, everything else escaped.

Owns the only ways model text, tool arguments and tool results reach HTML in nbagent's views
and static summaries: `markdown_html` (Markdown rendered, then sanitized with an allow-list),
`rich_html` (a tool result's own ``_repr_html_``, e.g. a pandas DataFrame, cut down to table and
text markup) and `escape` (plain text). Imports markdown-it-py and nh3 lazily; without them
Markdown is shown as escaped plain text and rich HTML is not shown, which is still safe.

Why both libraries: markdown-it with ``html=False`` already escapes raw HTML and refuses
``javascript:`` links, but a sanitizer with an allow-list (tags, attributes, URL schemes) on its
output means a markdown-it bug or a rule we enable later cannot open a hole.
"""

from __future__ import annotations

import html as _html
import re
from functools import lru_cache
from typing import Any

__all__ = ["ALLOWED_TAGS", "ALLOWED_URL_SCHEMES", "RICH_TAGS", "escape", "markdown_html", "rich_html"]

ALLOWED_TAGS = frozenset({
    "a", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "i", "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
})
"""No img (remote images track the reader; data: images are a common smuggling route), no style,
script, iframe, svg, form or input."""

ALLOWED_URL_SCHEMES = frozenset({"http", "https", "mailto"})

_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align", "style"}, "td": {"align", "style"}}
"""``style`` on table cells keeps only ``text-align`` (a Markdown column's alignment)."""
_CELL_WITHOUT_STYLE = re.compile(r"<(t[dh])((?:\s(?!style=)[^>]*)?)>")

RICH_TAGS = ALLOWED_TAGS | frozenset({
    "caption", "col", "colgroup", "div", "small", "span", "sub", "sup", "tfoot",
})
"""What a tool result's ``_repr_html_`` may keep: table and text markup (a DataFrame's table, its
index and header levels, a caption). No img, style, class or id: the view styles it."""

_RICH_ATTRIBUTES = {"a": {"href", "title"}, "th": {"colspan", "rowspan"}, "td": {"colspan", "rowspan"},
                    "col": {"span"}, "colgroup": {"span"}, "ol": {"start"}}


def escape(text: Any) -> str:
    """Plain text -> HTML text (``& < > " '`` escaped). Non-strings are converted with ``str``.

    >>> escape('<b onclick="x()">hi</b>')
    '&lt;b onclick=&quot;x()&quot;&gt;hi&lt;/b&gt;'
    """
    return _html.escape("" if text is None else str(text), quote=True)


@lru_cache(maxsize=1)
def _renderer() -> Any:
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # pragma: no cover - the notebook extra is not installed
        return None
    # breaks: a newline in a paragraph stays a line break, as in the user's bubble and the streaming
    # preview (stream.js); models write "Totals:\nEast 27\nNorth 51" meaning three lines.
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "breaks": True})
    md.enable(["table", "strikethrough"])

    def image(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        # An image becomes a link to it (sanitized below), so nothing is fetched on render.
        token = tokens[idx]
        alt = self.renderInlineAsText(token.children or [], options, env) or "image"
        src = token.attrGet("src") or ""
        return f'<a href="{escape(src)}">[image: {escape(alt)}]</a>'

    md.add_render_rule("image", image)
    return md


def _clean(fragment: str, tags: frozenset[str] = ALLOWED_TAGS,
           attributes: dict[str, set[str]] = _ATTRIBUTES, **options: Any) -> str:
    """`fragment` cut down to `tags` and `attributes`, links to `ALLOWED_URL_SCHEMES` only."""
    import nh3

    cleaned: str = nh3.clean(
        fragment,
        tags=set(tags),
        attributes={k: set(v) for k, v in attributes.items()},
        url_schemes=set(ALLOWED_URL_SCHEMES),
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
        clean_content_tags={"script", "style"},
        **options,
    )
    return cleaned


def _aligned_cells(html: str) -> str:
    """Every table cell states its alignment (left unless the Markdown said otherwise): a host's
    CSS (JupyterLab right-aligns cells of rendered HTML) cannot move it. Runs on nh3's output,
    whose tags and attributes are normalised."""
    return _CELL_WITHOUT_STYLE.sub(r'<\1\2 style="text-align:left">', html) if "<t" in html else html


def rich_html(html: str | None) -> str | None:
    """A tool result's own HTML (``_repr_html_``: a pandas DataFrame, a Styler...) cut down to
    `RICH_TAGS` with no style, class, id or event attribute, links to http(s)/mailto only;
    None when nothing visible is left, or without nh3 (then the view shows the text only).

    >>> rich_html('<table onclick="x()" style="color:red"><tr><td>1</td></tr></table><script>alert(1)</script>')
    '<table><tbody><tr><td>1</td></tr></tbody></table>'
    """
    if not html or not isinstance(html, str):
        return None
    try:
        import nh3
    except ImportError:  # pragma: no cover - the notebook extra is not installed
        return None
    cleaned = _clean(html, RICH_TAGS, _RICH_ATTRIBUTES).strip()
    if not nh3.clean(cleaned, tags=set()).strip():  # markup with no text (a script-only widget)
        return None
    return cleaned


def markdown_html(text: str | None) -> str:
    """Render untrusted Markdown to sanitized HTML (safe to insert with innerHTML).

    Raw HTML in the text is shown as text, links keep only http(s)/mailto URLs, images become
    links, and no attribute that can run code (``on*``, ``style``, ``src``) survives.

    >>> markdown_html("**bold** <img src=x onerror=alert(1)> [link](javascript:alert(1))").strip()
    '<p><strong>bold</strong> &lt;img src=x onerror=alert(1)&gt; [link](javascript:alert(1))</p>'
    """
    if not text:
        return ""
    md = _renderer()
    if md is None:
        return f'<div style="white-space:pre-wrap">{escape(text)}</div>'
    try:
        import nh3  # noqa: F401
    except ImportError:  # pragma: no cover
        return f'<div style="white-space:pre-wrap">{escape(text)}</div>'
    return _aligned_cells(_clean(md.render(text), filter_style_properties={"text-align"}))
