#!/usr/bin/env python3
"""A loopback batch server: OpenAI's Batch API and Anthropic's Message Batches API on 127.0.0.1
(standard library only), well enough that the official ``openai`` and ``anthropic`` SDKs' own
batch calls work against it (tests/test_batch_server.py proves it, object by object).

Nobody has published a recording of a tool round trip through a batch, so the shapes come from
the public API references, the SDKs' types and real output lines (the ones copied into
tests/test_batch_server.py, each with its source and licence).

Routes (an OpenAI client's ``base_url`` is `base_url`, ``http://127.0.0.1:<port>/v1``; an
Anthropic client's is `url`, without the ``/v1``)::

    POST   /v1/files                       multipart upload (purpose "batch"): the input JSONL
    GET    /v1/files/{id}[/content]        a file object / its bytes (input, output and error files)
    DELETE /v1/files/{id}
    POST   /v1/batches                     {input_file_id, endpoint, completion_window: "24h", metadata}
    GET    /v1/batches[?after=&limit=]     newest first
    GET    /v1/batches/{id}                a retrieve: this is what moves a batch on (see Lifecycle)
    POST   /v1/batches/{id}/cancel
    POST   /v1/messages/batches            {requests: [{custom_id, params}]}
    GET    /v1/messages/batches[?after_id=&before_id=&limit=]
    GET    /v1/messages/batches/{id}       a retrieve (moves the batch on)
    GET    /v1/messages/batches/{id}/results   the JSONL results, once ended (``results_url``)
    POST   /v1/messages/batches/{id}/cancel
    DELETE /v1/messages/batches/{id}       only once ended

Endpoints served inside an OpenAI batch: ``/v1/chat/completions`` and ``/v1/responses``.
Any API key is accepted; no header is kept or logged.

Answers: every request line is answered by the server's `responder` (tests/wire/batch_answers.py:
a callable from a `BatchRequest` to a body, a `Text`/`ToolCall` the server wraps into a realistic
Chat Completions / Responses / Messages body with ``usage``, or an outcome: `RequestError`,
`RequestExpired`, `ServerFault`). It runs once per request, when its batch ends, under the server's
lock (keep it quick; do not call the server from it). A responder that raises is answered as a
`ServerFault` and the exception is kept in `errors`; leaving the ``with`` block raises it.

Lifecycle, per batch, by its `Plan` (the server's defaults, or one queued by `plan_next`): the
batch moves only when it is retrieved. ``polls`` retrieves still see it running, the next one sees
it ended, and not before ``seconds`` have passed since creation; ``polls=None`` runs until `finish`.

- OpenAI: created ``validating``. The first retrieve validates the input file, as the real API does
  after accepting it: an empty file, a line that is not JSON, a line whose ``url`` is not the
  batch's endpoint or a duplicate ``custom_id`` make it ``failed``, with ``errors.data`` items
  ``{code, line, message, param}`` (codes ``empty_file``, ``invalid_json_line``, ``url_mismatch``,
  ``duplicate_custom_id``); so does ``outcome="failed"`` (code ``token_limit_exceeded``). Then
  ``in_progress`` (the last running retrieve says ``finalizing`` when ``polls >= 2`` and the batch
  will complete), then ``completed`` with the final ``request_counts``, ``usage``, ``model``,
  ``output_file_id`` (the 200 lines; None when there are none) and ``error_file_id`` (the other
  lines; None when there are none). ``expired`` instead (``expired_at``) when ``outcome="expired"``
  or a line expired. A cancel answers ``cancelling`` (``cancelling_at``), the next retrieve
  ``cancelled``. Every timestamp the ``Batch`` type has is set when its event happens;
  ``expires_at`` is 24 h after creation.
- Anthropic: created ``in_progress``, its ``request_counts`` all ``processing`` until it ends (as
  the API documents), then ``ended`` with ``ended_at``, the counts and ``results_url``. A cancel
  answers ``canceling`` (``cancel_initiated_at``), the next retrieve ``ended``. A ``custom_id``
  that is missing, longer than 64 characters, not ``[a-zA-Z0-9_-]`` or a duplicate gets HTTP 400 at
  create (``invalid_request_error``; the 64-character message is the API's own, the others are this
  server's wording). A batch cannot fail as a whole there: ``outcome="failed"`` makes every result
  ``errored`` (``api_error``) instead. Delete works once the batch has ended.
- On expiry or cancel the first ``done_before_stop`` requests (in input order) ran; the others are
  expired (OpenAI: error-file lines with code ``batch_expired``; Anthropic: ``expired`` results) or
  canceled (OpenAI: in no file; Anthropic: ``canceled`` results).
- Cancelling or retrieving an ended batch returns it unchanged (the real APIs' answer to a late
  cancel is not modelled). Neither API's batch object has an "estimated" field, so none is sent.

Faults in the output (plan fields): ``shuffle`` (lines never in input order, the same order at
each download),
``blank_lines`` (a blank line first and between lines: the ``anthropic`` SDK's ``results()``
decoder raises on it, so only a driver reading the bytes itself survives that), ``duplicate_lines``
(the first *k* lines sent twice).

Python (a thread of the test process)::

    with BatchServer(script(ToolCall("lookup", {"q": "x"}), Text("done")), polls=1) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test")
        claude = anthropic.Anthropic(base_url=server.url, api_key="sk-test")
        ...

What a test holds (all thread-safe): ``BatchServer(responder=auto, *, host, port, **plan)`` (the
default `Plan`'s fields); ``server.responder`` (may be swapped between batches);
``plan_next(**fields)`` (queue a plan for the next batch created); ``finish(batch_id)``;
``status(batch_id)`` (no retrieve); ``requests(batch_id=None)`` (the `BatchRequest` objects a
batch, or every batch, held: what the client sent); the counters ``created`` (batches),
``uploads``, ``submitted`` and ``answered`` (``Counter`` by custom_id: how many batches held it,
how many times the responder ran for it), ``polls`` (``Counter`` by batch id);
``resubmitted()`` (custom ids submitted more than once: assert ``== []`` for "submitted nothing
twice"); ``stats()`` (all of that as JSON); ``errors``; ``reset()``.

Command line (its own process, so a client killed with SIGKILL leaves it running; prints
``PORT <n>``)::

    python tests/wire/batch_server.py [--port 0] [--polls 1] [--seconds 0] [--responder module:name]

Test control over HTTP (for a test whose clients run in other processes): ``GET /_batch/stats``
(the counters, `stats`), ``POST /_batch/plan`` (a JSON `Plan` for the next batch),
``POST /_batch/finish/{id}``, ``POST /_batch/reset``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import random
import re
import secrets
import string
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

if __package__ in (None, ""):  # run as a script: make ``tests.wire`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.wire.batch_answers import (
    Answer,
    BatchRequest,
    RequestError,
    RequestExpired,
    Responder,
    ServerFault,
    Text,
    ToolCall,
    auto,
    body_for,
    route,
    script,
)
from tests.wire.scripted_server import LoopbackServer

__all__ = ["ENDPOINTS", "BatchRequest", "BatchServer", "Plan", "RequestError", "RequestExpired", "ServerFault",
           "Text", "ToolCall", "auto", "fetch_stats", "route", "script"]

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/responses": "responses"}
"""The OpenAI batch endpoints served, and the API each request line is answered in."""
WINDOW = 24 * 3600
TOKEN_LIMIT = ("Enqueued token limit reached for gpt-4o-mini in organization org-batchserver. Limit: 2,000,000 "
               "enqueued tokens. Please try again once some in_progress batches have been completed.")
DUPLICATE = ("The custom_id for this request is a duplicate of another request. The custom_id parameter must be "
             "unique for each request in a batch.")
EXPIRED_LINE = {"code": "batch_expired",
                "message": "This request could not be executed before the completion window expired."}
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_B62 = string.ascii_letters + string.digits


@dataclass
class Plan:
    """How one batch goes (see the module docstring's Lifecycle)."""

    polls: int | None = 1
    """Retrieves of the batch that still see it running; None: until `BatchServer.finish`."""
    seconds: float = 0.0
    """And it runs at least this long after creation."""
    outcome: Literal["completed", "failed", "expired"] = "completed"
    done_before_stop: int = 0
    """On expiry or cancel: how many requests (in input order) ran before the batch stopped."""
    failure: str = TOKEN_LIMIT
    """The message of a failed batch (``outcome="failed"``)."""
    shuffle: bool = False
    blank_lines: bool = False
    duplicate_lines: int = 0


@dataclass
class _Batch:
    id: str
    provider: Literal["openai", "anthropic"]
    requests: list[BatchRequest]
    plan: Plan
    status: str
    created: float = field(default_factory=time.time)
    endpoint: str = ""
    input_file_id: str = ""
    metadata: dict[str, Any] | None = None
    invalid: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI: the input file's validation errors, reported by the first retrieve."""
    polls: int = 0
    times: dict[str, float] = field(default_factory=dict)
    cancelling: bool = False
    released: bool = False
    answers: list[Answer | None] | None = None
    """Per request, once run: its answer (None: it never ran)."""
    output: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """OpenAI: ``output`` and ``error`` lines; Anthropic: ``results`` lines."""
    files: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "failed", "expired", "cancelled", "ended")


def _id(prefix: str, n: int, alphabet: str = _B62) -> str:
    return prefix + "".join(secrets.choice(alphabet) for _ in range(n))


def _rfc3339(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def openai_error(message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def anthropic_error(message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}, "request_id": _id("req_01", 22)}


@dataclass(frozen=True)
class _Request:
    body: bytes
    content_type: str
    query: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body or b"{}")


class _Reply:
    """What a route answers: a JSON object, or raw bytes with their content type."""

    def __init__(self, status: int, body: Any, content_type: str = "application/json") -> None:
        self.status, self.content_type = status, content_type
        self.data = body if isinstance(body, bytes) else json.dumps(body).encode()


class _Refused(Exception):
    """Raised by a route's look-up (no such file or batch): `_route` answers with `reply`."""

    def __init__(self, reply: _Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


class BatchServer:
    """The server; `start` (or ``with``) serves it on a daemon thread (see the module docstring).

    Args:
        responder: answers each request of a batch (default `auto`).
        host, port: where to listen (port 0: a free one).
        **plan: the default `Plan`'s fields (``polls``, ``seconds``, ``outcome``...).
    """

    def __init__(self, responder: Responder = auto, *, host: str = "127.0.0.1", port: int = 0, **plan: Any) -> None:
        self.responder = responder
        self.host, self.port = host, port
        self.plan = Plan(**plan)
        self.errors: list[BaseException] = []
        """Exceptions the responder (or a route) raised; the first is raised again when the ``with`` block exits."""
        self.created = 0
        """Batches created (both APIs)."""
        self.uploads = 0
        """Files uploaded."""
        self.submitted: Counter[str] = Counter()
        """custom_id -> how many times a created batch held it (across batches and both APIs)."""
        self.answered: Counter[str] = Counter()
        """custom_id -> how many times the responder ran for it."""
        self.polls: Counter[str] = Counter()
        """batch id -> how many retrieves it got."""
        self._files: dict[str, dict[str, Any]] = {}
        self._batches: dict[str, _Batch] = {}
        self._plans: deque[Plan] = deque()
        self._lock = threading.RLock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control
    @property
    def url(self) -> str:
        """``http://<host>:<port>``: an Anthropic client's ``base_url``."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>/v1``: an OpenAI client's ``base_url``."""
        return self.url + "/v1"

    def start(self) -> BatchServer:
        """Listen, and serve on a daemon thread; returns once the port is known."""
        self._httpd = _HTTPServer((self.host, self.port), self)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"batch-server-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        if self._thread is not None:
            self._thread.join(5)
        self._httpd.server_close()
        self._httpd = self._thread = None

    def __enter__(self) -> BatchServer:
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop()
        if self.errors and exc_type is None:
            raise self.errors[0]

    def plan_next(self, **fields: Any) -> Plan:
        """Queue a plan (the defaults, with `fields` changed) for the next batch created; returns it."""
        plan = dataclasses.replace(self.plan, **fields)
        with self._lock:
            self._plans.append(plan)
        return plan

    def finish(self, batch_id: str) -> None:
        """Let a ``polls=None`` batch end at its next retrieve."""
        with self._lock:
            self._batch(batch_id).released = True

    def reset(self) -> None:
        """Forget every file, batch, queued plan, counter and error."""
        with self._lock:
            for kept in (self._files, self._batches, self._plans, self.submitted, self.answered, self.polls,
                         self.errors):
                kept.clear()
            self.created = self.uploads = 0

    def resubmitted(self) -> list[str]:
        """The custom ids submitted more than once, sorted."""
        with self._lock:
            return sorted(cid for cid, n in self.submitted.items() if n > 1)

    def requests(self, batch_id: str | None = None) -> list[BatchRequest]:
        """The requests of batch `batch_id` (of every batch, in creation order, when None)."""
        with self._lock:
            batches = [self._batch(batch_id)] if batch_id else list(self._batches.values())
            return [r for b in batches for r in b.requests]

    def status(self, batch_id: str) -> str:
        """The batch's status now (OpenAI ``status``, Anthropic ``processing_status``), without a retrieve."""
        with self._lock:
            return self._batch(batch_id).status

    def stats(self) -> dict[str, Any]:
        """The counters as JSON-able data (also ``GET /_batch/stats``)."""
        with self._lock:
            return {"batches": self.created, "uploads": self.uploads, "submitted": dict(self.submitted),
                    "answered": dict(self.answered), "polls": dict(self.polls),
                    "statuses": {b.id: b.status for b in self._batches.values()},
                    "resubmitted": self.resubmitted(), "errors": [repr(e) for e in self.errors]}

    serve_until_interrupted = LoopbackServer.serve_until_interrupted  # the command line's loop (it prints PORT)

    # ------------------------------------------------------------------ batches
    def _batch(self, batch_id: str) -> _Batch:
        batch = self._batches.get(batch_id)
        if batch is None:
            raise KeyError(batch_id)
        return batch

    def _new_batch(self, batch: _Batch) -> _Batch:
        self._batches[batch.id] = batch
        self.created += 1
        for request in batch.requests:
            self.submitted[request.custom_id] += 1
        return batch

    def _next_plan(self) -> Plan:
        return self._plans.popleft() if self._plans else self.plan

    def _advance(self, b: _Batch) -> None:
        """One retrieve of `b`: move it on by its plan."""
        self.polls[b.id] += 1
        if b.ended:
            return
        now = time.time()
        if b.cancelling:
            self._end(b, cancelled=True)
            return
        if b.status == "validating":
            if b.invalid or b.plan.outcome == "failed":
                b.invalid = b.invalid or [{"code": "token_limit_exceeded", "message": b.plan.failure,
                                           "param": None, "line": None}]
                b.status, b.times["failed_at"] = "failed", now
                return
            b.status, b.times["in_progress_at"] = "in_progress", now
        b.polls += 1
        plan = b.plan
        waited = now - b.created >= plan.seconds
        if waited and (b.released or (plan.polls is not None and b.polls > plan.polls)):
            self._end(b)
        elif b.provider == "openai" and plan.outcome == "completed" and plan.polls is not None and plan.polls >= 2 \
                and b.polls == plan.polls:
            b.status, b.times["finalizing_at"] = "finalizing", now

    def _run(self, b: _Batch, done: int) -> None:
        """Answer the first `done` requests of `b` (once)."""
        if b.answers is not None:
            return
        b.answers = []
        for index, request in enumerate(b.requests):
            b.answers.append(self._answer(request) if index < done else None)

    def _answer(self, request: BatchRequest) -> Answer:
        self.answered[request.custom_id] += 1
        missing = next((k for k in _REQUIRED[request.api] if request.body.get(k) is None), None)
        if missing is not None:
            return RequestError(f"{missing}: Field required" if request.api == "messages"
                                else f"Missing required parameter: '{missing}'.", param=missing)
        try:
            answer = self.responder(request)
        except Exception as exc:
            self.errors.append(exc)
            return ServerFault(f"the responder raised {exc!r}")
        return body_for(request, answer) if isinstance(answer, (Text, ToolCall, list, tuple)) else answer

    def _end(self, b: _Batch, *, cancelled: bool = False) -> None:
        plan = b.plan
        if b.provider == "anthropic" and plan.outcome == "failed":
            done = 0  # every request errored: none ran
        elif cancelled or plan.outcome == "expired":
            done = plan.done_before_stop
        else:
            done = len(b.requests)
        self._run(b, done)
        now = time.time()
        if b.provider == "anthropic":
            _end_anthropic(b, cancelled)
            b.status, b.times["ended_at"] = "ended", now
            return
        b.status = _end_openai(b, cancelled)
        b.times.setdefault("finalizing_at", now)
        b.times[f"{b.status}_at"] = now
        for kind in ("output", "error"):
            if b.output[kind]:
                b.files[kind] = self._store(f"{b.id}_{kind}.jsonl", "batch_output", _jsonl(b, b.output[kind]))

    def _store(self, filename: str, purpose: str, data: bytes) -> str:
        file_id = _id("file-", 22)
        self._files[file_id] = {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                "filename": filename, "purpose": purpose, "status": "processed",
                                "expires_at": None, "status_details": None, "data": data}
        return file_id

    # ------------------------------------------------------------------ OpenAI
    def _files_create(self, req: _Request) -> _Reply:
        parts = _multipart(req.body, req.content_type)
        if "file" not in parts:
            return _Reply(400, openai_error("Missing required parameter: 'file'.", param="file"))
        purpose = parts.get("purpose", (None, b""))[1].decode()
        if purpose != "batch":
            return _Reply(400, openai_error(f"The batch server stores batch input only, not purpose {purpose!r}.",
                                            param="purpose"))
        self.uploads += 1
        file_id = self._store(parts["file"][0] or "upload.jsonl", purpose, parts["file"][1])
        return _Reply(200, _file_object(self._files[file_id]))

    def _file(self, file_id: str) -> dict[str, Any]:
        found = self._files.get(file_id)
        if found is None:
            raise _Refused(_Reply(404, openai_error(f"No such File object: {file_id}", param="id")))
        return found

    def _files_get(self, req: _Request, file_id: str) -> _Reply:
        return _Reply(200, _file_object(self._file(file_id)))

    def _files_content(self, req: _Request, file_id: str) -> _Reply:
        return _Reply(200, self._file(file_id)["data"], "application/octet-stream")

    def _files_delete(self, req: _Request, file_id: str) -> _Reply:
        del self._files[self._file(file_id)["id"]]
        return _Reply(200, {"id": file_id, "object": "file", "deleted": True})

    def _openai_create(self, req: _Request) -> _Reply:
        asked = req.json()
        endpoint, window = asked.get("endpoint"), asked.get("completion_window")
        if endpoint not in ENDPOINTS:
            return _Reply(400, openai_error(f"The batch server serves the endpoints {sorted(ENDPOINTS)}, not "
                                            f"{endpoint!r}.", param="endpoint"))
        if window != "24h":
            return _Reply(400, openai_error(f"Invalid value for 'completion_window': {window!r}. Supported values "
                                            "are: '24h'.", param="completion_window"))
        source = self._files.get(asked.get("input_file_id", ""))
        if source is None or source["purpose"] != "batch":
            return _Reply(400, openai_error(f"Invalid 'input_file_id': {asked.get('input_file_id')!r}. No batch input "
                                            "file has that id.", param="input_file_id"))
        batch_id = _id("batch_", 32, string.hexdigits[:16])
        requests, invalid = _parse_input(source["data"], endpoint, batch_id)
        batch = self._new_batch(_Batch(batch_id, "openai", requests, self._next_plan(), "validating",
                                       endpoint=endpoint, input_file_id=source["id"], metadata=asked.get("metadata"),
                                       invalid=invalid))
        return _Reply(200, _openai_batch(batch))

    def _found(self, batch_id: str, provider: str) -> _Batch:
        batch = self._batches.get(batch_id)
        if batch is not None and batch.provider == provider:
            return batch
        if provider == "openai":
            raise _Refused(_Reply(404, openai_error(f"No batch found with id '{batch_id}'.", code="not_found")))
        raise _Refused(_Reply(404, anthropic_error(f"Message Batch {batch_id} not found.", "not_found_error")))

    def _openai_get(self, req: _Request, batch_id: str) -> _Reply:
        batch = self._found(batch_id, "openai")
        self._advance(batch)
        return _Reply(200, _openai_batch(batch))

    def _openai_cancel(self, req: _Request, batch_id: str) -> _Reply:
        batch = self._found(batch_id, "openai")
        if not batch.ended and not batch.cancelling:
            batch.cancelling, batch.status, batch.times["cancelling_at"] = True, "cancelling", time.time()
        return _Reply(200, _openai_batch(batch))

    def _openai_list(self, req: _Request) -> _Reply:
        page = _page([b for b in self._batches.values() if b.provider == "openai"], req.query.get("after"), None,
                     int(req.query.get("limit", 20)))
        data = [_openai_batch(b) for b in page[0]]
        return _Reply(200, {"object": "list", "data": data, "has_more": page[1],
                            "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None})

    # ------------------------------------------------------------------ Anthropic
    def _anthropic_create(self, req: _Request) -> _Reply:
        asked = req.json()
        items = asked.get("requests")
        if not isinstance(items, list) or not items:
            return _Reply(400, anthropic_error("requests: Field required" if items is None else
                                               "requests: List should have at least 1 item after validation"))
        batch_id = _id("msgbatch_01", 22)
        seen: set[str] = set()
        requests = []
        for index, item in enumerate(items):
            cid, params = item.get("custom_id"), item.get("params")
            refused = _refuse_custom_id(index, cid, seen)
            if refused is None and not isinstance(params, dict):
                refused = f"requests.{index}.params: Field required"
            if refused is not None:
                return _Reply(400, anthropic_error(refused))
            seen.add(cid)
            requests.append(BatchRequest("messages", cid, params, batch_id, index + 1))
        batch = self._new_batch(_Batch(batch_id, "anthropic", requests, self._next_plan(), "in_progress"))
        return _Reply(200, self._anthropic_batch(batch))

    def _anthropic_get(self, req: _Request, batch_id: str) -> _Reply:
        batch = self._found(batch_id, "anthropic")
        self._advance(batch)
        return _Reply(200, self._anthropic_batch(batch))

    def _anthropic_cancel(self, req: _Request, batch_id: str) -> _Reply:
        batch = self._found(batch_id, "anthropic")
        if not batch.ended and not batch.cancelling:
            batch.cancelling, batch.status, batch.times["cancel_initiated_at"] = True, "canceling", time.time()
        return _Reply(200, self._anthropic_batch(batch))

    def _anthropic_results(self, req: _Request, batch_id: str) -> _Reply:
        batch = self._found(batch_id, "anthropic")
        if not batch.ended:
            return _Reply(400, anthropic_error(f"Message Batch {batch_id} has not ended: its results are not "
                                               "available yet."))
        return _Reply(200, _jsonl(batch, batch.output["results"]), "application/binary")

    def _anthropic_delete(self, req: _Request, batch_id: str) -> _Reply:
        batch = self._found(batch_id, "anthropic")
        if not batch.ended:
            return _Reply(400, anthropic_error(f"Message Batch {batch_id} is still {batch.status}: cancel it, and "
                                               "wait for it to end, before deleting it."))
        del self._batches[batch_id]
        return _Reply(200, {"id": batch_id, "type": "message_batch_deleted"})

    def _anthropic_list(self, req: _Request) -> _Reply:
        query = req.query
        batches, more = _page([b for b in self._batches.values() if b.provider == "anthropic"],
                              query.get("after_id"), query.get("before_id"), int(query.get("limit", 20)))
        data = [self._anthropic_batch(b) for b in batches]
        return _Reply(200, {"data": data, "has_more": more, "first_id": data[0]["id"] if data else None,
                            "last_id": data[-1]["id"] if data else None})

    def _anthropic_batch(self, b: _Batch) -> dict[str, Any]:
        counts = b.counts if b.ended else {"processing": len(b.requests), "succeeded": 0, "errored": 0,
                                           "canceled": 0, "expired": 0}
        return {"id": b.id, "type": "message_batch", "processing_status": b.status, "request_counts": counts,
                "ended_at": _rfc3339(b.times.get("ended_at")), "created_at": _rfc3339(b.created),
                "expires_at": _rfc3339(b.created + WINDOW), "archived_at": None,
                "cancel_initiated_at": _rfc3339(b.times.get("cancel_initiated_at")),
                "results_url": f"{self.url}/v1/messages/batches/{b.id}/results" if b.ended else None}

    # ------------------------------------------------------------------ test control
    def _control_stats(self, req: _Request) -> _Reply:
        return _Reply(200, self.stats())

    def _control_plan(self, req: _Request) -> _Reply:
        return _Reply(200, dataclasses.asdict(self.plan_next(**req.json())))

    def _control_finish(self, req: _Request, batch_id: str) -> _Reply:
        if batch_id not in self._batches:
            return _Reply(404, {"error": f"no batch {batch_id}"})
        self.finish(batch_id)
        return _Reply(200, {"ok": True})

    def _control_reset(self, req: _Request) -> _Reply:
        self.reset()
        return _Reply(200, {"ok": True})

    def _route(self, method: str, target: str, body: bytes, content_type: str) -> _Reply:
        """The reply to one HTTP request (under the lock: the state changes one request at a time)."""
        parts = urlsplit(target)
        req = _Request(body, content_type, {k: v[-1] for k, v in parse_qs(parts.query).items()})
        for verb, pattern, name in _ROUTES:
            match = pattern.fullmatch(parts.path.rstrip("/"))
            if verb == method and match:
                with self._lock:
                    try:
                        return getattr(self, name)(req, *match.groups())
                    except _Refused as refused:
                        return refused.reply
                    except Exception as exc:  # a bug of the server, or a control call it cannot follow
                        self.errors.append(exc)
                        return _Reply(500, openai_error(f"batch server: {exc!r}", "server_error"))
        if parts.path.startswith("/v1/messages"):
            return _Reply(404, anthropic_error(f"no route {method} {parts.path}", "not_found_error"))
        return _Reply(404, openai_error(f"Invalid URL ({method} {parts.path})"))


_REQUIRED = {"chat": ("model", "messages"), "responses": ("model",), "messages": ("model", "max_tokens", "messages")}
_ID = r"([^/]+)"
_ROUTES = [(verb, re.compile(path), name) for verb, path, name in [
    ("POST", "/v1/files", "_files_create"),
    ("GET", f"/v1/files/{_ID}", "_files_get"),
    ("GET", f"/v1/files/{_ID}/content", "_files_content"),
    ("DELETE", f"/v1/files/{_ID}", "_files_delete"),
    ("POST", "/v1/batches", "_openai_create"),
    ("GET", "/v1/batches", "_openai_list"),
    ("GET", f"/v1/batches/{_ID}", "_openai_get"),
    ("POST", f"/v1/batches/{_ID}/cancel", "_openai_cancel"),
    ("POST", "/v1/messages/batches", "_anthropic_create"),
    ("GET", "/v1/messages/batches", "_anthropic_list"),
    ("GET", f"/v1/messages/batches/{_ID}", "_anthropic_get"),
    ("GET", f"/v1/messages/batches/{_ID}/results", "_anthropic_results"),
    ("POST", f"/v1/messages/batches/{_ID}/cancel", "_anthropic_cancel"),
    ("DELETE", f"/v1/messages/batches/{_ID}", "_anthropic_delete"),
    ("GET", "/_batch/stats", "_control_stats"),
    ("POST", "/_batch/plan", "_control_plan"),
    ("POST", f"/_batch/finish/{_ID}", "_control_finish"),
    ("POST", "/_batch/reset", "_control_reset"),
]]


# ------------------------------------------------------------------------------------ input and output
def _refuse_custom_id(index: int, cid: Any, seen: set[str]) -> str | None:
    """Anthropic's 400 message for request `index`'s custom id, or None when it is fine."""
    if not isinstance(cid, str):
        return f"requests.{index}.custom_id: Field required"
    if len(cid) > 64:  # the message of anthropics/anthropic-sdk-python issue #984
        return f"requests.{index}.custom_id: String should have at most 64 characters"
    if not _CUSTOM_ID.fullmatch(cid):
        return f"requests.{index}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
    if cid in seen:
        return f"requests.{index}.custom_id: Duplicate custom_id {cid!r}: custom ids must be unique within a batch."
    return None


def _parse_input(data: bytes, endpoint: str, batch_id: str) -> tuple[list[BatchRequest], list[dict[str, Any]]]:
    """An OpenAI input file's requests, and its validation errors (as ``errors.data`` reports them)."""
    requests: list[BatchRequest] = []
    invalid: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            cid, url, body = line["custom_id"], line["url"], dict(line["body"])
        except (ValueError, KeyError, TypeError):
            invalid.append({"code": "invalid_json_line", "line": number, "param": None,
                            "message": "This line is not parseable as valid JSON."})
            continue
        if url != endpoint:
            invalid.append({"code": "url_mismatch", "line": number, "param": "url",
                            "message": f"The provided URL '{url}' does not match the batch endpoint '{endpoint}'."})
        elif cid in seen:
            invalid.append({"code": "duplicate_custom_id", "line": number, "param": "custom_id", "message": DUPLICATE})
        seen.add(cid)
        requests.append(BatchRequest(ENDPOINTS[endpoint], str(cid), body, batch_id, number))  # type: ignore[arg-type]
    if not requests and not invalid:
        invalid.append({"code": "empty_file", "line": None, "param": None,
                        "message": "The batch input file is empty. Please upload a file with at least one request."})
    return requests, invalid


def _usage_of(body: dict[str, Any]) -> tuple[int, int]:
    usage = body.get("usage") or {}
    return (usage.get("prompt_tokens", usage.get("input_tokens", 0)),
            usage.get("completion_tokens", usage.get("output_tokens", 0)))


def _end_openai(b: _Batch, cancelled: bool) -> str:
    """Write `b`'s output and error lines, counts and usage from its answers; returns its final status."""
    output: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    expired = b.plan.outcome == "expired" and not cancelled
    tokens_in = tokens_out = 0
    for request, answer in zip(b.requests, b.answers or (), strict=True):
        line: dict[str, Any] = {"id": "batch_req_" + secrets.token_hex(16), "custom_id": request.custom_id,
                                "response": None, "error": None}
        if answer is None and cancelled:
            continue  # never ran: in no file
        if answer is None or isinstance(answer, RequestExpired):
            line["error"], expired = dict(EXPIRED_LINE), True
        elif isinstance(answer, ServerFault):
            line["error"] = {"code": answer.code, "message": answer.message}
        elif isinstance(answer, RequestError):  # the shape openai/openai-openapi issue #302 shows from a real file
            line["response"] = {"status_code": answer.status, "request_id": secrets.token_hex(16),
                                "body": openai_error(answer.message, answer.type, answer.param, answer.code)}
        else:
            line["response"] = {"status_code": 200, "request_id": secrets.token_hex(16), "body": answer}
            tokens = _usage_of(answer)  # type: ignore[arg-type]
            tokens_in, tokens_out = tokens_in + tokens[0], tokens_out + tokens[1]
        (output if line["response"] and line["response"]["status_code"] == 200 else errors).append(line)
    b.output = {"output": output, "error": errors}
    b.counts = {"total": len(b.requests), "completed": len(output), "failed": len(errors)}
    b.usage = {"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}
    return "cancelled" if cancelled else "expired" if expired else "completed"


def _end_anthropic(b: _Batch, cancelled: bool) -> None:
    """Write `b`'s result lines and counts from its answers."""
    results: list[dict[str, Any]] = []
    counts = Counter({"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0})
    failed = b.plan.outcome == "failed" and not cancelled
    for request, answer in zip(b.requests, b.answers or (), strict=True):
        if failed:
            answer = ServerFault(b.plan.failure)
        if answer is None:
            result: dict[str, Any] = {"type": "canceled" if cancelled else "expired"}
        elif isinstance(answer, RequestExpired):
            result = {"type": "expired"}
        elif isinstance(answer, (RequestError, ServerFault)):
            kind, message = ("api_error", answer.message) if isinstance(answer, ServerFault) else (
                answer.type, answer.message)
            result = {"type": "errored", "error": {"type": "error", "error": {"type": kind, "message": message}}}
        else:
            result = {"type": "succeeded", "message": answer}
        counts[result["type"]] += 1
        results.append({"custom_id": request.custom_id, "result": result})
    b.output = {"results": results}
    b.counts = dict(counts)


def _jsonl(b: _Batch, lines: list[dict[str, Any]]) -> bytes:
    """`lines` as the JSONL bytes `b`'s plan asks for (shuffled, blank lines, duplicated lines)."""
    out = list(lines)
    if b.plan.shuffle and len(out) > 1:
        order = list(range(len(out)))
        random.Random(b.id).shuffle(order)  # seeded by the batch: the same order at every download
        if order == sorted(order):
            order.reverse()
        out = [out[i] for i in order]
    out += out[: b.plan.duplicate_lines]
    text = [json.dumps(line) for line in out]
    if b.plan.blank_lines:
        return ("\n" + "\n\n".join(text) + "\n\n").encode()
    return ("\n".join(text) + "\n").encode()


def _page(batches: list[_Batch], after: str | None, before: str | None, limit: int) -> tuple[list[_Batch], bool]:
    """A list page, newest first, after (or before) the batch with that id."""
    newest = sorted(batches, key=lambda b: b.created, reverse=True)
    ids = [b.id for b in newest]
    if after in ids:
        newest = newest[ids.index(after) + 1:]
    elif before in ids:
        newest = newest[: ids.index(before)][-limit:]
    return newest[:limit], len(newest) > limit


def _openai_batch(b: _Batch) -> dict[str, Any]:
    counts = {k: b.counts[k] for k in ("total", "completed", "failed")} if b.counts else {
        "total": 0 if b.invalid else len(b.requests), "completed": 0, "failed": 0}
    times = {name: int(b.times[name]) if name in b.times else None for name in (
        "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at")}
    usage = b.usage or {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    return {
        "id": b.id, "object": "batch", "endpoint": b.endpoint, "model": next(
            (r.body.get("model") for r in b.requests if isinstance(r.body, dict)), None),
        "errors": {"object": "list", "data": b.invalid} if b.invalid and b.status == "failed" else None,
        "input_file_id": b.input_file_id, "completion_window": "24h", "status": b.status,
        "output_file_id": b.files.get("output"), "error_file_id": b.files.get("error"),
        "created_at": int(b.created), "expires_at": int(b.created + WINDOW), **times,
        "request_counts": counts, "metadata": b.metadata,
        "usage": {**usage, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }


def _file_object(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "data"}


def _multipart(body: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a ``multipart/form-data`` body: name -> (filename or None, bytes)."""
    found = re.search(r'boundary="?([^";]+)"?', content_type)
    if found is None:
        return {}
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in body.split(b"--" + found.group(1).encode())[1:]:
        head, sep, data = part.partition(b"\r\n\r\n")
        if not sep:
            continue
        disposition = head.decode("utf-8", "replace")
        name = re.search(r'\bname="([^"]*)"', disposition)
        filename = re.search(r'\bfilename="([^"]*)"', disposition)
        if name:
            fields[name.group(1)] = (filename.group(1) if filename else None, data.removesuffix(b"\r\n"))
    return fields


# ------------------------------------------------------------------------------------ HTTP
class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], owner: BatchServer) -> None:
        self.owner = owner
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client killed mid-request (kill -9) is part of the tests
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nbagent-batch/1"
    wbufsize = -1  # the head and body leave in one send (flushed after each request), not two:
    disable_nagle_algorithm = True  # two small sends on a keep-alive connection cost a 40 ms delayed ACK
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # nothing is logged: no request line, no header, no key

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _serve(self) -> None:
        body = self._body()
        reply = self.server.owner._route(self.command, self.path, body, self.headers.get("Content-Type", ""))
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.data)))
        self.send_header("x-request-id" if "/messages/" not in self.path else "request-id", _id("req_", 24))
        self.end_headers()
        self.wfile.write(reply.data)

    do_GET = do_POST = do_DELETE = _serve


def fetch_stats(url: str) -> dict[str, Any]:
    """``GET <url>/_batch/stats`` of a server in another process (``url``: its `BatchServer.url`)."""
    from urllib.request import urlopen

    with urlopen(f"{url}/_batch/stats", timeout=10) as answer:
        return json.loads(answer.read())


def _load(spec: str) -> Responder:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name or "auto")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="keep it on loopback")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--polls", type=int, default=1, help="retrieves that still see a batch running")
    parser.add_argument("--seconds", type=float, default=0.0, help="and at least this long")
    parser.add_argument("--responder", default="tests.wire.batch_answers:auto", help="module:name of a responder")
    args = parser.parse_args(argv)
    server = BatchServer(_load(args.responder), host=args.host, port=args.port, polls=args.polls,
                         seconds=args.seconds).start()
    server.serve_until_interrupted()


if __name__ == "__main__":
    main()
