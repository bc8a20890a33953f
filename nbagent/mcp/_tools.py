"""`MCPTools`: an MCP server as a tool source of an agent.

Owns `MCPTools`, the public face: its constructors (`MCPTools.stdio`, `MCPTools.http`), the
`nbagent.ToolSource` methods the run loop uses (`cached_tools`, `list_tools`), direct calls,
and the lifecycle (connect on first use, reuse, ``async with``, `close`, a dead server started
again). Everything touching the connection runs on the owner loop (`_owner.on_owner`). Imports
nbagent's exceptions, tools and sync helper, and the package's `_adapt`, `_owner`, `_session`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import IO, Any

from .._sync import run_sync
from ..exceptions import ToolSourceError, UserError
from ..tools import Tool
from ._adapt import ApprovalSetting, adapt, check_setting, result_value, signature
from ._owner import on_owner, register, unregister
from ._session import ServerSpec, Session, safe_url

__all__ = ["MCPTools"]


def _strings(what: str, value: Mapping[str, str] | None) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise UserError(f"{what} must be a dict of strings to strings")
    return dict(value)


class MCPTools:
    """The tools of an MCP server, for ``Agent(tools=[...])``. Build one with `stdio` or `http`.

    ```python
    notes = MCPTools.stdio("python", ["-m", "nbagent.mcp.examples.notes"], prefix="notes")
    agent = Agent(model, tools=[get_weather, notes])
    ```

    The server is reached when a run first needs its tools, and the connection is kept for the
    later runs of the process (the notebook kernel); it is closed at interpreter exit, or by
    `close` / ``async with notes:``. A stdio server that dies is started again for the next
    call (the call that was running gets an error result). Connections live on nbagent's own
    background loop, so the same server serves ``await agent.run``, ``run_sync``, the chat
    view and ``agent.map``.

    Attributes:
        prefix: put before each tool's name (``prefix_toolname``), to keep two servers' tools apart.
        timeout: seconds a call may take before its result is an error the model sees.
        connect_timeout: seconds to start or reach the server and list its tools.
    """

    def __init__(self, spec: ServerSpec, *, prefix: str | None = None, requires_approval: ApprovalSetting = None,
                 timeout: float = 60.0, connect_timeout: float = 30.0) -> None:
        if prefix is not None and (not isinstance(prefix, str) or not prefix):
            raise UserError(f"prefix must be a non-empty string, got {prefix!r}")
        for what, seconds in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if not isinstance(seconds, (int, float)) or seconds <= 0:
                raise UserError(f"{what} must be a positive number of seconds, got {seconds!r}")
        self._spec = spec
        self.prefix = prefix
        self.requires_approval = check_setting(requires_approval)
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self._session: Session | None = None
        self._lock: asyncio.Lock | None = None
        self._list_lock: asyncio.Lock | None = None
        self._tools: tuple[Tool, ...] | None = None
        self._signatures: tuple[Any, ...] = ()
        self._last: tuple[Tool, ...] | None = None
        self._secrets = spec.secrets
        self._changes = 0
        self._pid = os.getpid()

    # ------------------------------------------------------------------ constructors
    @classmethod
    def stdio(cls, command: str, args: Sequence[str] = (), *, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None, prefix: str | None = None,
              requires_approval: ApprovalSetting = None, timeout: float = 60.0, connect_timeout: float = 30.0,
              errlog: IO[str] | None = None) -> MCPTools:
        """A server nbagent starts as a subprocess and talks to over its stdin and stdout.

        Args:
            command: the program, e.g. ``"python"``, ``"npx"``, ``"uvx"``.
            args: its arguments.
            env: environment variables for the server. It gets these and the few the ``mcp``
                SDK considers safe (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``,
                ``USER``), nothing else of this process's environment. Never shown or stored.
            cwd: its working directory.
            prefix: put before its tools' names (``prefix_name``).
            requires_approval: True / False, ``{tool name: bool}``, ``callable(name, args)``, or
                None: the tools' annotations decide (see `nbagent.mcp`).
            timeout: seconds a call may take.
            connect_timeout: seconds to start the server and list its tools.
            errlog: where the server's stderr goes; default: a temporary file whose last lines
                appear in errors.
        """
        if not isinstance(command, str) or not command:
            raise UserError("MCPTools.stdio needs the command that starts the server, e.g. 'python'")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise UserError("args must be a list of strings, e.g. ['-m', 'my_server']")
        spec = ServerSpec("stdio", command=command, args=tuple(args), env=_strings("env", env),
                          cwd=os.fspath(cwd) if cwd is not None else None, errlog=errlog)
        return cls(spec, prefix=prefix, requires_approval=requires_approval, timeout=timeout,
                   connect_timeout=connect_timeout)

    @classmethod
    def http(cls, url: str, *, headers: Mapping[str, str] | None = None, prefix: str | None = None,
             requires_approval: ApprovalSetting = None, timeout: float = 60.0,
             connect_timeout: float = 30.0) -> MCPTools:
        """A server reached over streamable HTTP at `url` (e.g. ``http://127.0.0.1:8000/mcp``).

        Args:
            url: the server's MCP endpoint.
            headers: sent with every request, e.g. ``{"Authorization": "Bearer ..."}``; their
                values are never shown or stored.
            prefix, requires_approval, timeout, connect_timeout: as for `stdio`.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UserError(f"MCPTools.http needs an http:// or https:// URL, got {safe_url(str(url))!r}")
        spec = ServerSpec("http", url=url, headers=_strings("headers", headers))
        return cls(spec, prefix=prefix, requires_approval=requires_approval, timeout=timeout,
                   connect_timeout=connect_timeout)

    # ------------------------------------------------------------------ the ToolSource protocol
    def cached_tools(self) -> tuple[Tool, ...] | None:
        """The tools as last listed; None before the first listing and after the server said
        its list changed (or was started again)."""
        return self._tools

    async def list_tools(self) -> tuple[Tool, ...]:
        """The server's tools (connecting on first use), as `Tool`s.

        Raises:
            ToolSourceError: the server cannot be started or reached, or cannot list its tools.
            ToolDefinitionError: a tool's name (with the prefix) is not one models accept.
        """
        return await on_owner(self._list_on_owner())

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """Call tool `name` (its name on the server) directly; returns what a model would see.

        Raises:
            ModelRetry: the server answered with an error (``isError``).
            TimeoutError: no answer within `timeout`.
            ToolSourceError: the server cannot be reached, or stopped during the call.
        """
        return await self._call(name, dict(arguments or {}))

    # ------------------------------------------------------------------ lifecycle
    async def connect(self) -> MCPTools:
        """Start (or reach) the server now and list its tools, instead of on first use."""
        await self.list_tools()
        return self

    async def close(self) -> None:
        """Close the connection (a stdio server is stopped). A later run connects again."""
        await on_owner(self._close_on_owner())

    def close_sync(self) -> None:
        """`close` from sync code."""
        run_sync(self.close)

    async def __aenter__(self) -> MCPTools:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """Whether a connection to the server is open now."""
        return self._session is not None and not self._session.dead

    def __repr__(self) -> str:
        spec = self._spec
        if spec.kind == "stdio":
            parts = [repr(spec.command)] + ([repr(list(spec.args))] if spec.args else [])
            if spec.env:
                parts.append(f"env={sorted(spec.env)!r}")  # the names only: values are secrets
            if spec.cwd:
                parts.append(f"cwd={spec.cwd!r}")
        else:
            parts = [repr(safe_url(spec.url))]
            if spec.headers:
                parts.append(f"headers={sorted(spec.headers)!r}")
        if self.prefix:
            parts.append(f"prefix={self.prefix!r}")
        return f"MCPTools.{spec.kind}({', '.join(parts)})"

    # ------------------------------------------------------------------ on the owner loop
    def _forget_if_forked(self) -> None:
        """In a forked child, drop the parent's connection and locks: they are not ours to use."""
        if self._pid != os.getpid():
            self._pid, self._session, self._lock, self._list_lock = os.getpid(), None, None, None

    async def _ready(self) -> Session:
        """The live session, opening one (again) when there is none or the server died."""
        self._forget_if_forked()
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            session = self._session
            if session is not None and not session.dead:
                return session
            restart = session is not None
            if session is not None:
                self._session = None
                await session.close()
            session = Session(self._spec, self._tools_changed)
            await session.open(self.connect_timeout)
            self._session = session
            register(self)
            if restart:  # a new server process may list other tools: list them again
                self._tools_changed()
            return session

    def _tools_changed(self) -> None:
        self._changes += 1
        self._tools = None

    async def _list_on_owner(self) -> tuple[Tool, ...]:
        if self._tools is not None:
            return self._tools
        self._forget_if_forked()
        if self._list_lock is None:
            self._list_lock = asyncio.Lock()
        async with self._list_lock:  # runs starting together (agent.map) list once
            if self._tools is not None:
                return self._tools
            return await self._list_now()

    async def _list_now(self) -> tuple[Tool, ...]:
        for attempt in (1, 2):  # a server that died while idle is noticed here: start it again once
            session = await self._ready()
            changes = self._changes
            try:
                listed = await session.list_tools(self.connect_timeout)
                break
            except ToolSourceError:
                if attempt == 2 or not session.dead:
                    raise
        sig = tuple(signature(t) for t in listed)
        if sig == self._signatures and self._last is not None:
            tools = self._last  # unchanged: the same object, so a run's merged tools are reused
        else:
            source = self._spec.describe()
            tools = tuple(adapt(t, prefix=self.prefix, setting=self.requires_approval, source=source,
                                call=self._call) for t in listed)
            self._signatures, self._last = sig, tools
        if self._changes == changes:  # no change announced while listing
            self._tools = tools
        return tools

    async def _call_on_owner(self, name: str, arguments: dict[str, Any]) -> Any:
        session = await self._ready()
        return await session.call(name, arguments, self.timeout)

    async def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        result = await on_owner(self._call_on_owner(name, arguments))
        return result_value(result, self._secrets)

    async def _close_on_owner(self) -> None:
        session, self._session = self._session, None
        unregister(self)
        if session is not None:
            await session.close()
