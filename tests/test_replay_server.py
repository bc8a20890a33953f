"""The wire replay server (tests/wire/replay_server.py), exercised with plain urllib / http.client."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.wire.replay_server import (
    CASES_DIR,
    FAULT_MODES,
    ReplayServer,
    all_cases,
    case_names,
    load_case,
    split_sse_events,
)

CASES = all_cases()
NAMES = sorted(CASES)
STREAM_NAMES = [n for n in NAMES if "sse" in CASES[n]["response"]]
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def post(url: str, body: Any = None, headers: dict[str, str] | None = None,
         timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """POST JSON; returns (status, lower-cased headers, body) also for HTTP errors."""
    data = json.dumps({} if body is None else body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


@pytest.fixture(scope="module")
def server():
    with ReplayServer() as srv:
        yield srv


@pytest.fixture
def fresh_server():
    with ReplayServer() as srv:
        yield srv


# ----------------------------------------------------------------------------------- the data
def test_corpus_is_complete():
    assert len(NAMES) == 39
    assert case_names() == NAMES
    for name, case in CASES.items():
        assert case["name"] == name
        assert case["source"] and case["license"] and case["source_commit"]
        resp = case["response"]
        assert ("sse" in resp) != ("body" in resp), name
    assert (CASES_DIR / "README.md").is_file()


def test_load_case_returns_a_fresh_copy():
    a = load_case("openai_plain_text")
    a["response"]["status"] = 999
    assert load_case("openai_plain_text")["response"]["status"] == 200
    with pytest.raises(KeyError):
        load_case("no_such_case")
    with pytest.raises(KeyError):
        load_case("../cases/openai_plain_text")


def test_split_sse_events_is_lossless():
    for name in STREAM_NAMES:
        sse = CASES[name]["response"]["sse"]
        events = split_sse_events(sse)
        assert "".join(events) == sse
        assert len(events) >= 2
        assert all(e.endswith("\n\n") for e in events), name


# ----------------------------------------------------------------------------------- replay
@pytest.mark.parametrize("name", NAMES)
def test_every_case_replays_as_recorded(server: ReplayServer, name: str):
    case = CASES[name]
    resp = case["response"]
    status, headers, body = post(server.base_url_for(name) + "/chat/completions", case["request"]["body"])
    assert status == resp["status"]
    assert headers["x-replay-case-served"] == name
    for key, value in (resp.get("headers") or {}).items():
        assert headers[key.lower()] == value, key
    if "sse" in resp:
        assert body == resp["sse"].encode("utf-8")
        # as recorded (openai_stream_text_legacy_2023 really came as application/json)
        recorded = resp["headers"].get("content-type", "text/event-stream; charset=utf-8")
        assert headers["content-type"] == recorded
        assert headers["transfer-encoding"] == "chunked"
    elif "body_raw" in resp:
        assert body == resp["body_raw"].encode("utf-8")
    else:
        assert json.loads(body) == resp["body"]


def test_stream_is_sent_event_by_event(server: ReplayServer):
    """Raw socket read: one HTTP chunk per recorded SSE event, then the terminating chunk."""
    name = "openai_stream_parallel_tool_calls"
    events = split_sse_events(CASES[name]["response"]["sse"])
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(f"POST /case/{name}/v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  "Content-Length: 2\r\n\r\n{}".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, raw = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    expected = b"".join(b"%x\r\n%s\r\n" % (len(e.encode()), e.encode()) for e in events) + b"0\r\n\r\n"
    assert raw == expected


def test_delay_between_events_and_unchunked_mode():
    name = "openai_stream_text_usage"
    sse = CASES[name]["response"]["sse"].encode()
    n = len(split_sse_events(CASES[name]["response"]["sse"]))
    with ReplayServer(delay=0.02) as srv:
        t0 = time.monotonic()
        status, _, body = post(srv.base_url_for(name) + "/chat/completions")
        assert status == 200 and body == sse
        assert time.monotonic() - t0 >= 0.02 * (n - 1) * 0.9
    with ReplayServer(chunk_events=False) as srv:
        status, headers, body = post(srv.base_url_for(name) + "/chat/completions")
        assert status == 200 and body == sse
        assert headers["content-length"] == str(len(sse))
        assert "transfer-encoding" not in headers


def test_x_replay_case_header(server: ReplayServer):
    status, headers, body = post(server.base_url + "/chat/completions", {"model": "m"},
                                 {"X-Replay-Case": "openai_error_404_model"})
    assert status == 404
    assert headers["x-replay-case-served"] == "openai_error_404_model"
    assert json.loads(body)["error"]["code"] == "model_not_found"
    # the header wins over the path
    status, headers, _ = post(server.base_url_for("openai_plain_text") + "/chat/completions",
                              headers={"X-Replay-Case": "openrouter_error_429"})
    assert status == 429 and headers["x-replay-case-served"] == "openrouter_error_429"


def test_no_case_or_unknown_case_is_422(server: ReplayServer):
    status, _, body = post(server.base_url + "/chat/completions")
    assert status == 422 and json.loads(body)["error"]["code"] == "replay_no_match"
    status, _, body = post(server.url + "/case/nope/v1/chat/completions")
    assert status == 422 and "nope" in json.loads(body)["error"]["message"]
    with pytest.raises(KeyError):
        server.base_url_for("nope")
    status, _, _ = post(server.url + "/v1/embeddings")
    assert status == 404


def test_models_and_health(server: ReplayServer):
    with _OPENER.open(server.base_url_for("openai_plain_text") + "/models", timeout=5) as r:
        assert json.loads(r.read())["data"][0]["id"] == "replay"
    with _OPENER.open(server.url + "/health", timeout=5) as r:
        assert json.loads(r.read()) == {"ok": True, "cases": 39}


# ----------------------------------------------------------------------------------- faults
def test_fault_url_builder(server: ReplayServer):
    url = server.fault_base_url("slow", "openai_plain_text", 2)
    assert url == f"{server.url}/fault/slow:2/openai_plain_text/v1"
    assert server.fault_base_url("500-then-200") == f"{server.url}/fault/500-then-200/v1"
    with pytest.raises(ValueError):
        server.fault_base_url("explode")
    with pytest.raises(KeyError):
        server.fault_base_url("slow", "nope")
    assert set(FAULT_MODES) == {"drop-mid-stream", "500-then-200", "429-then-200", "slow", "event-delay",
                                "429-retry-after", "then", "drop-once", "error-mid-stream", "error-once",
                                "bad-body", "bad-body-once", "keep-alive", "status"}
    status, _, body = post(server.url + "/fault/explode/v1/chat/completions")
    assert status == 422 and "explode" in json.loads(body)["error"]["message"]


@pytest.mark.parametrize("keep", [None, 3])
def test_drop_mid_stream(server: ReplayServer, keep: int | None):
    name = "openai_stream_text_usage"
    events = split_sse_events(CASES[name]["response"]["sse"])
    url = server.fault_base_url("drop-mid-stream", name, keep)
    with pytest.raises(http.client.IncompleteRead) as exc_info:
        with _OPENER.open(urllib.request.Request(url + "/chat/completions", data=b"{}"), timeout=10) as r:
            assert r.status == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            r.read()
    partial = exc_info.value.partial
    expected_n = len(events) // 2 if keep is None else keep
    assert partial == "".join(events[:expected_n]).encode()
    assert b"[DONE]" not in partial


def test_drop_mid_stream_default_case_and_raw_socket(server: ReplayServer):
    """The connection really is closed: a raw socket sees EOF without the terminating chunk."""
    host, port = "127.0.0.1", server.port
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"POST /fault/drop-mid-stream:1/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"X-Replay-Case-Served: openai_stream_text_usage" in head
    first = split_sse_events(CASES["openai_stream_text_usage"]["response"]["sse"])[0].encode()
    assert body == b"%x\r\n%s\r\n" % (len(first), first)  # no "0\r\n\r\n"


def test_drop_mid_stream_needs_a_stream_case(server: ReplayServer):
    status, _, _ = post(server.fault_base_url("drop-mid-stream", "openai_plain_text") + "/chat/completions")
    assert status == 422


@pytest.mark.parametrize(("mode", "status"), [("500-then-200", 500), ("429-then-200", 429)])
def test_error_then_success(fresh_server: ReplayServer, mode: str, status: int):
    url = fresh_server.fault_base_url(mode, "openai_plain_text") + "/chat/completions"
    code, headers, body = post(url)
    assert code == status
    err = json.loads(body)["error"]
    assert err["type"] == ("server_error" if status == 500 else "requests")
    if status == 429:
        assert headers["retry-after"] == "0"
        assert err["code"] == "rate_limit_exceeded"
    for _ in range(2):
        code, headers, body = post(url)
        assert code == 200 and body == CASES["openai_plain_text"]["response"]["body_raw"].encode()
    # counters are per fault prefix: another case or arg starts from zero
    other = fresh_server.fault_base_url(mode, "openai_stream_text_usage") + "/chat/completions"
    assert post(other)[0] == status
    assert post(other)[0] == 200
    # N failures
    two = fresh_server.fault_base_url(mode, "openai_plain_text", 2) + "/chat/completions"
    assert [post(two)[0] for _ in range(3)] == [status, status, 200]
    fresh_server.reset()
    assert post(url)[0] == status


def test_slow(server: ReplayServer):
    url = server.fault_base_url("slow", "openai_plain_text", 0.3) + "/chat/completions"
    t0 = time.monotonic()
    assert post(url)[0] == 200
    assert time.monotonic() - t0 >= 0.3
    slow = server.fault_base_url("slow", "openai_plain_text", 5) + "/chat/completions"
    t0 = time.monotonic()
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        post(slow, timeout=0.3)
    assert time.monotonic() - t0 < 3


def test_stop_wakes_a_slow_request():
    srv = ReplayServer().start()
    url = srv.fault_base_url("slow", "openai_plain_text", 30) + "/chat/completions"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        path = url.split(str(srv.port), 1)[1]
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        time.sleep(0.2)
        t0 = time.monotonic()
        srv.stop()
        assert time.monotonic() - t0 < 5
        assert s.recv(100).startswith(b"HTTP/1.1 200")  # the sleeping handler was woken and answered


def test_event_delay(server: ReplayServer):
    name = "openai_stream_length"
    n = len(split_sse_events(CASES[name]["response"]["sse"]))
    url = server.fault_base_url("event-delay", name, 0.01) + "/chat/completions"
    t0 = time.monotonic()
    status, _, body = post(url)
    assert status == 200 and body == CASES[name]["response"]["sse"].encode()
    assert time.monotonic() - t0 >= 0.01 * (n - 1) * 0.9


# ----------------------------------------------------------------------------------- recording
@pytest.mark.parametrize(("kind", "content_type", "start"), [
    ("html", "text/html; charset=utf-8", b"<html><head><title>502 Bad Gateway"),
    ("empty", "application/json", b""),
    ("empty-sse", "text/event-stream", b""),
    ("latin1", "application/json", b'{"id": "chatcmpl-latin1"'),
])
def test_bad_body(server: ReplayServer, kind: str, content_type: str, start: bytes):
    status, headers, body = post(server.fault_base_url("bad-body", arg=kind) + "/chat/completions")
    assert status == 200 and headers["content-type"] == content_type and body.startswith(start)
    assert int(headers["content-length"]) == len(body)
    if kind == "latin1":
        assert b"Caf\xe9" in body
        with pytest.raises(UnicodeDecodeError):
            body.decode("utf-8")


def test_bad_body_quotes_the_authorization_header_and_bad_body_once_recovers(fresh_server: ReplayServer):
    _, _, body = post(fresh_server.fault_base_url("bad-body", arg="html-key") + "/chat/completions",
                       headers={"Authorization": "Bearer k1"})
    assert b"Request header: Bearer k1" in body[:200]
    url = fresh_server.fault_base_url("bad-body-once", "openai_plain_text", arg="empty") + "/chat/completions"
    assert post(url)[2] == b""
    status, _, body = post(url)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "This is a test."
    assert post(fresh_server.fault_base_url("bad-body", arg="nope") + "/chat/completions")[0] == 422


@pytest.mark.parametrize("how", ["comment", "delta"])
def test_keep_alive_beats_until_the_client_hangs_up(server: ReplayServer, how: str):
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("POST", f"/fault/keep-alive:0.05,{how}/v1/chat/completions", body=b"{}",
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type") == "text/event-stream"
    t0 = time.perf_counter()
    seen = b""
    while seen.count(b"\n\n") < 4:
        seen += resp.read1(4096)
    assert time.perf_counter() - t0 >= 0.1  # spaced beats, not a burst
    beat = b": keep-alive\n\n" if how == "comment" else b'"delta": {"content": ""}'
    assert beat in seen and b"[DONE]" not in seen
    conn.close()


def test_requests_are_recorded(fresh_server: ReplayServer):
    body = {"model": "gpt-4o-mini", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}]}
    post(fresh_server.base_url_for("openai_stream_text_usage") + "/chat/completions", body,
         {"Authorization": "Bearer sk-secret", "api-key": "azure-secret", "X-Custom": "yes"})
    post(fresh_server.base_url + "/chat/completions", {"model": "m"}, {"X-Replay-Case": "openai_error_401"})
    post(fresh_server.fault_base_url("500-then-200") + "/chat/completions", {"model": "m"})
    reqs = fresh_server.requests
    assert len(reqs) == 3
    first = reqs[0]
    assert first["method"] == "POST"
    assert first["path"] == "/case/openai_stream_text_usage/v1/chat/completions"
    assert first["body"] == body
    assert first["body"]["stream_options"]["include_usage"] is True
    assert first["case"] == "openai_stream_text_usage" and first["fault"] is None
    assert first["headers"]["x-custom"] == "yes"
    assert "authorization" not in first["headers"] and "api-key" not in first["headers"]
    assert "sk-secret" not in json.dumps([{k: v for k, v in r.items() if k != "raw"} for r in reqs])
    assert reqs[1]["case"] == "openai_error_401"
    assert reqs[2]["case"] == "openai_plain_text" and reqs[2]["fault"] == "500-then-200"
    assert fresh_server.chat_requests() == reqs
    # a snapshot: mutating it does not change the server's log
    reqs.clear()
    assert len(fresh_server.requests) == 3
    fresh_server.reset()
    assert fresh_server.requests == []


def test_chunked_request_body_and_non_json(fresh_server: ReplayServer):
    conn = http.client.HTTPConnection("127.0.0.1", fresh_server.port, timeout=10)
    try:
        conn.request("POST", "/case/openai_plain_text/v1/chat/completions",
                     body=iter([b'{"model": ', b'"x"}']), encode_chunked=True,
                     headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        conn.request("POST", "/case/openai_plain_text/v1/chat/completions", body=b"not json")
        r = conn.getresponse()
        r.read()
        assert r.status == 200
    finally:
        conn.close()
    reqs = fresh_server.requests
    assert reqs[0]["body"] == {"model": "x"}
    assert reqs[1]["body"] is None and reqs[1]["raw"] == b"not json"


def test_keep_alive_serves_several_requests_on_one_connection(server: ReplayServer):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for name in ("openai_plain_text", "openai_stream_text_usage", "openai_error_401"):
            conn.request("POST", f"/case/{name}/v1/chat/completions", body=b"{}")
            r = conn.getresponse()
            r.read()
            assert r.status == CASES[name]["response"]["status"]
    finally:
        conn.close()


# ----------------------------------------------------------------------------------- CLI
def test_cli_serves_and_lists():
    script = Path(__file__).parent / "wire" / "replay_server.py"
    out = subprocess.run([sys.executable, str(script), "--list"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    assert len(out.strip().splitlines()) == 39 and "openai_plain_text" in out
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(script), "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in line
        status, _, body = post(f"http://127.0.0.1:{port}/case/openai_plain_text/v1/chat/completions")
        assert status == 200 and body == CASES["openai_plain_text"]["response"]["body_raw"].encode()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
