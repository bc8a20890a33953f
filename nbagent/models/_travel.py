"""How an HTTP provider's model travels to another process: pickled as its configuration, never
with its key.

Owns `Travelling` (the mixin `HTTPModel` takes its ``__getstate__`` / ``__setstate__`` from), so
that ``agent.map(..., executor=...)`` can send an agent to Ray or Dask workers;
`travelling_state` (a model's configuration, without key, SDK clients or locks) and
`arriving_key` (the key read from the arriving process's environment).

May import: the standard library, nbagent's exceptions and `models._keys`.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ..exceptions import UserError
from ._keys import Secret

__all__ = ["Travelling", "arriving_key", "travelling_state"]


class Travelling:
    """Pickled as the model's configuration. The key, the per-loop SDK clients and the locks
    (`_per_process`) stay behind; where the model arrives its key is read from that process's
    `key_variable` (`arriving_key`) and `_init_clients` makes the rest again. A model made with
    ``client=`` cannot travel (`travelling_state`)."""

    key_variable = ""
    """The environment variable the key is read from (``OPENAI_API_KEY``), here and where a
    pickled model arrives."""
    _key_placeholder: str | None = None
    """The key, when it is a placeholder for a server that needs none: it travels (a real key never does)."""
    _per_process: tuple[str, ...] = ("_api_key", "_clients", "_clients_lock")
    _api_key: Secret

    def _init_clients(self) -> None:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        return travelling_state(self, self._per_process)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._api_key = arriving_key(self._key_placeholder, self.key_variable, repr(self))
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


def arriving_key(placeholder: str | None, variable: str, what: str) -> Secret:
    """The key of a model unpickled in this process (``__setstate__``): the `placeholder` it was
    made with when its server needs no key, else this process's `variable` (``OPENAI_API_KEY``).

    Raises:
        UserError: `variable` is not set here; the message says how each engine sets it.
    """
    if placeholder is not None:
        return Secret(placeholder)
    key = os.environ.get(variable)
    if not key:
        raise UserError(
            f"{what} arrived in a process with no {variable} in its environment (host "
            f"{socket.gethostname()}, pid {os.getpid()}): API keys never travel with the agent. Set "
            f"{variable} where the workers run: Ray: ray.init(runtime_env={{'env_vars': {{'{variable}': ...}}}}); "
            "Dask: in the environment the workers start in (a LocalCluster inherits this kernel's)"
        )
    return Secret(key)
