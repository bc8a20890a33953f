"""A loopback HTTP server that answers with given bodies, for provider tests of odd answers.

``with answering((content_type, body), ...) as url:`` answers each POST with the next reply
(status 200, that ``Content-Type``, a ``Content-Length``, and the extra headers of a reply given
as ``(content_type, body, headers)``, the status of one given as ``(content_type, body, headers,
status)``); after the last one it keeps giving the last. ``url`` is ``http://127.0.0.1:<port>``.
``seen``, when given, gets each request's path (with its query), in order; ``heard`` its headers
(names in lower case).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextlib.contextmanager
def answering(*replies: tuple[Any, ...], seen: list[str] | None = None,
              heard: list[dict[str, str]] | None = None) -> Iterator[str]:
    queue = list(replies)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if seen is not None:
                seen.append(self.path)
            if heard is not None:
                heard.append({k.lower(): v for k, v in self.headers.items()})
            content_type, body, *rest = queue.pop(0) if len(queue) > 1 else queue[0]
            self.send_response(rest[1] if len(rest) > 1 else 200)
            self.send_header("Content-Type", content_type)
            for key, value in (rest[0] if rest else {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with _serving(Handler) as url:
        yield url


@contextlib.contextmanager
def streaming(chunks: list[bytes], headers: dict[str, str] | None = None) -> Iterator[str]:
    """``with streaming(chunks, headers) as url:`` answers each POST with an event stream sent in
    `chunks` (``Transfer-Encoding: chunked``, and `headers`), each written and flushed on its own,
    as a server or proxy may cut it anywhere."""
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in chunks:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

    with _serving(Handler) as url:
        yield url


def cut(data: bytes, sizes: list[int]) -> list[bytes]:
    """`data` cut into pieces of `sizes` (and the rest), as `streaming` sends them."""
    out, at = [], 0
    for size in sizes:
        out.append(data[at:at + size])
        at += size
    return [*out, data[at:]] if at < len(data) else out


@contextlib.contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
