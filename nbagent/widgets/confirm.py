"""`ConfirmBox`: a forecast with Run and Cancel buttons, for work that waits for a person's yes.

Owns the box that ``agent.map(rows, confirm_over=...)`` shows when its forecast passes the limit
(`nbagent.evals.BatchConfirmation` makes one): the forecast as HTML, **Run** and **Cancel**, a
status line, an output area for what the run shows (a click's output has no cell of its own), and
a `ViewFrame` (the stylesheet that tints Run like the chat view's buttons). What is confirmed is
any `Confirmable`: this module knows nothing of how a batch runs or is forecast, so the views
stay below the evals that use them (never the other way).

Imports ipywidgets and the sibling `frame` and `tool_table`.
"""

from __future__ import annotations

import html
from typing import Any, Protocol

import ipywidgets as widgets

from .frame import ViewFrame
from .tool_table import themed_button

__all__ = ["ConfirmBox", "Confirmable"]


class Confirmable(Protocol):
    """What a `ConfirmBox` confirms (`nbagent.evals.BatchConfirmation`)."""

    @property
    def status(self) -> str:
        """``waiting`` while the buttons may be clicked; anything else disables them."""

    def summary(self) -> str:
        """One line: where the work stands (the box's status line)."""

    def run(self) -> Any:
        """Do the work (Run)."""

    def cancel(self) -> None:
        """Do not do it (Cancel)."""


class ConfirmBox(widgets.VBox):
    """The forecast (`forecast_html`, shown as given: escape what it holds), Run and Cancel, a
    status line and the run's output, for `pending`.

    Children, in order: the forecast (HTML), the buttons (an HBox: Run, Cancel), the status line
    (HTML), the output area of the run, the `ViewFrame`. A click only calls ``pending.run()`` or
    ``pending.cancel()``; an error Run raises is said on the status line (a click has no caller
    to raise to).
    """

    def __init__(self, pending: Confirmable, forecast_html: str) -> None:
        self.pending = pending
        self.run_button = themed_button("Run", "primary", "run the whole batch")
        self.cancel_button = themed_button("Cancel", "", "do not run the batch")
        self.status = widgets.HTML()
        self.run_button.on_click(lambda _: self.run())
        self.cancel_button.on_click(lambda _: self.cancel())
        self.output = widgets.Output()  # what the run shows (its progress bar) goes under the buttons
        frame = ViewFrame("")  # loads view.css, which tints Run as the chat view's Send
        frame.notice = "kernel restarted: run this cell again"
        super().__init__([widgets.HTML(forecast_html), widgets.HBox([self.run_button, self.cancel_button]),
                          self.status, self.output, frame])
        self.add_class("nbagent-confirm")
        self.refresh()

    def refresh(self) -> None:
        """Show where `pending` stands: the buttons work only while it waits."""
        waiting = self.pending.status == "waiting"
        self.run_button.disabled = self.cancel_button.disabled = not waiting
        self.status.value = f"<small class='mathjax_ignore'>{html.escape(self.pending.summary())}</small>"

    def run(self) -> None:
        """Run was clicked: run, its output under the buttons; a failure is said, not raised."""
        self.run_button.disabled = self.cancel_button.disabled = True
        self.status.value = "<small>running...</small>"
        try:
            with self.output:
                self.pending.run()
        except Exception as exc:  # a click has no caller to raise to: say it under the buttons
            self.refresh()
            self.status.value = f"<small>failed: {html.escape(f'{type(exc).__name__}: {exc}')}</small>"
            return
        self.refresh()

    def cancel(self) -> None:
        """Cancel was clicked."""
        self.pending.cancel()
        self.refresh()
