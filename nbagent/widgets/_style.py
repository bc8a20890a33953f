"""`ViewStyle`: the chat view's stylesheet (``view.css``), loaded once per page with the view.

Owns the CSS that inline styles cannot carry: ipywidgets' colour traits take plain colours only,
so the tinted, theme-aware buttons (`tool_table.themed_button`) are styled by class. Everything
else in the view is inline-styled HTML from `nbagent._html`, which also reads the same in a saved
notebook. Imports anywidget only.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import ipywidgets as widgets

__all__ = ["VIEW_CSS", "ViewStyle"]

VIEW_CSS = Path(__file__).with_name("view.css").read_text(encoding="utf-8")


class ViewStyle(anywidget.AnyWidget):
    """An empty widget whose front end adds `VIEW_CSS` to the page (anywidget's ``_css``)."""

    _esm = "export default { render() {} };"
    _css = VIEW_CSS

    def __init__(self) -> None:
        super().__init__(layout=widgets.Layout(margin="0", height="0", overflow="hidden"))
