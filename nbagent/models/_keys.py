"""What every HTTP provider does with its API key and its server's answers, with no SDK imported.

Owns `_Secret` (a key that never shows itself, and refuses to be pickled), `scrub` (the key taken
out of any text or body), `_safe_url` (credentials taken out of URLs), `ErrorSource` (what error
mapping reads from a model), `parse_retry_after` (``retry-after-ms`` / ``Retry-After`` in seconds
or as an HTTP date), and how a model travels to another process (a Ray or Dask worker of
``agent.map(..., executor=...)``): `travelling_state` (its configuration, without key, SDK clients
or locks) and `arriving_key` (the key read from that process's environment). Shared by
`models.openai` and `models.anthropic`; imports only the standard library and nbagent's exceptions.
"""

from __future__ import annotations

import email.utils
import os
import socket
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from ..exceptions import UserError

__all__ = ["ErrorSource", "Travelling", "_Secret", "_safe_url", "arriving_key", "parse_retry_after", "scrub",
           "travelling_state"]


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

    def __reduce__(self) -> Any:
        # A key never goes into a pickle (a Ray / Dask task, a cache): models travel without
        # theirs (`travelling_state`) and read it where they arrive (`arriving_key`).
        raise TypeError("an API key is never pickled; the model reads it from the environment where it arrives")


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


class Travelling:
    """Mixin of the HTTP providers' models: pickled as their configuration, so that
    ``agent.map(..., executor=...)`` can send an agent to Ray or Dask workers. The key, the
    per-loop SDK clients and the locks (`_per_process`) stay behind; where the model arrives its
    key is read from that process's `_key_variable` (`arriving_key`) and `_init_clients` makes
    the rest again. A model made with ``client=`` cannot travel (`travelling_state`)."""

    _key_variable = ""
    """The environment variable a model that arrives in another process reads its key from."""
    _key_placeholder: str | None = None
    """The key, when it is a placeholder for a server that needs none: it travels (a real key never does)."""
    _per_process: tuple[str, ...] = ("_api_key", "_clients", "_clients_lock", "_wire")

    def _init_clients(self) -> None:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        return travelling_state(self, self._per_process)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._api_key = arriving_key(self._key_placeholder, self._key_variable, repr(self))
        self._init_clients()


def travelling_state(model: Any, drop: tuple[str, ...]) -> dict[str, Any]:
    """A model's attributes for pickling (``__getstate__``): its configuration without the key,
    the per-loop SDK clients and the locks (the attributes named in `drop`).

    Raises:
        TypeError: the model was given an SDK client (``client=``) or an HTTP client
            (``http_client=``): they hold the key and open connections, and cannot travel.
    """
    if getattr(model, "_client", None) is not None or getattr(model, "_http_client", None) is not None:
        raise TypeError(
            f"{model!r} was made with client= or http_client=: an SDK client holds the API key and open "
            "connections and cannot be sent to another process; make the model from its name, base_url= "
            "and settings instead (the key is then read from the environment of each worker)"
        )
    return {name: value for name, value in vars(model).items() if name not in drop}


def arriving_key(placeholder: str | None, variable: str, what: str) -> _Secret:
    """The key of a model unpickled in this process (``__setstate__``): the `placeholder` it was
    made with when its server needs no key, else this process's `variable` (``OPENAI_API_KEY``).

    Raises:
        UserError: `variable` is not set here; the message says how each engine sets it.
    """
    if placeholder is not None:
        return _Secret(placeholder)
    key = os.environ.get(variable)
    if not key:
        raise UserError(
            f"{what} arrived in a process with no {variable} in its environment (host "
            f"{socket.gethostname()}, pid {os.getpid()}): API keys never travel with the agent. Set "
            f"{variable} where the workers run: Ray: ray.init(runtime_env={{'env_vars': {{'{variable}': ...}}}}); "
            "Dask: in the environment the workers start in (a LocalCluster inherits this kernel's)"
        )
    return _Secret(key)
