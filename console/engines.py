"""The engines the console can send work to: its own (LOCAL) and one RemoteEngine per connected
server, each under a label the pages show ("smollm2 @ 10.0.0.5:8000"). No Qt here; the
console's RemoteHost (console/remote_host.py) drives it from worker threads: connect() and
refresh() make HTTP calls and block, so the GUI thread never calls them.

A connection keeps what was last read from its server (models, stats, the last error), so a
page can draw a remote server without waiting on the network."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..engine.remote.urls import normalize_base_url

log = logging.getLogger(__name__)

LOCAL = "local"


def host_label(url: str) -> str:
    """host:port of a base URL (what the status bar and the model pickers show)."""
    return urlsplit(url).netloc or url


@dataclass
class Connection:
    url: str
    name: str
    engine: Any  # engine.remote.client.RemoteEngine (an EngineClient)
    keyed: bool = False  # the console sends a key to it
    models: list = field(default_factory=list)  # ModelInfo, as last read
    stats: Any = None  # EngineStats, as last read
    error: str = ""  # the last refresh's failure ("" when it answered)
    refreshed: bool = False  # answered (or failed) at least once

    @property
    def host(self) -> str:
        return host_label(self.url)

    @property
    def label(self) -> str:
        return self.name or self.host

    @property
    def reachable(self) -> bool:
        return self.refreshed and not self.error


@dataclass(frozen=True)
class ModelChoice:
    """One entry of a model picker: a model on an engine."""

    target: str  # LOCAL or a server's base URL
    model: str
    label: str  # the model's name for LOCAL, "name @ host" for a server's
    info: Any = None  # its ModelInfo


def remote_engine(url: str, api_key: str | None):
    from ..engine.remote.client import RemoteEngine

    # a short connect timeout: a server that went away must fail a chat in seconds
    return RemoteEngine(url, api_key or None, connect_timeout_s=5.0, poll_interval_s=2.0)


class Engines:
    def __init__(self, local: Callable[[], Any],
                 make_remote: Callable[[str, str | None], Any] = remote_engine):
        self._local = local  # the console's own engine, once it exists
        self._make_remote = make_remote
        self._lock = threading.Lock()
        self._conns: dict[str, Connection] = {}

    # ------------------------------------------------------------------ connections
    def connect(self, url: str, api_key: str | None = None, name: str = "") -> Connection:
        """Attach to the server at `url` (replacing an earlier connection to it). Does not wait
        for the server: refresh() reads its models."""
        url = normalize_base_url(url)
        conn = Connection(url, name.strip(), self._make_remote(url, api_key),
                          keyed=bool(api_key))
        with self._lock:
            old = self._conns.pop(url, None)
            self._conns[url] = conn
        if old is not None:
            old.engine.shutdown(timeout=1.0)
        return conn

    def detach(self, url: str) -> Connection | None:
        """Drop the connection without closing its engine (the caller closes it, off the GUI
        thread: closing waits for its streams to end)."""
        with self._lock:
            return self._conns.pop(normalize_base_url(url), None)

    def disconnect(self, url: str) -> bool:
        conn = self.detach(url)
        if conn is not None:
            conn.engine.shutdown(timeout=1.0)
        return conn is not None

    def connections(self) -> list[Connection]:
        with self._lock:
            return list(self._conns.values())

    def get(self, target: str) -> Connection | None:
        with self._lock:
            return self._conns.get(target)

    def refresh(self, url: str) -> Connection | None:
        """Read the server's models and stats now (blocking; a worker thread calls it)."""
        conn = self.get(url)
        if conn is None:
            return None
        from ..engine.runtime.types import EngineError

        try:
            conn.models = conn.engine.models()
            conn.error = ""
        except EngineError as exc:
            conn.error = exc.message
        except Exception as exc:  # noqa: BLE001 - a server answering nonsense is an error too
            conn.error = f"{type(exc).__name__}: {exc}"
        conn.stats = conn.engine.stats()
        conn.refreshed = True
        return conn

    # ------------------------------------------------------------------ targets
    def engine_for(self, target: str | None):
        """The EngineClient behind a target (LOCAL, None or a server URL); None when gone."""
        if target in (None, "", LOCAL):
            return self._local()
        conn = self.get(target)
        return conn.engine if conn is not None else None

    def label_for(self, target: str | None) -> str:
        conn = None if target in (None, "", LOCAL) else self.get(target)
        return conn.host if conn is not None else "this console"

    def choices(self, local_models: list) -> list[ModelChoice]:
        """Every model the pickers offer: the console's own first, then each server's."""
        out = [ModelChoice(LOCAL, m.name, m.name, m) for m in local_models]
        for conn in self.connections():
            out += [ModelChoice(conn.url, m.name, f"{m.name} @ {conn.label}", m)
                    for m in conn.models]
        return out

    def shutdown(self, timeout: float = 1.0) -> None:
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            try:
                conn.engine.shutdown(timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - closing regardless
                log.debug("closing %s: %s", conn.url, exc)
