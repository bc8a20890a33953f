#!/usr/bin/env python3
"""Replay recorded OpenAI chat-completions and Anthropic Messages traffic to nbagent's tests (standard
library only).

The recordings are the ``cases/*.json`` files next to this module (see ``cases/README.md``) and,
for the Anthropic Messages API, the ``anthropic_messages/*.json`` files (see its ``README.md``).
Each one is a single real HTTP interaction: status, kept response headers and the body
(``body_raw`` text, or ``body`` JSON, or ``sse`` event-stream text).

URL scheme (every route below ends in ``/v1/chat/completions``; use the part before
``/chat/completions`` as the client's ``base_url``)::

    POST /case/<name>/v1/chat/completions
        Answer with case <name>, whatever the request body is.

    POST /v1/chat/completions            + header  X-Replay-Case: <name>
        Same, the case chosen by header (the header also overrides a case in the path).

    POST /fault/<mode>[:<arg>][/<name>]/v1/chat/completions
        Fault injection.  <name> is the case used for the part of the answer that is not a fault
        (default: X-Replay-Case header, else ``openai_stream_text_usage`` for drop-mid-stream and
        ``openai_plain_text`` otherwise).  Modes:

        drop-mid-stream[:K]   send the response head and the first K SSE events (default: half of
                              them, at least 1) of a streamed case, then close the connection
                              without the terminating chunk (the client sees an incomplete body).
        500-then-200[:N]      the first N requests (default 1) to this exact fault path on this
                              server instance answer HTTP 500 with an OpenAI-style JSON error;
                              later ones answer with the case.
        429-then-200[:N]      the same with HTTP 429, a rate-limit JSON error and ``retry-after: 0``.
        slow[:S]              sleep S seconds (default 5) before answering with the case.
        event-delay[:S]       stream the case's SSE events with S seconds (default 0.05) between them.
        drop-once[:K]         like drop-mid-stream for the first request to this path; later ones
                              answer with the whole case (a stream that breaks, then a good retry).
        429-retry-after[:S]   the first request answers HTTP 429 with ``retry-after: S`` (default 1;
                              ``dateS`` sends an HTTP-date S seconds ahead); later ones the case.
        then:<c2>[,<c3>...]   a conversation: the first request answers with <name>, the second
                              with <c2>, the third with <c3>...; the last one repeats.
        error-mid-stream[:K[,EVENT]]
                              send the first K SSE events of a streamed case (default: half, at
                              least 1), then the error event EVENT, ``data: [DONE]`` and a proper
                              end of the body: what a server does when generation fails after the
                              HTTP 200 went out.  EVENT is JSON sent as ``data: EVENT`` (default:
                              OpenAI's ``{"error": {"message": "The server had an error...",
                              "type": "server_error", ...}}``), or raw SSE text when it does not
                              start with ``{`` (e.g. ``event: error\ndata: {...}``).  In the URL it
                              is percent-encoded (``fault_base_url`` does that).
        error-once[:K[,EVENT]] like error-mid-stream for the first request to this path; later ones
                              answer with the whole case (a transient error, then a good retry).
        bad-body:KIND         answer HTTP 200 with a body that is not a chat completion, whether
                              the request streams or not.  KIND: ``html`` (a proxy's error page,
                              text/html), ``html-key`` (the same page quoting the request's
                              Authorization header near its start), ``empty`` (application/json,
                              no bytes), ``latin1`` (a completion as application/json, encoded
                              Latin-1: not UTF-8), ``empty-sse`` (text/event-stream, no bytes).
        bad-body-once:KIND    like bad-body for the first request to this path; later ones answer
                              with the case (a proxy hiccup, then a good retry).
        keep-alive[:S[,HOW]]  answer a streamed request with the event-stream head, then forever
                              (until the client hangs up or the server stops) one keep-alive every
                              S seconds (default 0.2): HOW ``comment`` (default) sends the SSE
                              comment ``: keep-alive``, ``delta`` a chunk with an empty content delta,
                              ``ping`` Anthropic's ``event: ping``.

    Anthropic Messages API: every route above works with ``/v1/messages`` in place of
    ``/v1/chat/completions`` (the client's ``base_url`` is then the part before ``/v1``, see
    ``anthropic_base_url_for`` / ``anthropic_fault_base_url``). Cases are looked up in both
    corpora; errors of the server itself and of the 500/429 faults are Anthropic-shaped there
    (``{"type": "error", "error": {"type": ..., "message": ...}}``), and the error-* modes'
    default event is Anthropic's ``event: error`` with an ``overloaded_error`` (no ``[DONE]``).
    One more fault mode for both:

        status:CODE[,TYPE]    answer HTTP CODE with an error body of that type (default: a type
                              matching the status), e.g. ``status:413,request_too_large``.

    OpenAI Responses API: every route above works with ``/v1/responses`` (and
    ``/v1/responses/compact``) in place of ``/v1/chat/completions`` (the same ``base_url``s),
    answered from ``openai_responses/*.json``
    (see its ``README.md``); name the case (path, header or fault route): no body matching.

    GET  .../v1/models        a one-model list (some clients probe it).
    GET  /health              {"ok": true, "cases": N}

The 500/429 counters are keyed by the whole fault prefix (mode, arg and case), so two tests that
use different prefixes do not share a counter; ``ReplayServer.reset()`` clears all counters.

An unknown case, or a chat request with no case selected, gets HTTP 422 with error code
``replay_no_match`` (no recorded case has that status).  Every replayed answer carries
``X-Replay-Case-Served: <name>``.

SSE replies are sent with ``Transfer-Encoding: chunked``, one chunk per event and a flush after
each (optionally ``delay`` seconds between events); the bytes are exactly the recorded text.
With ``chunk_events=False`` the whole stream is sent at once with a Content-Length.

Every request received (except ``/health``) is recorded: method, path, headers (lower-cased,
without ``authorization`` / ``api-key``), the parsed JSON body (``None`` if not JSON), the case
served and the fault mode.

Python::

    from tests.wire.replay_server import ReplayServer, load_case, all_cases

    with ReplayServer() as srv:                       # 127.0.0.1, free port, daemon thread
        base = srv.base_url_for("openai_plain_text")  # http://127.0.0.1:PORT/case/openai_plain_text/v1
        flaky = srv.fault_base_url("500-then-200", "openai_plain_text", arg=2)
        ...
        srv.requests[-1]["body"]["stream_options"]    # what the client sent
        srv.add_case("scripted", {...})               # serve a case a test built (in memory)

Command line::

    python tests/wire/replay_server.py --port 8765 [--host 127.0.0.1] [--delay 0.05] [--no-chunk]
    python tests/wire/replay_server.py --list
"""

from __future__ import annotations

import argparse
import copy
import email.utils
import functools
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

CASES_DIR = Path(__file__).resolve().parent / "cases"
ANTHROPIC_CASES_DIR = Path(__file__).resolve().parent / "anthropic_messages"
RESPONSES_CASES_DIR = Path(__file__).resolve().parent / "openai_responses"
CASE_HEADER = "X-Replay-Case"
SERVED_HEADER = "X-Replay-Case-Served"
FAULT_MODES = ("drop-mid-stream", "500-then-200", "429-then-200", "slow", "event-delay", "429-retry-after",
               "then", "drop-once", "error-mid-stream", "error-once", "bad-body", "bad-body-once", "keep-alive",
               "status")
DEFAULT_FAULT_CASE = {"drop-mid-stream": "openai_stream_text_usage", "drop-once": "openai_stream_text_usage",
                      "error-mid-stream": "openai_stream_text_usage", "error-once": "openai_stream_text_usage"}
DEFAULT_STREAM_ERROR = json.dumps({"error": {
    "message": "The server had an error while processing your request. Sorry about that!",
    "type": "server_error", "param": None, "code": None}})
"""What OpenAI sends inside a started stream when generation fails (the error-* fault modes' default)."""
DEFAULT_CASE = "openai_plain_text"
DEFAULT_ANTHROPIC_CASE = {"drop-mid-stream": "anthropic_stream_text", "drop-once": "anthropic_stream_text",
                          "error-mid-stream": "anthropic_stream_text", "error-once": "anthropic_stream_text"}
DEFAULT_ANTHROPIC_STREAM_ERROR = "event: error\ndata: " + json.dumps(
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
"""What Anthropic sends inside a started stream when it is overloaded (the error-* modes' default there)."""
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error"}
_DROPPED_REQUEST_HEADERS = {"authorization", "api-key", "proxy-authorization", "cookie"}
_EVENT_END = re.compile(r"\r?\n\r?\n")
_CHAT_SUFFIX = "/chat/completions"
_MESSAGES_SUFFIX = "/messages"
_RESPONSES_SUFFIX = "/responses"

__all__ = [
    "ANTHROPIC_CASES_DIR",
    "CASES_DIR",
    "FAULT_MODES",
    "RESPONSES_CASES_DIR",
    "ReplayServer",
    "all_cases",
    "case_names",
    "load_case",
    "split_sse_events",
]


# --------------------------------------------------------------------------------------- cases
@functools.cache
def _case_text(cases_dir: str, name: str) -> str:
    path = Path(cases_dir) / f"{name}.json"
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not path.is_file():
        raise KeyError(f"no replay case {name!r} in {cases_dir}")
    return path.read_text(encoding="utf-8")


def case_names(cases_dir: Path | str = CASES_DIR) -> list[str]:
    """Sorted names of the cases in ``cases_dir``."""
    return sorted(p.stem for p in Path(cases_dir).glob("*.json"))


def load_case(name: str, cases_dir: Path | str = CASES_DIR) -> dict[str, Any]:
    """The parsed case ``name`` (a fresh dict each call: callers may modify it)."""
    return json.loads(_case_text(str(cases_dir), name))


def all_cases(cases_dir: Path | str = CASES_DIR) -> dict[str, dict[str, Any]]:
    """All cases as ``{name: case}``, sorted by name."""
    return {name: load_case(name, cases_dir) for name in case_names(cases_dir)}


def split_sse_events(text: str) -> list[str]:
    """Split SSE text into events, each ending with its blank line.

    ``"".join(split_sse_events(t)) == t`` always holds (a trailing partial event is kept).
    """
    events, pos = [], 0
    for m in _EVENT_END.finditer(text):
        events.append(text[pos : m.end()])
        pos = m.end()
    if pos < len(text):
        events.append(text[pos:])
    return events


def _error_body(message: str, type_: str, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


# ------------------------------------------------------------------------------------- routing
def _anthropic_error_body(message: str, type_: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


class _Route:
    """What a chat-completions (or Anthropic messages) path asks for."""

    def __init__(self, case: str | None, mode: str | None = None, arg: str | None = None, key: str = ""):
        self.case, self.mode, self.arg, self.key = case, mode, arg, key
        self.anthropic = False


def _parse_chat_path(path: str) -> _Route | None:
    """Parse a path ending in /chat/completions or /v1/messages; None if it is not one of ours."""
    if path.endswith(_CHAT_SUFFIX):
        suffix = _CHAT_SUFFIX
    elif path.endswith("/v1" + _RESPONSES_SUFFIX):  # OpenAI's Responses API: OpenAI-shaped like chat
        suffix = _RESPONSES_SUFFIX
    elif path.endswith("/v1" + _RESPONSES_SUFFIX + "/compact"):  # its compaction, served the same way
        suffix = _RESPONSES_SUFFIX + "/compact"
    elif path.endswith("/v1" + _MESSAGES_SUFFIX):
        suffix = _MESSAGES_SUFFIX
    else:
        return None
    route = _parse_parts([unquote(p) for p in path[: -len(suffix)].split("/") if p])
    if route is not None:
        route.anthropic = suffix == _MESSAGES_SUFFIX
    return route


def _parse_parts(parts: list[str]) -> _Route | None:
    # parts is e.g. ["v1"], ["case", NAME, "v1"], ["fault", "slow:2", NAME, "v1"], ["fault", "slow", "v1"]
    if parts and parts[-1] == "v1":
        parts = parts[:-1]
    if not parts:
        return _Route(None)
    if parts[0] == "case" and len(parts) == 2:
        return _Route(parts[1])
    if parts[0] == "fault" and len(parts) in (2, 3):
        mode, _, arg = parts[1].partition(":")
        case = parts[2] if len(parts) == 3 else None
        return _Route(case, mode, arg or None, key="/".join(parts))
    return None


# ------------------------------------------------------------------------------------- handler
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nbagent-replay/1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.owner.verbose:
            sys.stderr.write(f"replay {self.address_string()} - {format % args}\n")

    # ----------------------------------------------------------------- low-level writers
    def _head(self, status: int, headers: dict[str, str]) -> None:
        """Status line + headers; the case's own date/server win over ours."""
        self.send_response_only(status)
        lower = {k.lower() for k in headers}
        if "server" not in lower:
            self.send_header("Server", self.version_string())
        if "date" not in lower:
            self.send_header("Date", email.utils.formatdate(usegmt=True))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _send_bytes(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        headers = {**headers, "Content-Length": str(len(data))}
        self._head(status, headers)
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8")
        self._send_bytes(status, data, {"Content-Type": "application/json", **(headers or {})})

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    # ----------------------------------------------------------------- recording
    def _record(self, raw: bytes, route: _Route | None, served: str | None) -> None:
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError):
            body = None
        entry = {
            "time": time.time(),
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()
                        if k.lower() not in _DROPPED_REQUEST_HEADERS},
            "body": body,
            "raw": raw,
            "case": served,
            "fault": route.mode if route else None,
        }
        self.server.owner._add_request(entry)

    _anthropic = False

    def _err(self, message: str, type_: str, code: Any = None) -> dict[str, Any]:
        """An OpenAI-style error body, or an Anthropic-style one on a /v1/messages route."""
        if not self._anthropic:
            return _error_body(message, type_, code)
        kind = {"server_error": "api_error", "requests": "rate_limit_error"}.get(type_, type_)
        return _anthropic_error_body(message, kind if kind in _ANTHROPIC_TYPES.values() else "invalid_request_error")

    # ----------------------------------------------------------------- routes
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send_json(200, {"ok": True, "cases": len(case_names(self.server.owner.cases_dir))})
            return
        self._record(b"", None, None)
        if path.endswith("/v1/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": "replay", "object": "model", "created": 0, "owned_by": "nbagent-replay"}]})
        else:
            self._send_json(404, _error_body(f"replay server: no route for GET {path}",
                                             "invalid_request_error"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        raw = self._read_body()
        route = _parse_chat_path(path)
        self._anthropic = route is not None and route.anthropic
        if route is None:
            self._record(raw, None, None)
            self._send_json(404, self._err(f"replay server: no route for POST {path}",
                                             "invalid_request_error"))
            return
        name = (self.headers.get(CASE_HEADER) or "").strip() or route.case
        if route.mode is not None:
            if route.mode not in FAULT_MODES:
                self._record(raw, route, None)
                self._send_json(422, self._err(
                    f"unknown fault mode {route.mode!r}; known: {', '.join(FAULT_MODES)}",
                    "invalid_request_error", "replay_no_match"))
                return
            if route.anthropic:
                name = name or DEFAULT_ANTHROPIC_CASE.get(route.mode, "anthropic_plain_text")
            else:
                name = name or DEFAULT_FAULT_CASE.get(route.mode, DEFAULT_CASE)
        if not name:
            self._record(raw, route, None)
            self._send_json(422, self._err(
                f"no case selected: POST /case/<name>/v1/chat/completions or send {CASE_HEADER}: <name>",
                "invalid_request_error", "replay_no_match"))
            return
        try:
            case = self.server.owner.case(name)
        except KeyError:
            self._record(raw, route, None)
            self._send_json(422, self._err(f"unknown replay case {name!r}", "invalid_request_error",
                                             "replay_no_match"))
            return
        self._record(raw, route, name)
        if route.mode is None:
            self._replay(case)
        else:
            self._fault(route, case)

    # ----------------------------------------------------------------- faults
    def _fault(self, route: _Route, case: dict[str, Any]) -> None:
        owner = self.server.owner
        mode = route.mode
        try:
            if mode in ("500-then-200", "429-then-200"):
                failures = int(route.arg or 1)
                if owner._count(route.key) <= failures:
                    if mode == "500-then-200":
                        self._send_json(500, self._err(
                            "The server had an error while processing your request. Sorry about that! "
                            "(replay fault 500-then-200)", "server_error"),
                            {SERVED_HEADER: f"fault:{mode}"})
                    else:
                        self._send_json(429, self._err(
                            "Rate limit reached for requests (replay fault 429-then-200)", "requests",
                            "rate_limit_exceeded"),
                            {"retry-after": "0", SERVED_HEADER: f"fault:{mode}"})
                    return
                self._replay(case)
            elif mode == "slow":
                owner._stopping.wait(float(route.arg or 5))
                self._replay(case)
            elif mode == "event-delay":
                self._replay(case, delay=float(route.arg or 0.05))
            elif mode == "drop-mid-stream":
                self._drop_mid_stream(case, int(route.arg) if route.arg else None)
            elif mode == "drop-once":
                if owner._count(route.key) <= 1:
                    self._drop_mid_stream(case, int(route.arg) if route.arg else None)
                else:
                    self._replay(case)
            elif mode in ("error-mid-stream", "error-once"):
                if mode == "error-mid-stream" or owner._count(route.key) <= 1:
                    self._error_mid_stream(case, route.arg)
                else:
                    self._replay(case)
            elif mode in ("bad-body", "bad-body-once"):
                if mode == "bad-body" or owner._count(route.key) <= 1:
                    self._bad_body(route.arg or "")
                else:
                    self._replay(case)
            elif mode == "status":
                code_text, _, kind = (route.arg or "").partition(",")
                code = int(code_text)
                if not 400 <= code <= 599:
                    raise ValueError(code_text)
                kind = kind or (_ANTHROPIC_TYPES.get(code, "api_error" if code >= 500 else "invalid_request_error")
                                if route.anthropic else ("server_error" if code >= 500 else "invalid_request_error"))
                message = f"replay fault status {code} ({kind})"
                body = (_anthropic_error_body(message, kind) if route.anthropic else _error_body(message, kind))
                self._send_json(code, body, {SERVED_HEADER: f"fault:{mode}"})
            elif mode == "keep-alive":
                self._keep_alive(route.arg)
            elif mode == "429-retry-after":
                if owner._count(route.key) <= 1:
                    arg = route.arg or "1"
                    if arg.startswith("date"):
                        value = email.utils.formatdate(time.time() + float(arg[4:]), usegmt=True)
                    else:
                        value = str(float(arg)).removesuffix(".0")
                    self._send_json(429, self._err(
                        "Rate limit reached for requests (replay fault 429-retry-after)", "requests",
                        "rate_limit_exceeded"), {"retry-after": value, SERVED_HEADER: f"fault:{mode}"})
                    return
                self._replay(case)
            elif mode == "then":
                later = [n for n in (route.arg or "").split(",") if n]
                if not later:
                    raise ValueError(route.arg)
                n = owner._count(route.key)
                if n > 1:
                    try:
                        case = owner.case(later[min(n - 2, len(later) - 1)])
                    except KeyError:
                        self._send_json(422, self._err(f"unknown replay case in {route.arg!r}",
                                                         "invalid_request_error", "replay_no_match"))
                        return
                self._replay(case)
        except ValueError:
            self._send_json(422, self._err(f"bad fault argument {route.arg!r} for {mode}",
                                             "invalid_request_error", "replay_no_match"))

    def _drop_mid_stream(self, case: dict[str, Any], keep: int | None) -> None:
        resp = case["response"]
        if "sse" not in resp:
            self._send_json(422, self._err(f"drop-mid-stream needs a streamed case, {case['name']} is not",
                                             "invalid_request_error", "replay_no_match"))
            return
        events = split_sse_events(resp["sse"])
        keep = max(1, len(events) // 2) if keep is None else keep
        if not 0 <= keep < len(events):
            raise ValueError(keep)
        self._head(int(resp["status"]), self._sse_headers(case))
        for event in events[:keep]:
            self._write_chunk(event.encode("utf-8"))
        # no terminating 0-chunk: close the TCP connection mid-body
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _error_mid_stream(self, case: dict[str, Any], arg: str | None) -> None:
        resp = case["response"]
        if "sse" not in resp:
            self._send_json(422, self._err(f"error-mid-stream needs a streamed case, {case['name']} is not",
                                             "invalid_request_error", "replay_no_match"))
            return
        keep_text, _, event = (arg or "").partition(",")
        events = split_sse_events(resp["sse"])
        keep = int(keep_text) if keep_text else max(1, len(events) // 2)
        if not 0 <= keep < len(events):
            raise ValueError(keep)
        event = event or (DEFAULT_ANTHROPIC_STREAM_ERROR if self._anthropic else DEFAULT_STREAM_ERROR)
        if event.lstrip().startswith("{"):
            json.loads(event)  # a typo in a test's payload is a 422, not a silently odd stream
            event = f"data: {event}"
        event = event.rstrip("\r\n") + "\n\n"
        self._head(int(resp["status"]), self._sse_headers(case))
        for sent in events[:keep]:
            self._write_chunk(sent.encode("utf-8"))
        self._write_chunk(event.encode("utf-8"))
        if not self._anthropic:
            self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _bad_body(self, kind: str) -> None:
        headers = {SERVED_HEADER: "fault:bad-body"}
        if kind in ("html", "html-key"):
            quoted = f"<p>Request header: {self.headers.get('Authorization', '')}</p>" if kind == "html-key" else ""
            page = (f"<html><head><title>502 Bad Gateway</title></head><body>{quoted}<h1>502 Bad Gateway</h1>"
                    "<p>The proxy could not reach the upstream server.</p>" + "<!-- padding -->" * 40
                    + "</body></html>\n")
            self._send_bytes(200, page.encode("utf-8"), {**headers, "Content-Type": "text/html; charset=utf-8"})
        elif kind == "empty":
            self._send_bytes(200, b"", {**headers, "Content-Type": "application/json"})
        elif kind == "empty-sse":
            self._send_bytes(200, b"", {**headers, "Content-Type": "text/event-stream"})
        elif kind == "latin1":
            body = json.dumps({"id": "chatcmpl-latin1", "object": "chat.completion", "created": 0, "model": "m",
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": "Caf\u00e9"}}]},
                              ensure_ascii=False)
            self._send_bytes(200, body.encode("latin-1"), {**headers, "Content-Type": "application/json"})
        else:
            raise ValueError(kind)

    def _keep_alive(self, arg: str | None) -> None:
        every_text, _, how = (arg or "").partition(",")
        every = float(every_text or 0.2)
        if how not in ("", "comment", "delta", "ping"):
            raise ValueError(how)
        if how == "ping":  # Anthropic's keep-alive event
            beat = b'event: ping\ndata: {"type": "ping"}\n\n'
        elif how == "delta":
            beat = ("data: " + json.dumps({"id": "chatcmpl-keepalive", "object": "chat.completion.chunk",
                                           "created": 0, "model": "m", "choices": [
                                               {"index": 0, "delta": {"content": ""}, "finish_reason": None}]})
                    + "\n\n").encode("utf-8")
        else:
            beat = b": keep-alive\n\n"
        self._head(200, {"content-type": "text/event-stream", "Transfer-Encoding": "chunked",
                         "cache-control": "no-cache", SERVED_HEADER: "fault:keep-alive"})
        self.close_connection = True
        try:
            while not self.server.owner._stopping.wait(every):
                self._write_chunk(beat)
        except OSError:
            return  # the client hung up
        self.wfile.write(b"0\r\n\r\n")

    # ----------------------------------------------------------------- replay
    def _case_headers(self, case: dict[str, Any]) -> dict[str, str]:
        headers = dict(case["response"].get("headers") or {})
        headers[SERVED_HEADER] = case["name"]
        return headers

    def _sse_headers(self, case: dict[str, Any]) -> dict[str, str]:
        headers = self._case_headers(case)
        if not any(k.lower() == "content-type" for k in headers):
            headers["content-type"] = "text/event-stream; charset=utf-8"
        headers["Transfer-Encoding"] = "chunked"
        headers.setdefault("cache-control", "no-cache")
        return headers

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _replay(self, case: dict[str, Any], delay: float | None = None) -> None:
        owner = self.server.owner
        resp = case["response"]
        status = int(resp["status"])
        if "sse" in resp:
            if not owner.chunk_events and delay is None:
                headers = self._case_headers(case)
                if not any(k.lower() == "content-type" for k in headers):
                    headers["content-type"] = "text/event-stream; charset=utf-8"
                self._send_bytes(status, resp["sse"].encode("utf-8"), headers)
                return
            delay = owner.delay if delay is None else delay
            self._head(status, self._sse_headers(case))
            for i, event in enumerate(split_sse_events(resp["sse"])):
                if i and delay and owner._stopping.wait(delay):
                    break
                self._write_chunk(event.encode("utf-8"))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        if "body_raw" in resp:
            data = resp["body_raw"].encode("utf-8")
        elif isinstance(resp.get("body"), str):
            data = resp["body"].encode("utf-8")
        else:
            data = json.dumps(resp.get("body"), indent=2, ensure_ascii=False).encode("utf-8")
        headers = self._case_headers(case)
        if not any(k.lower() == "content-type" for k in headers):
            headers["content-type"] = "application/json"
        self._send_bytes(status, data, headers)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], owner: ReplayServer):
        self.owner = owner
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client that hangs up early is normal here
        super().handle_error(request, client_address)


# ------------------------------------------------------------------------------------- public API
class ReplayServer:
    """A replay server on a daemon thread.  Use as a context manager or call start()/stop().

    ``delay``: seconds between SSE events (default 0).  ``chunk_events=False`` sends each SSE
    body in one piece with a Content-Length instead of one chunk per event.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, cases_dir: Path | str = CASES_DIR,
                 anthropic_cases_dir: Path | str = ANTHROPIC_CASES_DIR,
                 delay: float = 0.0, chunk_events: bool = True, verbose: bool = False):
        self.host, self.port = host, port
        self.cases_dir = Path(cases_dir)
        self.anthropic_cases_dir = Path(anthropic_cases_dir)
        self.delay = delay
        self.chunk_events = chunk_events
        self.verbose = verbose
        self._requests: list[dict[str, Any]] = []
        self._counters: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._cases: dict[str, dict[str, Any]] = {}

    # ----------------------------------------------------------------- lifecycle
    def _bind(self) -> _HTTPServer:
        if self._httpd is None:
            self._stopping.clear()
            self._httpd = _HTTPServer((self.host, self.port), self)
            self.port = self._httpd.server_address[1]
        return self._httpd

    def start(self) -> ReplayServer:
        """Serve on a daemon thread (idempotent); returns self."""
        if self._thread is not None:
            return self
        httpd = self._bind()
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"replay-server-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (requests sleeping in ``slow`` are woken)."""
        if self._httpd is None:
            return
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
        self._httpd.server_close()
        self._httpd = self._thread = None

    def serve_forever(self) -> None:
        """Serve in the calling thread until KeyboardInterrupt (used by the CLI)."""
        httpd = self._bind()
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._stopping.set()
            httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- URLs
    @property
    def url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``URL/v1``: the case must then come from the X-Replay-Case header."""
        return f"{self.url}/v1"

    def base_url_for(self, case: str) -> str:
        """``http://127.0.0.1:PORT/case/NAME/v1``: every chat request there is answered with ``case``."""
        self.case(case)  # fail early on a typo
        return f"{self.url}/case/{case}/v1"

    def fault_base_url(self, mode: str, case: str | None = None, arg: float | int | str | None = None) -> str:
        """``http://127.0.0.1:PORT/fault/MODE[:ARG][/CASE]/v1`` (see the module docstring); ARG is
        percent-encoded (``,`` and ``:`` kept), so an error-* mode's JSON event can be passed as is."""
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}; known: {', '.join(FAULT_MODES)}")
        if case is not None:
            self.case(case)
        spec = mode if arg is None else f"{mode}:{quote(str(arg), safe=',:')}"
        return f"{self.url}/fault/{spec}" + (f"/{case}" if case else "") + "/v1"

    def anthropic_base_url_for(self, case: str) -> str:
        """``http://127.0.0.1:PORT/case/NAME``: an Anthropic client with this ``base_url`` (the SDK
        adds ``/v1/messages``) gets ``case`` whatever it sends."""
        self.case(case)
        return f"{self.url}/case/{case}"

    def anthropic_fault_base_url(self, mode: str, case: str | None = None,
                                 arg: float | int | str | None = None) -> str:
        """`fault_base_url` for an Anthropic client: without the trailing ``/v1``."""
        return self.fault_base_url(mode, case, arg).removesuffix("/v1")

    # ----------------------------------------------------------------- state
    def case(self, name: str) -> dict[str, Any]:
        """The case dict (cached; treat as read-only, use load_case() for a copy). KeyError if unknown."""
        with self._lock:
            if name not in self._cases:
                try:
                    self._cases[name] = load_case(name, self.cases_dir)
                except KeyError:
                    try:
                        self._cases[name] = load_case(name, self.anthropic_cases_dir)
                    except KeyError:
                        self._cases[name] = load_case(name, RESPONSES_CASES_DIR)
            return self._cases[name]

    def add_case(self, name: str, case: dict[str, Any]) -> str:
        """Serve `case` (a dict shaped like a case file) as ``name`` from now on, e.g. an answer a
        test scripts from a recorded one; returns ``name``."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"bad case name {name!r}")
        with self._lock:
            self._cases[name] = {**copy.deepcopy(case), "name": name}
        return name

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Snapshot of the requests received so far, oldest first (see the module docstring)."""
        with self._lock:
            return copy.deepcopy(self._requests)

    def chat_requests(self) -> list[dict[str, Any]]:
        """Only the POSTs to .../chat/completions."""
        return [r for r in self.requests
                if r["method"] == "POST" and r["path"].split("?")[0].endswith(_CHAT_SUFFIX)]

    def responses_requests(self) -> list[dict[str, Any]]:
        """Only the POSTs to .../v1/responses (OpenAI's Responses API)."""
        return [r for r in self.requests
                if r["method"] == "POST" and r["path"].split("?")[0].endswith("/v1" + _RESPONSES_SUFFIX)]

    def messages_requests(self) -> list[dict[str, Any]]:
        """Only the POSTs to .../v1/messages (Anthropic)."""
        return [r for r in self.requests
                if r["method"] == "POST" and r["path"].split("?")[0].endswith("/v1" + _MESSAGES_SUFFIX)]

    def reset(self) -> None:
        """Forget recorded requests and fault counters."""
        with self._lock:
            self._requests.clear()
            self._counters.clear()

    def _add_request(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._requests.append(entry)

    def _count(self, key: str) -> int:
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + 1
            return self._counters[key]


# ------------------------------------------------------------------------------------- CLI
def _print_cases(cases_dir: Path) -> None:
    for name, case in all_cases(cases_dir).items():
        resp = case["response"]
        kind = "sse" if "sse" in resp else "json"
        covers = ",".join(case.get("covers", []))
        print(f"{name:<45} {resp['status']:>3} {kind:<4} {case.get('provider', ''):<14} {covers}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Replay recorded OpenAI chat-completions cases.")
    ap.add_argument("--host", default="127.0.0.1", help="bind address (keep it on loopback)")
    ap.add_argument("--port", type=int, default=8765, help="0 = pick a free port")
    ap.add_argument("--cases", default=str(CASES_DIR), help="directory of case *.json files")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds between SSE events")
    ap.add_argument("--no-chunk", action="store_true", help="send SSE bodies in one piece")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--verbose", action="store_true", help="log requests to stderr")
    a = ap.parse_args(argv)
    if a.list:
        _print_cases(Path(a.cases))
        return 0
    srv = ReplayServer(a.host, a.port, cases_dir=a.cases, delay=a.delay, chunk_events=not a.no_chunk,
                       verbose=a.verbose)
    srv._bind()
    print(f"replay server on {srv.url} ({len(case_names(srv.cases_dir))} cases); "
          f"base_url {srv.url}/case/<name>/v1", flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
