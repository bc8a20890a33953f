"""The connection string: where the server is, shown without its password.

Owns splitting what a user gives (``postgresql://user:pw@host/db`` or libpq's ``key=value``
form) into a connection string without the password, which is safe to show in a repr, an error
or a log, and the password, which is handed to the driver only when a connection is made and is
kept in a `Secret` whose repr hides it. Imports the standard library and exceptions only (no
psycopg: nothing here needs the driver).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from ...exceptions import UserError

__all__ = ["Secret", "is_postgres_url", "split_password"]

_SCHEMES = ("postgresql://", "postgres://")
_KEY_VALUE = re.compile(r"\s*(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)")


class Secret:
    """A password: ``repr`` and ``str`` never show it; `reveal` does, for the driver only."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:  # pragma: no cover - a store pickles its URL instead
        raise TypeError("a Secret is not pickled")


def is_postgres_url(value: str) -> bool:
    """Whether `value` names a PostgreSQL server (``postgresql://`` or ``postgres://``)."""
    return value.strip().lower().startswith(_SCHEMES)


def split_password(conninfo: str) -> tuple[str, str | None]:
    """(the connection string without its password, the password or None).

    A URL loses the ``:password`` of its user part and any ``password=`` query parameter; a
    ``key=value`` string loses its ``password=`` pair. Everything else (host lists, options such
    as ``sslmode``) is kept as given.

    Raises:
        UserError: a URL whose user part cannot be read.
    """
    text = conninfo.strip()
    if is_postgres_url(text):
        return _split_url(text)
    password = None
    kept = []
    for match in _KEY_VALUE.finditer(text):
        key, value = match.group(1), match.group(2)
        if key == "password":
            password = _unquote_value(value)
        else:
            kept.append(f"{key}={value}")
    return " ".join(kept), password


def _split_url(url: str) -> tuple[str, str | None]:
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UserError(f"not a PostgreSQL URL ({exc}); expected postgresql://user@host:port/database") from None
    netloc, password = parts.netloc, None
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user, raw = userinfo.split(":", 1)
            password = unquote(raw)
            netloc = f"{user}@{hosts}"
    # The query is kept as given, but for its password: encoded again, "options=-c%20x" would
    # become "-c+x", and libpq does not read "+" as a space.
    kept = []
    for item in parts.query.split("&") if parts.query else []:
        pairs = parse_qsl(item, keep_blank_values=True)
        if pairs and pairs[0][0] == "password":
            password = pairs[0][1]
        else:
            kept.append(item)
    clean = urlunsplit((parts.scheme, netloc, parts.path, "&".join(kept), parts.fragment))
    return clean, password


def _unquote_value(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value
