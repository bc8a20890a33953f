"""Reading fields of a provider's answer, one way for every provider: an SDK's (pydantic) object
and the plain dict of the same JSON read alike.

Owns `field` (a field, or None), `extras` (the fields an SDK's model does not declare), `count`
(a token count, or 0) and `positive` (a positive count, or None). Sans-IO and SDK-free: the stream
readers and error tables of `models.openai`, `models.anthropic` and any new provider use them.

The rules, which the providers' readers once each wrote their own way:

- A field the SDK's model does not declare (``reasoning_content``, ``x_groq``, an error event's
  ``message`` parsed as a chunk) is read from the model's extras (``__pydantic_extra__``) when the
  attribute itself gives nothing, so a field reads the same on the object as on its dict.
- A count is an ``int`` and never a ``bool``: JSON ``true`` is no token count (Python's ``True``
  is an int, and would count as 1).

May import: the standard library only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["count", "extras", "field", "positive"]


def field(obj: Any, name: str) -> Any:
    """Field `name` of an SDK object or a plain dict (extras included), or None."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "__pydantic_extra__", None)
        if extra:
            value = extra.get(name)
    return value


def extras(obj: Any) -> dict[str, Any]:
    """The fields of an SDK object its model does not declare (a copy; {} for anything else)."""
    return dict(getattr(obj, "__pydantic_extra__", None) or {})


def count(value: Any) -> int:
    """`value` as a token count: an int that is not a bool, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def positive(value: Any) -> int | None:
    """`value` when it is a positive count (an int, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
