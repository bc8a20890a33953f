"""A loopback TCP proxy that cuts connections, for the store's lost-connection tests.

`CutProxy(port)` forwards 127.0.0.1:<proxy.port> to 127.0.0.1:<port>. ``cut_at = n`` makes it
cut the connection that carries the n-th message sent by a client (counted over every
connection, from 1): the message is dropped and both sockets are reset, as when a network or
a pooler fails mid-statement. ``cut_at = None`` forwards everything.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any


class CutProxy:
    def __init__(self, port: int) -> None:
        self.upstream = port
        self.cut_at: int | None = None
        self.sent = 0
        self.cuts = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """`url` (a ``postgresql://...@127.0.0.1:<port>/...`` URL) pointed at the proxy."""
        return url.replace(f":{self.upstream}/", f":{self.port}/")

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_client:
                    with self._lock:
                        self.sent += 1
                        cut = self.cut_at is not None and self.sent == self.cut_at
                    if cut:
                        self.cuts += 1
                        _reset(src)
                        _reset(dst)
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _reset(dst)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            for sock in self._open:
                _reset(sock)

    def __enter__(self) -> CutProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), not a clean FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
