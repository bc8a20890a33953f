"""An HTTP provider's API key: held where it never shows, and scrubbed out of whatever leaves a call.

Owns `Secret` (a key that never shows itself, and refuses to be pickled), `scrub` (the key taken
out of any text or body), `scrub_error` (out of every field of a `ModelError`) and `safe_url`
(credentials taken out of URLs). How a model travels to another process without its key is
`models._travel`'s; Retry-After is `models._http_errors`'.

May import: the standard library and nbagent's exceptions only.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..exceptions import ModelError

__all__ = ["Secret", "safe_url", "scrub", "scrub_error"]


class Secret:
    """An API key that does not show itself in reprs, vars() dumps or tracebacks' locals."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        # A key never goes into a pickle (a Ray / Dask task, a cache): models travel without
        # theirs (`_travel.travelling_state`) and read it where they arrive (`_travel.arriving_key`).
        raise TypeError("an API key is never pickled; the model reads it from the environment where it arrives")


def safe_url(url: str | None) -> str | None:
    """The URL without user:password (some people put credentials there)."""
    if not url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def scrub(secret: Secret, value: Any) -> Any:
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


def scrub_error(secret: Secret, error: ModelError) -> ModelError:
    """`error` with the key taken out of its message, its ``args`` and every other field (``body``,
    a `ContentFilterError`'s ``explanation`` and ``text``...), in place; returned for convenience.

    Whatever part of a provider built the error (its error table, its stream reader quoting the
    server, nbagent's own checks), the key a server echoed never leaves the call
    (`HTTPModel` passes every error through here).
    """
    if len(secret.get()) < 8:
        return error
    for name, value in vars(error).items():
        if isinstance(value, (str, dict, list)):
            setattr(error, name, scrub(secret, value))
    error.args = tuple(scrub(secret, arg) for arg in error.args)
    return error
