"""What every HTTP provider does with its API key and its server's answers, with no SDK imported.

Owns `_Secret` (a key that never shows itself), `scrub` (the key taken out of any text or body),
`_safe_url` (credentials taken out of URLs), `ErrorSource` (what error mapping reads from a
model) and `parse_retry_after` (``retry-after-ms`` / ``Retry-After`` in seconds or as an HTTP
date). Shared by `models.openai` and `models.anthropic`; imports only the standard library.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

__all__ = ["ErrorSource", "_Secret", "_safe_url", "parse_retry_after", "scrub"]


class _Secret:
    """An API key that does not show itself in reprs, vars() dumps or tracebacks' locals."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


class ErrorSource(Protocol):
    """What the error mapping reads from the model that made the call."""

    provider: str
    model_name: str
    base_url: str | None
    _api_key: _Secret


def _safe_url(url: str | None) -> str | None:
    """The URL without user:password (some people put credentials there)."""
    if not url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def scrub(secret: _Secret, value: Any) -> Any:
    """`value` (text, or a body of dicts and lists) with the key replaced by ``***``."""
    key = secret.get()
    if len(key) < 8:
        return value
    if isinstance(value, str):
        return value.replace(key, "***")
    if isinstance(value, dict):
        return {k: scrub(secret, v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(secret, v) for v in value]
    return value


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP-date)."""
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
