"""The notebook as context: ``%%agent`` / ``%agent`` magics, variables as capped summaries,
read-only query tools over a DataFrame (`dataframe_tools`), and `python_tool` (a tool that runs
the model's code in the kernel, after approval); `clean_outputs`, which takes the live
widgets' outputs out of a saved notebook so it reopens without "model not found"; and `settle`
(``await settle()``, the last cell of a notebook executed headless and saved: the runs end, and
the chat views' saved copies reach the file).

``%load_ext nbagent`` (or ``import nbagent.notebook`` inside IPython) registers the magics; see
docs/notebook.md. This edge imports IPython only when the magics are registered, and pandas and
pydantic only when `dataframe_tools` is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._settle import settle
from ._clean import clean_outputs
from ._context import DEFAULT_CAP, WINDOW_FRACTION, cap_for, interpolate, summarize, unknown_fields
from ._magics import AgentMagics, load_ipython_extension, magics_of
from ._python_tool import python_tool

if TYPE_CHECKING:
    from ._dataframe_tools import dataframe_tools

__all__ = ["DEFAULT_CAP", "WINDOW_FRACTION", "AgentMagics", "cap_for", "clean_outputs", "dataframe_tools",
           "interpolate", "load_ipython_extension", "magics_of", "python_tool", "settle", "summarize",
           "unknown_fields"]


def __getattr__(name: str) -> Any:
    """`dataframe_tools` loads pandas, so it is imported when first asked for."""
    if name == "dataframe_tools":
        from ._dataframe_tools import dataframe_tools

        return dataframe_tools
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"dataframe_tools"})


def _register_in_running_shell() -> None:
    """Register the magics in the IPython shell that imports this module, if there is one."""
    import sys

    if "IPython" not in sys.modules:
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        load_ipython_extension(shell)


_register_in_running_shell()
