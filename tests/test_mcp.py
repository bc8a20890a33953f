"""MCP servers as tool sources, against a real server written with the SDK's server class
(tests/mcp_servers/kitchen.py), reached over stdio (a subprocess) and streamable HTTP (127.0.0.1).

Discovery, calls, errors, structured results, tools/list_changed, approvals from annotations and
from the user's setting, timeouts, a server that dies, secrets, the lifecycle (``async with``,
reuse across runs and loops, closed at exit). Resume across processes: tests/test_mcp_resume.py.

Starting a server costs a few seconds (the SDK's import): one stdio server and one HTTP server
serve most tests of this module; only the tests that kill or time out a server start their own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbagent import Agent, ToolSourceError, UserError
from nbagent.mcp import MCPTools
from nbagent.messages import ToolResultMessage
from nbagent.models import FunctionModel, ScriptedModel, tool_call
from nbagent.store import MemoryStore

SERVER = Path(__file__).parent / "mcp_servers" / "kitchen.py"
SECRET = "sk-test-0123456789abcdef"


def stdio(**kwargs: Any) -> MCPTools:
    env = {"KITCHEN_LOG": "", **kwargs.pop("env", {})}
    return MCPTools.stdio(sys.executable, [str(SERVER)], env=env, **kwargs)


def results(messages: list[Any]) -> list[ToolResultMessage]:
    """The tool results of a history, each answer's in the order its calls were made."""
    by_id = {m.call_id: m for m in messages if m.kind == "tool-result"}
    return [by_id[c.id] for m in messages if m.kind == "assistant" for c in m.tool_calls if c.id in by_id]


@pytest.fixture(scope="module")
def kitchen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MCPTools]:
    """One stdio server for the module (its log counts destructive calls)."""
    log = tmp_path_factory.mktemp("kitchen") / "log.txt"
    tools = stdio(env={"KITCHEN_LOG": str(log), "KITCHEN_SECRET": SECRET})
    tools.log = log  # type: ignore[attr-defined]
    yield tools
    tools.close_sync()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The same server over streamable HTTP on 127.0.0.1 (a subprocess)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
        except urllib.error.HTTPError:
            break  # it answers (404 at /)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the HTTP MCP server did not start")
            time.sleep(0.2)
        else:
            break
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, kitchen: MCPTools) -> MCPTools:
    if request.param == "stdio":
        return kitchen
    url = request.getfixturevalue("http_url")
    tools = MCPTools.http(url, headers={"Authorization": f"Bearer {SECRET}"})
    request.addfinalizer(tools.close_sync)
    return tools


def call_then_echo(*calls: Any) -> FunctionModel:
    """A model that makes `calls`, then answers with the results it saw."""

    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            return list(calls)
        return " | ".join(m.content for m in results(messages))

    return FunctionModel(answer)


# ----------------------------------------------------------------------------------- discovery
async def test_tools_are_listed_with_the_servers_schema_and_descriptions(server: MCPTools) -> None:
    tools = {t.name: t for t in await server.list_tools()}
    assert {"add", "echo", "write_note", "fail", "picture", "slow", "grow"} <= set(tools)
    assert tools["add"].description == "Add two whole numbers."
    schema = tools["add"].parameters
    assert schema["type"] == "object" and schema["required"] == ["a", "b"]
    assert schema["properties"]["a"]["type"] == "integer"  # the server's schema, as it sent it
    assert server.cached_tools() is not None and await server.list_tools() is server.cached_tools()


async def test_a_prefix_keeps_two_servers_apart_and_a_clash_is_a_clear_error(kitchen: MCPTools) -> None:
    from nbagent import tool

    @tool
    def echo(text: str) -> str:
        """A Python tool with a server tool's name."""
        return text

    clash = Agent(ScriptedModel(["hi"]), tools=[echo, kitchen], store=MemoryStore())
    with pytest.raises(UserError, match=r"'echo'.*prefix"):
        await clash.run("go")
    prefixed = stdio(prefix="k")
    prefixed._session, prefixed._lock = kitchen._session, kitchen._lock  # the same server process
    try:
        agent = Agent(call_then_echo(tool_call("k_echo", text="hi"), tool_call("echo", text="py")),
                      tools=[echo, prefixed], store=MemoryStore())
        result = await agent.run("go")
        assert result.output == "hi | py"
        assert [t.name for t in await prefixed.list_tools()][:2] == ["k_add", "k_echo"]
    finally:
        prefixed._session = None  # the server is the module's


# ----------------------------------------------------------------------------------- calls
async def test_text_structured_and_error_results(server: MCPTools) -> None:
    agent = Agent(call_then_echo(tool_call("echo", text="héllo"), tool_call("add", a=2, b=3),
                                 tool_call("fail", message="the disk is full"), tool_call("add", a="x", b=1)),
                  tools=[server], store=MemoryStore())
    result = await agent.run("go")
    echo, add, fail, bad = results(result.messages)
    assert (echo.content, echo.is_error) == ("héllo", False)
    assert (add.content, add.is_error) == ('{"result": 5}', False)  # structuredContent as JSON
    assert fail.is_error and fail.status == "failed" and "the disk is full" in fail.content
    assert bad.is_error and "validation error" in bad.content.lower()  # the server checks its schema
    assert result.status == "completed"


async def test_an_image_result_reaches_the_model_and_is_stored(server: MCPTools, tmp_path: Path) -> None:
    from nbagent import Image
    from nbagent.store import SQLiteStore

    seen: list[Any] = []

    def answer(messages: list[Any], request: Any) -> Any:
        if messages[-1].kind == "user":
            return tool_call("picture")
        seen.extend(messages[-1].images)
        return "a red square"

    store = SQLiteStore(tmp_path / "threads.db")
    result = await Agent(FunctionModel(answer), tools=[server], store=store).run("draw", thread="t-image")
    [picture] = results(result.messages)
    assert not picture.is_error and picture.content == "[image: image/png, 1 kB]"
    [image] = picture.images
    assert isinstance(image, Image) and image.media_type == "image/png" and image.data.startswith(b"\x89PNG")
    assert seen == [image]  # the model was given the image with the result
    stored = await store.load("t-image")
    assert stored is not None
    assert [m.images for m in stored.messages if m.kind == "tool-result"] == [[image]]


async def test_a_read_only_tool_runs_and_a_destructive_one_waits_for_approval(kitchen: MCPTools) -> None:
    log: Path = kitchen.log  # type: ignore[attr-defined]
    before = log.read_text().count("\n") if log.exists() else 0
    agent = Agent(call_then_echo(tool_call("add", a=1, b=1), tool_call("write_note", text="approved note")),
                  tools=[kitchen], store=MemoryStore())
    paused = await agent.run("go")
    assert paused.status == "paused"
    [pending] = paused.pending
    assert pending.name == "write_note" and pending.args == {"text": "approved note"}
    assert [r.content for r in results(paused.messages)] == ['{"result": 2}']  # the read-only one ran
    result = await agent.resume(paused, approve=[pending])
    assert result.status == "completed" and "wrote 'approved note'" in result.output
    assert results(result.messages)[-1].decision == "approved"
    assert log.read_text().count("\n") == before + 1


async def test_requires_approval_setting_overrides_the_annotations(kitchen: MCPTools) -> None:
    async def needs(tools: MCPTools) -> dict[str, Any]:
        by_name = {t.name: t for t in await tools.list_tools()}
        return {n: by_name[n].needs_approval(by_name[n].validate({"a": 1, "b": 200, "text": "x"}))
                for n in ("add", "write_note", "slow_write")}

    assert await needs(kitchen) == {"add": False, "write_note": True, "slow_write": True}
    for setting, expected in [
        (True, {"add": True, "write_note": True, "slow_write": True}),
        (False, {"add": False, "write_note": False, "slow_write": False}),
        ({"write_note": False, "add": True}, {"add": True, "write_note": False, "slow_write": True}),
        (lambda name, args: name == "add" and args["b"] > 100, {"add": True, "write_note": False,
                                                                "slow_write": False}),
    ]:
        other = stdio(requires_approval=setting)
        other._session, other._lock = kitchen._session, kitchen._lock  # same server, no second process
        assert await needs(other) == expected, setting
    with pytest.raises(UserError, match="requires_approval"):
        stdio(requires_approval="yes")  # type: ignore[arg-type]


async def test_a_denied_call_never_reaches_the_server(kitchen: MCPTools) -> None:
    log: Path = kitchen.log  # type: ignore[attr-defined]
    before = log.read_text() if log.exists() else ""
    agent = Agent(call_then_echo(tool_call("write_note", text="denied note")), tools=[kitchen], store=MemoryStore())
    paused = await agent.run("go")
    result = await agent.resume(paused, deny={paused.pending[0].id: "not today"})
    assert result.output.startswith("denied by the user: not today\nwrite_note was not run.")
    assert (log.read_text() if log.exists() else "") == before


async def test_list_changed_reaches_the_next_model_call_of_the_same_run(server: MCPTools) -> None:
    name = f"extra_{time.monotonic_ns()}"
    seen: list[set[str]] = []

    def answer(messages: list[Any], request: Any) -> Any:
        seen.append({t["name"] for t in request.tools})
        if len(seen) == 1:
            return tool_call("grow", name=name)
        if len(seen) == 2:  # the notification comes a moment after the result (over HTTP, ~50 ms)
            return tool_call("slow", seconds=0.5)
        return tool_call(name, x=21) if len(seen) == 3 else messages[-1].content

    result = await Agent(FunctionModel(answer), tools=[server], store=MemoryStore()).run("grow")
    assert name not in seen[0] and name in seen[2]
    assert result.output == f"{name} 21"


# ----------------------------------------------------------------------------------- failures
async def test_a_call_that_takes_too_long_is_an_error_result_not_a_hang(kitchen: MCPTools) -> None:
    hasty = stdio(timeout=0.5)
    hasty._session, hasty._lock = kitchen._session, kitchen._lock
    agent = Agent(call_then_echo(tool_call("slow", seconds=30)), tools=[hasty], store=MemoryStore())
    started = time.monotonic()
    result = await agent.run("go")
    assert time.monotonic() - started < 10
    [slow] = results(result.messages)
    assert slow.is_error and slow.content.startswith("TimeoutError: the MCP server did not answer within 0.5 s")
    assert await kitchen.call_tool("echo", {"text": "still here"}) == "still here"  # the session lives on


async def test_a_server_that_dies_is_started_again_for_the_next_call() -> None:
    tools = stdio()
    try:
        first = await tools.call_tool("pid")
        agent = Agent(call_then_echo(tool_call("die")), tools=[tools], store=MemoryStore())
        result = await agent.run("go")
        [died] = results(result.messages)
        assert died.is_error and died.content.startswith("ToolSourceError: the MCP server")
        assert "stopped while calling 'die'" in died.content
        second = await tools.call_tool("pid")
        assert second != first and tools.connected
        os.kill(int(second), signal.SIGKILL)  # killed from outside, between runs
        for _ in range(50):  # its listen stream ends: the session knows the server is gone
            if not tools.connected:
                break
            await asyncio.sleep(0.1)
        agent = Agent(call_then_echo(tool_call("pid"), tool_call("pid")), tools=[tools], store=MemoryStore(),
                      tools_in_order=True)
        third, again = [r.content for r in results((await agent.run("go")).messages)]
        assert third.isdigit() and third == again and third not in (first, second)  # started before the call
    finally:
        await tools.close()


async def test_bytes_that_are_not_utf8_on_stdout_fail_the_calls_at_once_and_the_server_restarts() -> None:
    """The SDK decodes a stdio server's stdout strictly: a Latin-1 log line stops its reader for
    good while the server lives on. The calls waiting fail at once, naming the bytes, and the
    next call starts the server again (instead of every call waiting its whole timeout)."""
    tools = MCPTools.stdio(sys.executable, [str(SERVER.parent / "latin1.py")], timeout=20)
    try:
        first = await tools.call_tool("pid")
        waiting = asyncio.ensure_future(tools.call_tool("slow", {"seconds": 15}))
        await asyncio.sleep(0.5)
        agent = Agent(call_then_echo(tool_call("log", text="café")), tools=[tools], store=MemoryStore())
        started = time.monotonic()
        result = await agent.run("go")
        [logged] = results(result.messages)
        assert logged.is_error and logged.content.startswith("ToolSourceError: the MCP server")
        assert "not UTF-8" in logged.content and "b'\\xe9'" in logged.content
        with pytest.raises(ToolSourceError, match="not UTF-8"):
            await waiting  # the other call waiting on the same connection
        assert time.monotonic() - started < 8  # not the 15 s of the slow call, nor the 20 s timeout
        assert not tools.connected
        second = await tools.call_tool("pid")
        assert second != first and tools.connected
        assert await tools.call_tool("echo", {"text": "fine"}) == "fine"
    finally:
        await tools.close()


async def test_bytes_that_are_not_utf8_before_the_first_answer_fail_the_start_at_once() -> None:
    tools = MCPTools.stdio(sys.executable, [str(SERVER.parent / "latin1.py")], env={"LATIN1_BANNER": "démarré"},
                           connect_timeout=20)
    started = time.monotonic()
    with pytest.raises(ToolSourceError, match=r"not UTF-8 .*b'\\xe9' in b'd\\xe9marr\\xe9'.*starting the session"):
        await tools.list_tools()
    assert time.monotonic() - started < 8 and not tools.connected


async def test_a_server_that_cannot_start_fails_the_run_with_its_words() -> None:
    broken = MCPTools.stdio(sys.executable, ["-c", "import sys; print('no such module: notes', file=sys.stderr); "
                                             "sys.exit(2)"], connect_timeout=60)
    agent = Agent(ScriptedModel(["hi"]), tools=[broken], store=MemoryStore())
    with pytest.raises(ToolSourceError, match="no such module: notes") as caught:
        await agent.run("go")
    assert caught.value.source and "import sys" in caught.value.source
    missing = MCPTools.stdio("/nonexistent/server")
    with pytest.raises(ToolSourceError, match="could not be started"):
        await missing.list_tools()


# ----------------------------------------------------------------------------------- security
async def test_the_server_gets_only_the_env_it_is_given(kitchen: MCPTools, monkeypatch: pytest.MonkeyPatch) -> None:
    names = set((await kitchen.call_tool("env_names")).split())
    safe = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
    assert {"KITCHEN_LOG", "KITCHEN_SECRET"} <= names
    assert names - {"KITCHEN_LOG", "KITCHEN_SECRET", "LC_CTYPE"} <= safe  # LC_CTYPE: Python's own locale
    assert "NBAGENT_STORE" in os.environ and "NBAGENT_STORE" not in names


async def test_header_and_env_values_are_never_shown(server: MCPTools, kitchen: MCPTools) -> None:
    text = repr(server) + repr(kitchen) + repr(Agent(ScriptedModel(["x"]), tools=[server]))
    assert SECRET not in text and "KITCHEN_SECRET" in repr(kitchen)
    assert "headers=['Authorization']" in repr(server) or "env=" in repr(server)
    # a server that echoes a secret: the thread stores *** instead
    agent = Agent(call_then_echo(tool_call("env_value", name="KITCHEN_SECRET")), tools=[kitchen], store=MemoryStore())
    result = await agent.run("go")
    assert results(result.messages)[0].content == "KITCHEN_SECRET=***"
    if "headers=" in repr(server):  # the header reached the server, and its value stays out of the thread
        agent = Agent(call_then_echo(tool_call("authorization")), tools=[server], store=MemoryStore())
        assert (await server.call_tool("authorization")) == "***"  # it arrived ("" if not), and is hidden
        assert results((await agent.run("go")).messages)[0].content == "***"
    url = MCPTools.http(f"https://user:{SECRET}@example.invalid/mcp?key={SECRET}")
    assert SECRET not in repr(url) and "key=***" in repr(url)


# ----------------------------------------------------------------------------------- lifecycle
async def test_one_connection_serves_await_run_sync_and_later_runs(kitchen: MCPTools) -> None:
    pid = await kitchen.call_tool("pid")
    agent = Agent(call_then_echo(tool_call("pid")), tools=[kitchen], store=MemoryStore())
    assert (await agent.run("go")).output == pid
    assert await asyncio.to_thread(lambda: agent.run_sync("go").output) == pid  # nbagent's own loop


def test_run_sync_and_map_from_plain_code(kitchen: MCPTools) -> None:
    pytest.importorskip("pandas")
    pid = kitchen_pid = asyncio.run(kitchen.call_tool("pid"))  # a loop of its own, closed after
    agent = Agent(call_then_echo(tool_call("add", a=1, b=2)), tools=[kitchen], store=MemoryStore())
    assert agent.run_sync("go").output == '{"result": 3}'
    frame = agent.map(["a", "b", "c"], progress=False)
    assert list(frame["output"]) == ['{"result": 3}'] * 3
    assert asyncio.run(kitchen.call_tool("pid")) == pid == kitchen_pid


async def test_async_with_closes_and_a_later_run_connects_again() -> None:
    tools = stdio()
    async with tools as entered:
        assert entered is tools and tools.connected
        pid = await tools.call_tool("pid")
    assert not tools.connected
    assert await tools.call_tool("pid") != pid  # connected again, a new server process
    await tools.close()


def test_a_forked_child_starts_its_own_server(kitchen: MCPTools) -> None:
    parent = asyncio.run(kitchen.call_tool("pid"))
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.write(write, asyncio.run(kitchen.call_tool("pid")).encode())
            asyncio.run(kitchen.close())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        theirs = pipe.read()
    os.waitpid(child, 0)
    assert theirs.isdigit() and theirs != parent
    assert asyncio.run(kitchen.call_tool("pid")) == parent  # the parent's server is untouched


def test_servers_are_stopped_at_interpreter_exit(tmp_path: Path) -> None:
    script = (
        "import sys, asyncio\n"
        "from nbagent.mcp import MCPTools\n"
        f"tools = MCPTools.stdio(sys.executable, [{str(SERVER)!r}])\n"
        "print(asyncio.run(tools.call_tool('pid')), flush=True)\n"  # never closed by the script
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[-1])
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the server outlived the interpreter")


# ----------------------------------------------------------------------------------- result shapes
def test_every_kind_of_content_block_becomes_text_or_an_image() -> None:
    import base64
    from types import SimpleNamespace as NS

    from nbagent import Image, ModelRetry
    from nbagent.mcp._adapt import result_value
    from tests.mcp_servers.kitchen import PNG as data
    blocks = [
        NS(type="text", text="hello"),
        NS(type="image", data=base64.b64encode(data).decode(), mime_type="image/png"),
        NS(type="image", data=base64.b64encode(b"<svg/>").decode(), mime_type="image/svg+xml"),
        NS(type="audio", data="", mime_type="audio/wav"),
        NS(type="resource_link", uri="file:///a.txt", name="a"),
        NS(type="resource", resource=NS(uri="file:///b.txt", text="inside b")),
        NS(type="resource", resource=NS(uri="file:///c.bin", blob="AAAA", mime_type="application/zip")),
    ]
    value = result_value(NS(content=blocks, structured_content=None, is_error=False), [])
    text, image = value
    assert text.splitlines() == ["hello", "[image: image/svg+xml, not passed on]", "[audio: audio/wav, not passed on]",
                                 "[resource: file:///a.txt a]", "inside b",
                                 "[resource file:///c.bin: application/zip, not passed on]"]
    assert isinstance(image, Image) and image.data == data
    structured = result_value(NS(content=blocks[:2], structured_content={"n": 1}, is_error=False), [])
    assert structured[0] == '{"n": 1}' and isinstance(structured[1], Image)
    with pytest.raises(ModelRetry, match="the server gave no message"):
        result_value(NS(content=[], structured_content=None, is_error=True), [])
    with pytest.raises(ModelRetry, match=r"^token \*\*\*$"):
        result_value(NS(content=[NS(type="text", text=f"token {SECRET}")], structured_content=None, is_error=True),
                     [SECRET])


# ----------------------------------------------------------------------------------- fail safe
async def test_only_a_json_true_read_only_hint_skips_approval(tmp_path: Path) -> None:
    """``readOnlyHint: 1`` or ``"true"`` (which the SDK reads as True) asks for approval, with a
    warning that names the tool; JSON ``true`` runs at once."""
    log = tmp_path / "odd.log"
    odd = MCPTools.stdio(sys.executable, [str(Path(__file__).parent / "mcp_servers" / "odd_hints.py")],
                         env={"ODD_LOG": str(log)})
    try:
        with pytest.warns(RuntimeWarning) as said:
            listed = {t.name: t for t in await odd.list_tools()}
        assert sorted(str(w.message).split("its tool ")[1].split(" ")[0] for w in said) == ["'one'", "'text_true'"]
        model = ScriptedModel([[tool_call("one"), tool_call("text_true"), tool_call("real")], "done"])
        result = await Agent(model, tools=[odd], store=MemoryStore()).run("go")
        assert result.status == "paused" and sorted(p.name for p in result.pending) == ["one", "text_true"]
        assert log.read_text().split() == ["real"]
        assert listed["real"].requires_approval is False
    finally:
        await odd.close()


async def test_connect_timeout_is_kept_when_the_server_never_answers() -> None:
    """A stdio server that never answers ``initialize`` and ignores the end of its input: the
    error comes within about `connect_timeout` (it came after ~11 s for 3 s)."""
    import time

    silent = MCPTools.stdio(sys.executable, ["-c", "import time; time.sleep(60)"], connect_timeout=2)
    started = time.monotonic()
    try:
        with pytest.raises(ToolSourceError, match="did not start or answer within 2 s"):
            await silent.list_tools()
        assert time.monotonic() - started < 4.5
    finally:
        await silent.close()


async def test_a_listing_that_never_comes_is_a_tool_source_error(tmp_path: Path) -> None:
    silent = MCPTools.stdio(sys.executable, [str(Path(__file__).parent / "mcp_servers" / "odd_hints.py")],
                            env={"ODD_LOG": str(tmp_path / "log"), "ODD_SILENT_LIST": "1"}, connect_timeout=1)
    try:
        with pytest.raises(ToolSourceError, match="did not list its tools within 1 s"):
            await silent.list_tools()
    finally:
        await silent.close()


# ----------------------------------------------------------------------------------- HTTP details
async def test_an_explicit_authorization_header_wins_over_url_user_info(http_url: str) -> None:
    with_both = MCPTools.http(http_url.replace("http://", "http://user:url-password-123@"),
                              headers={"Authorization": f"Bearer {SECRET}"})
    only_url = MCPTools.http(http_url.replace("http://", "http://user:url-password-123@"))
    try:
        assert (await with_both.call_tool("authorization")) == "***"  # the Bearer token, masked
        raw = (await with_both.list_tools(), with_both._spec.headers)[1]  # what was configured
        assert raw == {"Authorization": f"Bearer {SECRET}"}
        assert (await only_url.call_tool("authorization")).startswith("Basic ***")
    finally:
        await with_both.close()
        await only_url.close()


async def test_every_form_of_a_secret_nbagent_sent_is_masked(http_url: str) -> None:
    """The query-string token inside longer text, the token URL-encoded, and the Basic form of
    the URL's user info never reach the result, the thread or the view."""
    import base64

    token = "tok/en+with=chars&more"
    url = http_url.replace("http://", "http://ada:pa%2Fss-word-99@") + "?token=" + urllib.parse.quote(token, safe="")
    tools = MCPTools.http(url)
    try:
        agent = Agent(call_then_echo(tool_call("request_url"), tool_call("authorization")), tools=[tools],
                      store=MemoryStore())
        result = await agent.run("go")
        texts = [m.content for m in results(result.messages)]
        stored = repr(result.messages) + result.output
        basic = base64.b64encode(b"ada:pa/ss-word-99").decode()
        for secret in (token, urllib.parse.quote(token, safe=""), "pa/ss-word-99", "pa%2Fss-word-99", basic):
            assert secret not in stored, secret
        assert texts[0] == '{"path": "/mcp?token=***"}' and texts[1] == "Basic ***"
    finally:
        await tools.close()


@pytest.mark.parametrize("status", [401, 500])
async def test_an_http_error_names_its_status_and_the_servers_reason(status: int) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = f"token {SECRET} is not valid here".encode() if status == 401 else b"database is down"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_DELETE = do_POST

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    tools = MCPTools.http(f"http://127.0.0.1:{srv.server_address[1]}/mcp",
                          headers={"Authorization": f"Bearer {SECRET}"}, connect_timeout=10)
    try:
        with pytest.raises(ToolSourceError) as caught:
            await tools.list_tools()
    finally:
        await tools.close()
        srv.shutdown()
        srv.server_close()
    text = str(caught.value)
    reason = {401: "Unauthorized", 500: "Internal Server Error"}[status]
    assert f"HTTP {status} {reason}" in text and SECRET not in text
    assert ("token *** is not valid here" if status == 401 else "database is down") in text
