"""Listening-socket checks, stdlib only: the GUI's port field asks these on its own thread,
where importing the web stack (engine.api.server pulls in uvicorn) is not wanted."""

from __future__ import annotations

import errno
import socket


class ServerStartError(RuntimeError):
    """The server could not start; the message is one plain sentence for the user."""


class PortInUseError(ServerStartError):
    def __init__(self, host: str, port: int):
        super().__init__(f"port {port} on {host} is already in use: stop the other server or "
                         f"choose another port")
        self.host = host
        self.port = port


def bound_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (not yet listening), or a ServerStartError in one line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ServerStartError(f"cannot resolve host '{host}': {exc.strerror}") from None
    family, socktype, proto, _, addr = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        # as uvicorn does: a previous run's TIME_WAIT connections must not block a restart
        # (on Linux this never lets two servers listen on one port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(host, port) from None
        if exc.errno == errno.EACCES:
            raise ServerStartError(f"no permission to listen on port {port} (ports below 1024 "
                                   f"need privileges): choose another port") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ServerStartError(f"address {host} is not an address of this machine") from None
        raise ServerStartError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (a bind attempt, not a guess)."""
    try:
        bound_socket(host, port).close()
    except PortInUseError:
        return True
    return False


def port_problem(host: str, port: int) -> str | None:
    """Why host:port cannot be listened on, in one sentence, or None when it is free."""
    try:
        bound_socket(host, port).close()
    except ServerStartError as exc:
        return str(exc)
    return None
