"""Variables as prompt text: a capped summary, never the whole object.

A DataFrame gives its shape, dtypes, ``head(5)``, ``describe()`` and null counts; anything else
its ``repr``. Either is cut to a cap in tokens (`nbagent.context` estimate): 2,000 by default, or
`WINDOW_FRACTION` of the model's ``context_window`` when the model reports one.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from ..context._estimate import text_tokens
from ..exceptions import UserError

__all__ = ["DEFAULT_CAP", "WINDOW_FRACTION", "cap_for", "interpolate", "summarize"]

DEFAULT_CAP = 2_000
"""Tokens a variable's summary may take when the model's window is unknown."""
WINDOW_FRACTION = 0.1
"""The share of a known ``context_window`` a variable's summary may take."""

_FIELD = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)(?:\[(-?\d+)\])?\}")


def cap_for(model: Any) -> int:
    """The token cap of one variable's summary for `model` (see the module docstring)."""
    window = getattr(model, "context_window", None)
    if isinstance(window, int) and window > 0:
        return max(100, int(window * WINDOW_FRACTION))
    return DEFAULT_CAP


def _cut(text: str, cap: int) -> str:
    """`text`, cut to about `cap` tokens, with a note saying how much was left out."""
    if text_tokens(text) <= cap:
        return text
    low, high = 0, len(text)
    while low < high:  # the longest prefix within the cap
        mid = (low + high + 1) // 2
        if text_tokens(text[:mid]) <= cap:
            low = mid
        else:
            high = mid - 1
    return f"{text[:low]}\n… [cut: {len(text) - low:,} of {len(text):,} characters left out]"


def _is_frame(value: Any) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "dtypes") and hasattr(value, "describe")


def _frame_text(df: Any) -> str:
    rows, cols = df.shape
    try:
        described = df.describe(include="all").to_string()
    except (ValueError, TypeError):  # no columns to describe
        described = "(nothing to describe)"
    parts = [
        f"DataFrame: {rows:,} rows x {cols:,} columns",
        "dtypes:\n" + df.dtypes.to_string(),
        "head(5):\n" + df.head(5).to_string(),
        "describe():\n" + described,
        "null counts:\n" + df.isnull().sum().to_string(),
    ]
    return "\n\n".join(parts)


def summarize(value: Any, cap: int = DEFAULT_CAP) -> str:
    """The text sent for `value`: a DataFrame's schema, shape, ``head(5)``, ``describe()`` and
    null counts, a string as it is, anything else its ``repr``; cut to `cap` tokens."""
    if _is_frame(value):
        text = _frame_text(value)
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = repr(value)
        except Exception as exc:  # a broken __repr__ must not break the prompt
            text = f"<{type(value).__name__}: repr failed: {exc!r}>"
    return _cut(text, cap)


def _error_text(error: BaseException | None) -> str:
    """An exception's traceback, shortened to its last frames."""
    if error is None:
        return "(no error)"
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    return "".join(lines[-4:]).strip()


def interpolate(template: str, namespace: Mapping[str, Any], *, cap: int = DEFAULT_CAP,
                errors: Mapping[int, BaseException] | None = None,
                last_error: BaseException | None = None,
                redact: Callable[[str, str], str] | None = None) -> str:
    """`template` with ``{var}``, ``{In[n]}``, ``{Out[n]}``, ``{Err}`` and ``{Err[n]}`` replaced
    (jupyter-ai's conventions); ``{{`` and ``}}`` are literal braces. A name not in `namespace`
    is left as written. `redact` (``Agent.context_redact``) edits each variable's summary:
    ``redact(field, text)`` with the field as written without braces (``df``, ``Out[3]``).

    Raises:
        KeyError: ``{In[n]}``, ``{Out[n]}`` or ``{Err[n]}`` names a cell that has none.
    """

    def one(match: re.Match[str]) -> str:
        whole, name, index = match.group(0), match.group(1), match.group(2)
        if whole in ("{{", "}}"):
            return whole[0]
        if name == "Err":
            if index is None:
                return _error_text(last_error)
            if errors is None or int(index) not in errors:
                raise KeyError(f"{{Err[{index}]}}: cell {index} raised no exception")
            return _error_text(errors[int(index)])
        if name not in namespace:
            return whole
        value = namespace[name]
        if index is not None:
            try:
                value = value[int(index)]
            except (KeyError, IndexError, TypeError):
                raise KeyError(f"{whole}: there is no {name}[{index}]") from None
        text = summarize(value, cap)
        if redact is not None:
            text = redact(whole[1:-1], text)
            if not isinstance(text, str):
                raise UserError(f"context_redact must return the text to send (a str), got {type(text).__name__}")
        return text

    return _FIELD.sub(one, template)
