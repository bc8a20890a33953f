"""One connection to an MCP server, on the owner loop: open, list, call, notice changes, close.

Owns `ServerSpec` (how to reach a server: a command to start, or a URL, with the secrets it
needs), `Session` (one live connection: the official SDK's ``mcp.Client`` held open by a task of
its own, since its context must be entered and left in one task) and `scrub` (secrets out of any
text nbagent shows). Every method of `Session` runs on the owner loop (`_owner`). The ``mcp``
SDK is imported here, when a session opens, never when nbagent is imported. Imports nbagent's
exceptions and the package's `_utf8`.

A session is dead once its server is gone (a stdio server that exited or was killed, an HTTP
server that stopped answering): its calls fail with `ToolSourceError` and `MCPTools` opens a new
session (starting a stdio server again) for the next call.

A stdio server that writes bytes that are not UTF-8 to its stdout is alive but lost (the SDK's
reader stops for good at them): `_utf8` tells the session, which is dead at once, fails the
calls waiting with an error naming the bytes, and stops the server (started again for the next
call).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit, urlunsplit

from ..exceptions import ToolSourceError
from ._utf8 import STDOUT_CODEC, refused_bytes, refused_bytes_text, register_codec

__all__ = ["ServerSpec", "Session", "scrub"]

_closing: set[asyncio.Task[None]] = set()
"""Sessions stopping in the background (kept here until they are done)."""

SECRET_MIN_CHARS = 6
"""Header and environment values at least this long are replaced by ``***`` in any text shown
(shorter ones, like ``DEBUG=1``, are too common to be secrets and would garble the text)."""
CLOSE_S = 8.0
"""How long closing a session may take (the SDK stops a stdio server within about 6 s)."""
def scrub(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret value replaced by ``***``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return text


@dataclass(frozen=True, repr=False)
class ServerSpec:
    """How to reach one server. Its ``repr`` is what `MCPTools` shows: no header or env value."""

    kind: str  # "stdio" or "http"
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    errlog: IO[str] | None = None

    @property
    def secrets(self) -> list[str]:
        """The values that must never be shown, in every form nbagent sends them: env and
        header values (and a header's token after ``Bearer``), a URL's user name, password and
        query values, each raw and URL-encoded, and the ``Basic`` form of the URL's user info."""
        values = [*self.env.values(), *self.headers.values()]
        values += [v.split(" ", 1)[1] for v in self.headers.values() if " " in v]  # "Bearer <token>"
        if self.kind == "http":
            values += _url_secrets(self.url)
        forms: set[str] = set()
        for value in values:
            forms.update((value, quote(value, safe=""), quote_plus(value), quote(value)))
        return sorted({v for v in forms if len(v) >= SECRET_MIN_CHARS}, key=len, reverse=True)

    def http_target(self) -> tuple[str, dict[str, str]]:
        """The URL to send requests to (without user info) and the headers to send. User info
        in the URL becomes a ``Basic`` Authorization header, unless the headers give one
        themselves: an explicit header always wins."""
        parts = urlsplit(self.url)
        headers = dict(self.headers)
        if parts.username is None and parts.password is None:
            return self.url, headers
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        url = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
        if not any(name.lower() == "authorization" for name in headers):
            headers["Authorization"] = "Basic " + _basic(parts.username, parts.password)
        return url, headers

    def describe(self) -> str:
        """The server in a few words, for error messages (no secrets)."""
        if self.kind == "stdio":
            return " ".join([self.command, *self.args])
        return safe_url(self.url)


def _basic(username: str | None, password: str | None) -> str:
    import base64

    pair = f"{unquote(username or '')}:{unquote(password or '')}"
    return base64.b64encode(pair.encode()).decode()


def _url_secrets(url: str) -> list[str]:
    """A URL's user name, password and query values (raw as written, and decoded), and the
    Basic token of its user info."""
    parts = urlsplit(url)
    values = [p for p in (parts.password, parts.username) if p]
    values += [unquote(v) for v in values]
    if parts.username is not None or parts.password is not None:
        values.append(_basic(parts.username, parts.password))
    for _, value in parse_qsl(parts.query, keep_blank_values=True):
        values.append(value)
    values += [p.split("=", 1)[1] for p in parts.query.split("&") if "=" in p]  # as written
    return values


def safe_url(url: str) -> str:
    """`url` without its user name, password and query values (they often carry keys)."""
    from urllib.parse import urlencode

    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    query = urlencode([(k, "***") for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, host, parts.path, query, ""))


def _flatten(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups, as the SDK's task groups raise them."""
    while getattr(exc, "exceptions", None):  # BaseExceptionGroup (a backport's on Python 3.10)
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def is_connection_lost(exc: BaseException) -> bool:
    """Whether `exc` means the server is gone (not just that one request failed)."""
    exc = _flatten(exc)
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, MCPError):
        return exc.code == -32000  # CONNECTION_CLOSED
    return isinstance(exc, (OSError, EOFError)) or type(exc).__module__.startswith(("httpx", "httpcore", "anyio"))


class Session:
    """A live connection to one server (on the owner loop).

    Args:
        spec: the server.
        on_tools_changed: called (on the owner loop) when the server says its tool list changed.
    """

    def __init__(self, spec: ServerSpec, on_tools_changed: Callable[[], None]) -> None:
        self.spec = spec
        self.on_tools_changed = on_tools_changed
        self.client: Any = None
        self.dead = False
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stderr: IO[str] | None = None
        self._http_error = ""
        self._refused = ""
        """What is wrong with the server's stdout (bytes that are not UTF-8), once it is."""
        self._broken: asyncio.Future[None] | None = None
        """Done when the server's stdout can no longer be read: the calls waiting fail at once."""
        self._ready: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ lifecycle
    async def open(self, timeout: float) -> None:
        """Start (or reach) the server and initialise the session.

        Raises:
            ToolSourceError: it cannot be started or reached within `timeout` seconds, or refused
                the session (the message holds the last lines the server wrote to stderr).
        """
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._ready, self._broken = ready, loop.create_future()
        self._task = asyncio.ensure_future(self._serve(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except asyncio.TimeoutError:
            error = self.error(f"did not start or answer within {timeout:g} s")
            # Reported now; the SDK's clean-up (a stdio server that ignores the end of its input
            # is waited for, then terminated: seconds) goes on in the background.
            self._close_in_background(ready)
            raise error from None
        except ToolSourceError:
            if self._task.done():
                await self.close()
            else:  # its stdout went bad while starting: the SDK still waits for an answer
                self._close_in_background(ready)
            raise

    async def _serve(self, ready: asyncio.Future[None]) -> None:
        try:
            import mcp
        except ImportError:
            ready.set_exception(ToolSourceError(
                "MCP servers need the mcp package: pip install 'nbagent[mcp]'", source=self.spec.describe()))
            return
        listen: asyncio.Task[None] | None = None
        refused_bytes.set(self._refuse)  # this task's context: the SDK's stdout reader inherits it
        try:
            async with contextlib.AsyncExitStack() as stack:
                target = await self._target(stack)
                client = await stack.enter_async_context(
                    mcp.Client(target, message_handler=self._on_message, cache=None))
                self.client = client
                caps = client.server_capabilities.tools
                if caps is not None and caps.list_changed and client.protocol_version >= "2026":
                    listen = asyncio.ensure_future(self._listen(client))
                ready.set_result(None)
                await self._stop.wait()
                if listen is not None:
                    listen.cancel()
                    await asyncio.gather(listen, return_exceptions=True)
        except asyncio.CancelledError:
            if not ready.done():
                ready.set_exception(self.error("was stopped while starting"))
            raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(self.error(f"could not be started or reached: {_words(exc)}"))
        finally:
            self.dead = True
            self.client = None
            if listen is not None and not listen.done():
                listen.cancel()

    async def _target(self, stack: contextlib.AsyncExitStack) -> Any:
        spec = self.spec
        if spec.kind == "stdio":
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            errlog = spec.errlog
            if errlog is None:  # kept for error messages (closed with the session); a cell shows none of it
                errlog = self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            register_codec()
            params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None,
                                           cwd=spec.cwd, encoding=STDOUT_CODEC)
            return stdio_client(params, errlog=errlog)  # type: ignore[arg-type]
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        url, headers = spec.http_target()
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0),
                               event_hooks={"response": [self._on_response]}))
        return streamable_http_client(url, http_client=http)

    async def _on_response(self, response: Any) -> None:
        """Keep the status and the first words of an HTTP error (the SDK reports only "Server
        returned an error response"): `error` adds them to the message."""
        if response.status_code >= 400:
            try:
                body = (await response.aread()).decode("utf-8", "replace")
            except Exception:  # the status is worth reporting without its body
                body = ""
            words = " ".join(body.split())[:200]
            self._http_error = f"HTTP {response.status_code} {response.reason_phrase}" + (f": {words}" if words else "")

    async def _on_message(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.on_tools_changed()
        elif isinstance(message, Exception) and is_connection_lost(message):
            self.dead = True

    def _refuse(self, exc: UnicodeDecodeError) -> None:
        """The server wrote bytes that are not UTF-8 to its stdout (called by `_Utf8Decoder`, on
        the owner loop, just before the SDK's reader stops): the session is dead, the calls
        waiting fail now, and the server is stopped."""
        if self._refused:
            return
        self._refused = refused_bytes_text(exc)
        self.dead = True
        if self._broken is not None and not self._broken.done():
            self._broken.set_result(None)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(self.refused_error("starting the session"))
        self._stop.set()

    def refused_error(self, what: str) -> ToolSourceError:
        """The error of a request (`what`) that failed because the server wrote bytes that are not UTF-8."""
        return self.error(f"wrote bytes that are not UTF-8 to its stdout, where its messages go: {self._refused}. "
                          f"Its answers cannot be read after them, so {what} failed and the connection was closed; "
                          "the server is started again for the next call")

    async def _listen(self, client: Any) -> None:
        """2026-07-28 servers announce changes on a ``subscriptions/listen`` stream. The stream
        also tells when the server is gone: it ends, and the next call opens a new session
        (a stdio server that died while idle is started again before the call, not after it)."""
        listening = False
        try:
            async with client.listen(tools_list_changed=True) as events:
                listening = True
                async for _ in events:
                    self.on_tools_changed()
        except asyncio.CancelledError:
            raise
        except Exception:  # refused: changes then come as notifications, if at all
            pass
        if listening and not self._stop.is_set():
            self.dead = True

    async def close(self) -> None:
        """Close the session (a stdio server is stopped); never raises."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), CLOSE_S)
            except BaseException:
                task.cancel()
        self.dead = True
        if self._stderr is not None:
            self._stderr.close()

    def _close_in_background(self, ready: asyncio.Future[None]) -> None:
        """Stop the session without waiting for it: its task is cancelled and finishes (the
        SDK stopping a stdio server) on the owner loop. What `ready` ends with is not reported:
        the caller reports the timeout."""
        self._stop.set()
        self.dead = True
        task, stderr = self._task, self._stderr
        self._stderr = None
        if ready.done() and not ready.cancelled():
            ready.exception()
        if task is None or task.done():
            if stderr is not None:
                stderr.close()
            return
        task.cancel()
        _closing.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            _closing.discard(finished)
            for future in (finished, ready):
                if future.done() and not future.cancelled():
                    future.exception()  # retrieved: the timeout was reported already
            if stderr is not None:
                stderr.close()

        task.add_done_callback(done)

    # ------------------------------------------------------------------ requests
    async def list_tools(self, timeout: float) -> list[Any]:
        """Every tool the server lists (all pages).

        Raises:
            ToolSourceError: the server is gone, refused, or did not answer within `timeout`.
        """
        tools = await self._pages(lambda cursor: functools.partial(self.client.list_tools, cursor=cursor),
                                  lambda page: (page.tools, page.next_cursor), timeout)
        if any(getattr(t.annotations, "read_only_hint", None) is True for t in tools):
            await self._keep_only_true_read_only_hints(tools, timeout)
        return tools

    async def _pages(self, request: Callable[[Any], Callable[[], Any]],
                     read: Callable[[Any], tuple[list[Any], Any]], timeout: float) -> list[Any]:
        """The items of every page of ``tools/list``: ``request(cursor)`` makes a page's
        request, ``read(page)`` gives its items and the next cursor."""
        items: list[Any] = []
        cursor = None
        for _ in range(1000):  # a server whose pages never end cannot hang a run
            try:
                page = await self._request(request(cursor), timeout, "listing its tools")
            except TimeoutError:
                raise self.error(f"did not list its tools within {timeout:g} s") from None
            found, cursor = read(page)
            items.extend(found)
            if not cursor:
                break
        return items

    async def _keep_only_true_read_only_hints(self, tools: list[Any], timeout: float) -> None:
        """The SDK reads ``readOnlyHint: 1`` or ``"true"`` as True; a tool runs without approval
        only when the server said JSON ``true``. The listing is read again as plain JSON (only
        when some tool claims to be read-only), and any other value counts as not read-only,
        with a warning that names the tool (fail safe)."""
        import warnings

        from mcp import types
        from pydantic import TypeAdapter

        as_json = TypeAdapter(dict[str, Any])

        def request(cursor: Any) -> Callable[[], Any]:
            listing = types.ListToolsRequest(params=types.PaginatedRequestParams(cursor=cursor))
            return functools.partial(self.client.session.send_request, listing, as_json)

        raw_tools = await self._pages(request, lambda page: (page.get("tools") or [], page.get("nextCursor")),
                                      timeout)
        raw_hints = {str(raw.get("name")): raw["annotations"].get("readOnlyHint") for raw in raw_tools
                     if isinstance(raw, dict) and isinstance(raw.get("annotations"), dict)}
        for tool in tools:
            if getattr(tool.annotations, "read_only_hint", None) is True and raw_hints.get(tool.name) is not True:
                tool.annotations.read_only_hint = None
                warnings.warn(
                    f"the MCP server {self.spec.describe()!r} marks its tool {tool.name!r} read-only with "
                    f"readOnlyHint={raw_hints.get(tool.name)!r}, not JSON true: it is treated as not "
                    "read-only (it asks for approval)", RuntimeWarning, stacklevel=2)

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        """The server's ``CallToolResult`` for one call.

        Raises:
            TimeoutError: no answer within `timeout` seconds.
            ToolSourceError: the server is gone, or answered with a protocol error.
        """
        return await self._request(
            lambda: self.client.call_tool(name, arguments, read_timeout_seconds=timeout), timeout,
            f"calling {name!r}", backstop=5.0)

    async def _request(self, make: Callable[[], Any], timeout: float, what: str, backstop: float = 0.0) -> Any:
        """`make()`'s answer within `timeout` (plus `backstop` seconds, where the SDK keeps a
        timeout of its own, which cancels the request on the server)."""
        if self._refused:
            raise self.refused_error(what)
        if self.dead or self.client is None:
            raise self.error(f"has stopped ({what})")
        try:
            return await self._answer(make(), timeout + backstop)
        except asyncio.TimeoutError:
            raise TimeoutError(f"the MCP server did not answer within {timeout:g} s ({what})") from None
        except Exception as exc:
            raise self._failure(exc, timeout, what) from None

    async def _answer(self, request: Any, seconds: float) -> Any:
        """`request`'s answer within `seconds`; a `ToolSourceError` as soon as the server's
        stdout can no longer be read (`_refuse`), which no answer would ever follow.

        Raises:
            asyncio.TimeoutError: no answer within `seconds`.
        """
        task = asyncio.ensure_future(request)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # read when abandoned
        waits: set[asyncio.Future[Any]] = {task}
        if self._broken is not None:
            waits.add(self._broken)
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            return task.result()
        if self._refused:
            raise self.refused_error("the request")
        raise asyncio.TimeoutError

    def _failure(self, exc: Exception, timeout: float, what: str) -> Exception:
        """The error to raise for a request that failed with `exc`."""
        from mcp.shared.exceptions import MCPError

        if self._refused:  # whatever the SDK made of it, this is why
            return self.refused_error(what)
        if isinstance(exc, MCPError):
            if exc.code == -32001:  # REQUEST_TIMEOUT
                return TimeoutError(f"the MCP server did not answer within {timeout:g} s ({what})")
            if exc.code == -32000:  # CONNECTION_CLOSED
                self.dead = True
                return self.error(f"stopped while {what}; it is started again for the next call")
            return self.error(f"refused {what}: {_words(exc)}")
        if is_connection_lost(exc):
            self.dead = True
            return self.error(f"could not be reached while {what}: {_words(exc)}")
        return self.error(f"failed while {what}: {_words(exc)}")

    # ------------------------------------------------------------------ errors
    def error(self, what: str) -> ToolSourceError:
        """A `ToolSourceError` naming the server, with its last stderr lines (scrubbed)."""
        text = f"the MCP server {self.spec.describe()!r} {what}"
        if self._http_error:
            text += f" ({self._http_error})"
            self._http_error = ""
        tail = self.stderr_tail()
        if tail:
            text += f"; it wrote:\n{tail}"
        return ToolSourceError(scrub(text, self.spec.secrets), source=self.spec.describe())

    def stderr_tail(self, lines: int = 8) -> str:
        """The last lines a stdio server wrote to stderr (when nbagent keeps them)."""
        err = self._stderr
        if err is None or err.closed:
            return ""
        try:
            err.flush()
            err.seek(0)
            text = err.read()[-4000:]
        except (OSError, ValueError):
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


def _words(exc: BaseException) -> str:
    exc = _flatten(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
