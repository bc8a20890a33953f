"""Variables as prompt text: a capped summary, never the whole object.

A DataFrame gives its shape, dtypes, ``head(5)``, ``describe()`` and null counts; anything else
its ``repr``. Either is cut to a cap in tokens (`nbagent.context` estimate): 2,000 by default, or
`WINDOW_FRACTION` of the model's ``context_window`` when the model reports one. An exception
(``{Err}``) gives its traceback through the user's own code only: frames in the standard
library, in installed packages (IPython's included) or in compiled modules are left out, with a
line saying how many.
"""

from __future__ import annotations

import os
import re
import sysconfig
import traceback
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from ..context._estimate import text_tokens
from ..exceptions import UserError

__all__ = ["DEFAULT_CAP", "WINDOW_FRACTION", "cap_for", "interpolate", "summarize", "unknown_fields"]

DEFAULT_CAP = 2_000
"""Tokens a variable's summary may take when the model's window is unknown."""
WINDOW_FRACTION = 0.1
"""The share of a known ``context_window`` a variable's summary may take."""

_FIELD = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)(?:\[(-?\d+)\])?\}")
MAX_FRAMES = 5
"""The user's frames an exception's traceback keeps (the last ones)."""


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
    null counts, a string as it is, anything else its ``repr`` (a value that cannot be read is
    named, not raised); cut to `cap` tokens."""
    try:
        if _is_frame(value):
            text = _frame_text(value)
        elif isinstance(value, str):
            text = value
        else:
            text = repr(value)
    except Exception as exc:  # a broken __repr__ (or a dead weakref.proxy) must not break the prompt
        text = f"<{type(value).__name__}: could not be read: {exc!r}>"
    return _cut(text, cap)


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Where installed code lives: the standard library and every site-packages directory."""
    import site

    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {*getattr(site, "getsitepackages", list)(), site.getusersitepackages()}
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


def _is_users(filename: str) -> bool:
    """Is this frame's file the user's code: a cell (``<ipython-input-…>``, or ipykernel's file
    for it) or a file outside the installed code? A relative or ``<…>`` name that is no cell is a
    compiled or frozen module."""
    if filename.startswith("<ipython-input-"):
        return True
    if not os.path.isabs(filename):
        return False
    return not os.path.join(os.path.realpath(filename), "").startswith(_library_roots())


def _package(filename: str) -> str:
    """The package a library frame belongs to, for the "left out" line (``pandas``, ``IPython``)."""
    parts = re.split(r"[\\/]", filename)
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return parts[parts.index(marker) + 1].removesuffix(".py")
    if not os.path.isabs(filename) and not filename.startswith("<"):
        return parts[0]  # a compiled module's source, e.g. pandas/_libs/index.pyx
    return "the standard library"


def _error_text(error: BaseException | None) -> str:
    """An exception's traceback through the user's code (the last `MAX_FRAMES` of its frames)
    and the exception itself. The frames that ran the cell (IPython's) are left out unsaid; those
    the user's code called (pandas, the standard library) are counted and named on one line."""
    if error is None:
        return "(no error)"
    stack = traceback.extract_tb(error.__traceback__)
    first = next((i for i, frame in enumerate(stack) if _is_users(frame.filename)), len(stack))
    inner = stack[first:]
    users = [frame for frame in inner if _is_users(frame.filename)][-MAX_FRAMES:]
    kept = {id(frame) for frame in users}  # frames compare by value: a recursion repeats them
    dropped = [frame for frame in inner if id(frame) not in kept]
    lines = []
    if users:
        lines.append("Traceback (most recent call last):\n")
        lines.extend(traceback.StackSummary.from_list(users).format())
    if dropped:
        where = ", ".join(dict.fromkeys(_package(f.filename) if not _is_users(f.filename) else "your code"
                                        for f in dropped))
        lines.append(f"  [{len(dropped)} frame{'s' if len(dropped) != 1 else ''} left out: {where}]\n")
    lines.extend(traceback.format_exception_only(type(error), error))
    return "".join(lines).strip()


def unknown_fields(template: str, namespace: Mapping[str, Any]) -> list[str]:
    """The ``{name}`` fields of `template` that name nothing in `namespace`, as written (each
    once): `interpolate` leaves them unchanged, so a typo is sent as it was typed."""
    names = ((m.group(0), m.group(1)) for m in _FIELD.finditer(template))
    return list(dict.fromkeys(field for field, name in names if name not in (None, "Err") and name not in namespace))


def interpolate(template: str, namespace: Mapping[str, Any], *, cap: int = DEFAULT_CAP,
                errors: Mapping[int, BaseException] | None = None,
                last_error: BaseException | None = None,
                redact: Callable[[str, str], str] | None = None) -> str:
    """`template` with ``{var}``, ``{In[n]}``, ``{Out[n]}``, ``{Err}`` and ``{Err[n]}`` replaced
    (jupyter-ai's conventions); ``{{`` and ``}}`` are literal braces. A name not in `namespace`
    is left as written (`unknown_fields` lists them). `redact` (``Agent.context_redact``) edits
    each field's text, a variable's summary or an exception's traceback: ``redact(field, text)``
    with the field as written without braces (``df``, ``Out[3]``, ``Err``).

    Raises:
        KeyError: ``{In[n]}``, ``{Out[n]}`` or ``{Err[n]}`` names a cell that has none.
    """

    def one(match: re.Match[str]) -> str:
        whole, name, index = match.group(0), match.group(1), match.group(2)
        if whole in ("{{", "}}"):
            return whole[0]
        if name == "Err":
            if index is not None and (errors is None or int(index) not in errors):
                raise KeyError(f"{{Err[{index}]}}: cell {index} raised no exception")
            text = _cut(_error_text(last_error if index is None else errors[int(index)]), cap)  # type: ignore[index]
        elif name not in namespace:
            return whole
        else:
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
