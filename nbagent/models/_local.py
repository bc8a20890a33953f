"""`local_model`: an `OpenAIModel` on the bundled llama.cpp server (SmolLM2-135M-Instruct).

Owns the servers this process started or reuses (one per ``(port, threads, ctx)``) and
`LocalModel`, which starts the server again when it is gone. `nbagent.models.local` and
`nbagent.models.auto` import it lazily; `nbagent.models.openai` re-exports its names.

(A private module: named ``local.py`` it would, once imported, replace the function
`nbagent.models.local` with itself as an attribute of the package.)

May import: `nbagent.models.openai` (so ``openai``), `_llama_server` (lazily), the model base,
nbagent's exceptions.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from ..exceptions import ModelConnectionError, UserError
from .base import check_context_window
from .openai import OpenAIModel

__all__ = ["DEFAULT_CTX", "LOCAL_SETTINGS", "LocalModel", "local_model"]

LOCAL_SETTINGS: dict[str, Any] = {"temperature": 0, "max_tokens": 512}
"""Defaults for the bundled 135M model: deterministic, and a cap on its tendency to ramble."""

DEFAULT_CTX = 4096
"""The bundled server's context size in tokens (llama.cpp's ``n_ctx``) unless ``local(ctx=...)``."""

_local_servers: dict[tuple[Any, ...], Any] = {}
_local_lock = threading.Lock()


def local_model(
    *,
    settings: Mapping[str, Any] | None = None,
    port: int | None = None,
    threads: int | None = None,
    ctx: int | None = None,
    context_window: int | None = None,
    start_timeout: float = 240.0,
    **kwargs: Any,
) -> OpenAIModel:
    """An `OpenAIModel` on the bundled llama.cpp server with SmolLM2-135M-Instruct.

    Starts the server on first use (about a second once installed) and reuses it while it runs;
    it stops when the interpreter that started it exits. If it is gone when a request is made (the
    notebook kernel that started it was shut down while this one reused it), the request starts
    it again (`LocalModel`). Settings default to
    ``{"temperature": 0, "max_tokens": 512}``; yours are merged over them.

    The model is tiny: it calls a tool when asked explicitly ("Use the get_weather tool for
    Paris."), in every message of a conversation, and its answer repeats the tool's result; it
    is shown only the latest request (docs/local-model.md), its prose is weak, it copies patterns
    and it does not reason. Use it to try nbagent offline, not to judge an agent's quality.

    Args:
        settings: model settings merged over the defaults.
        port, threads: the server's port (default ``$NBAGENT_LOCAL_LLM_PORT`` or 18282) and CPU
            threads.
        ctx: the server's context size in tokens (llama.cpp's ``n_ctx``; default `DEFAULT_CTX`,
            4096): the model's `context_window`, known without asking the server.
        context_window: another name for `ctx` (give either, or both the same).
        start_timeout: seconds to wait for the server to start.
        **kwargs: passed to `OpenAIModel` (e.g. ``timeout``).
    """
    key = (port, threads, _ctx(ctx, context_window))
    server = _local_server(key, start_timeout)
    return LocalModel(
        kwargs.pop("model_name", "local-model"),
        base_url=server.base_url,
        api_key="local",
        provider=kwargs.pop("provider", "local"),
        settings={**LOCAL_SETTINGS, **(settings or {})},
        server_key=key,
        start_timeout=start_timeout,
        tool_images=kwargs.pop("tool_images", False),  # SmolLM2 is text-only: llama.cpp answers images with 500
        **kwargs,
    )


def _ctx(ctx: Any, context_window: Any) -> int:
    """The server's context size from ``local(ctx=..., context_window=...)``: one setting, two names."""
    size = check_context_window("local(ctx=...)", ctx)
    window = check_context_window("local(context_window=...)", context_window)
    if size is not None and window is not None and size != window:
        raise UserError(
            f"local(ctx={size}, context_window={window}): both name the server's context size; give one"
        )
    return size or window or DEFAULT_CTX


def _local_server(key: tuple[Any, ...], start_timeout: float) -> Any:
    """The running local server for ``(port, threads, ctx)``: this process's, one it reuses, or a
    new one."""
    from ._llama_server import start_server

    port, threads, ctx = key
    with _local_lock:
        server = _local_servers.get(key)
        if server is None or not server.is_running():
            server = start_server(port=port, threads=threads, ctx=ctx, timeout=start_timeout)
            _local_servers[key] = server
    return server


class LocalModel(OpenAIModel):
    """The `OpenAIModel` that `local_model` returns. When the bundled server is gone — the
    process that started it exited (another notebook's kernel shut down while this one reused
    it), or it was stopped — a request that cannot connect starts it again and is sent once more.
    Its `context_window` is the server's context size (``ctx`` of its ``server_key``).
    """

    def __init__(self, *args: Any, server_key: tuple[Any, ...], start_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._key_placeholder = self._api_key.get()  # the bundled server's fixed, non-secret key
        self._server_key = server_key
        self._start_timeout = start_timeout

    def batch_wire(self) -> None:
        """None: llama.cpp's server has no batch API (``agent.map(..., batch_api=True)`` refuses it)."""
        return None

    def _default_context_window(self) -> int | None:
        ctx = self._server_key[2] if len(self._server_key) > 2 else None
        return ctx if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0 else None

    async def _open(self, params: dict[str, Any], deadline: Any, *, stream: bool) -> Any:
        try:
            return await super()._open(params, deadline, stream=stream)
        except ModelConnectionError:
            if not await asyncio.to_thread(self._restart):
                raise
        await self.aclose()  # this loop's client pooled connections to the old server
        return await super()._open(params, deadline, stream=stream)

    def _restart(self) -> bool:
        """Start the server again if it is not running; True when it was started."""
        with _local_lock:
            old = _local_servers.get(self._server_key)
            if old is not None and old.is_running():
                return False  # it runs: the connection failed for another reason
        server = _local_server(self._server_key, self._start_timeout)
        if server.base_url != self.base_url:  # a free port (port=0) changes at each start
            self.base_url = server.base_url  # other loops' clients close when their loop ends
            with self._clients_lock:
                self._clients.clear()
        return True
