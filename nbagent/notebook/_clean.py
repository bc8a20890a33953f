"""`clean_outputs`: a saved notebook without its live widgets' outputs, so it reopens clean.

A live widget's output in a ``.ipynb`` file is only a reference to a widget model in the kernel
that drew it. JupyterLab and Notebook 7 reopen such a file with a new kernel, where that model is
gone, and draw ipywidgets' "Error displaying widget: model not found" in its place (unless the
widget state was saved with the notebook). A chat view writes a second output for this, a saved
copy of its conversation, so the reference adds nothing to the file. `clean_outputs` removes it
(and its plain-text stand-in) and keeps every other output as it is.

Plain JSON work on the file (no kernel, no nbformat): the file is written back the way JupyterLab
writes it (one-space indent, UTF-8, a final newline), so a clean file gives no spurious diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..exceptions import UserError

__all__ = ["WIDGET_VIEW", "clean_outputs"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
"""The MIME type of a live widget's output."""


def _without_views(outputs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    kept, removed = [], 0
    for output in outputs:
        data = output.get("data")
        if isinstance(data, dict) and WIDGET_VIEW in data:
            removed += 1
            del data[WIDGET_VIEW]
            data.pop("text/plain", None)  # the widget's repr, or nbagent's "copy below" line
            if not data:
                continue
        kept.append(output)
    return kept, removed


def clean_outputs(path: str | os.PathLike[str]) -> int:
    """Remove the live widgets' outputs from the saved notebook at `path` (in place) and return
    how many were removed; every other output stays, a chat view's saved copy among them.

    Use it on a notebook before you commit or share it: reopened in JupyterLab, the notebook then
    shows each conversation's saved copy instead of "Error displaying widget: model not found"
    above it. Save the notebook first (the file is what is cleaned), and reload it in JupyterLab
    afterwards (File > Reload Notebook from Disk)::

        from nbagent.notebook import clean_outputs
        clean_outputs("analysis.ipynb")

    Raises `UserError` when `path` is not a notebook file (missing, or not nbformat 4 JSON).
    """
    file = Path(path)
    try:
        notebook = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"clean_outputs: no notebook at {str(file)!r}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"clean_outputs: {str(file)!r} is not a notebook file (not JSON: {exc})") from None
    if not isinstance(notebook, dict) or notebook.get("nbformat") != 4 or not isinstance(notebook.get("cells"), list):
        raise UserError(f"clean_outputs: {str(file)!r} is not an nbformat 4 notebook")
    removed = 0
    for cell in notebook["cells"]:
        if isinstance(cell, dict) and isinstance(cell.get("outputs"), list):
            cell["outputs"], n = _without_views(cell["outputs"])
            removed += n
    if removed:
        file.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return removed
