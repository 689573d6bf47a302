"""Connections that never finish their request headers are closed: uvicorn times out idle
keep-alive connections, but not a client that sends its headers one byte at a time (it would
hold a socket and a file descriptor for as long as it likes, and enough of them exhaust the
process's descriptors). The protocol classes below are uvicorn's own with a header deadline:
armed when a connection opens, and again when the first bytes of a next request arrive;
disarmed once a request's headers are complete. On expiry the client gets 408 and is closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

REQUEST_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
                   b"content-length: 40\r\nconnection: close\r\n\r\n"
                   b"request headers did not arrive in time\r\n")


class _HeaderDeadline:
    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._cycle_seen: Any = None
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        if cycle is not None and cycle is not self._cycle_seen:
            self._cycle_seen = cycle  # a request's headers are complete
            self._disarm_header_timer()
        elif self._header_timer is None and (cycle is None or cycle.response_complete):
            self._arm_header_timer()  # the first bytes of a next request

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        cycle = self.cycle
        if self.transport.is_closing() or (cycle is not None and not cycle.response_complete):
            return
        self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()


def protocol_class(header_timeout_s: float) -> type:
    """uvicorn's HTTP protocol (httptools where installed, else h11) with a header deadline."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # httptools missing: the pure-Python parser
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return type(f"HeaderDeadline{base.__name__}", (_HeaderDeadline, base),
                {"header_timeout_s": header_timeout_s})
