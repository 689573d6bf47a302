"""A hostile HTTP server on loopback, for the tests that a remote server cannot take the console
down (issue 35): real sockets, answers written byte by byte as a test scripts them.

    with HostileServer(handler) as url: ...

`handler(method, path)` returns an iterable of (bytes, pause_s): each piece is written, then the
server sleeps; it runs on its own thread per connection, so a trickling answer holds nothing
else up. The helpers below build the usual answers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable

Pieces = Iterable[tuple[bytes, float]]


def head(status: int = 200, content_type: str = "application/json",
         length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_answer(obj, status: int = 200) -> Pieces:
    body = json.dumps(obj).encode()
    return [(head(status, length=len(body)) + body, 0.0)]


def trickle(data: bytes, pause_s: float) -> Pieces:
    """`data` one byte at a time, `pause_s` apart."""
    return [(data[i:i + 1], pause_s) for i in range(len(data))]


def endless(piece: bytes, total: int) -> Pieces:
    """`total` bytes of `piece` repeated, as fast as the client reads (no length given)."""
    sent = 0
    while sent < total:
        yield piece, 0.0
        sent += len(piece)


class HostileServer:
    def __init__(self, handler: Callable[[str, str], Pieces]):
        self.handler = handler
        self.requests: list[tuple[str, str]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="hostile-http")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                method, path = data.split(b" ", 2)[:2]
                self.requests.append((method.decode(), path.decode()))
                for piece, pause in self.handler(method.decode(), path.decode()):
                    if self._stop.is_set():
                        return
                    conn.sendall(piece)
                    if pause:
                        time.sleep(pause)
            except OSError:
                return  # the client hung up: what a client under test should do
