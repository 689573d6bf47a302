"""The servers the console is attached to (File > Connect to server): the Qt side of
console.engines.Engines and console.servers.ServerStore.

Attaching, refreshing a server's models and stats, and closing a connection make HTTP calls;
they run on worker threads (console.threads) and come back to the GUI thread through a queued
private signal, so the public signals are always emitted on the GUI thread. Every REFRESH_MS a
refresh of each server starts unless the previous one is still waiting on it (a server that
went away answers within the connect timeout, and never more than one refresh waits on it).

Connecting also hands the server to the fleet monitor (ctx.fleet, where the console has one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ..engine.remote.urls import normalize_base_url
from .engines import LOCAL, Connection, Engines, host_label
from .gui_thread import post
from .servers import ServerStore
from .threads import start_thread

log = logging.getLogger(__name__)

REFRESH_MS = 3000


class RemoteHost(QObject):
    changed = Signal()  # a connection came or went, or its models / stats were read again
    connected = Signal(str, str)  # url, error ("" when it answered)
    focus_changed = Signal(str)  # where the numbers on show come from: LOCAL or a server URL

    def __init__(self, settings, local_engine: Callable[[], Any],
                 fleet: Callable[[], Any] = lambda: None, parent=None):
        super().__init__(parent)
        self.engines = Engines(local_engine)
        self.servers = ServerStore(settings)
        self._fleet = fleet
        self.focus = LOCAL
        self._pending: dict[str, tuple[str, str | None, bool]] = {}  # url -> name, key, remember
        self._refreshing: set[str] = set()
        self._closing = False
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh_all)
        self.timer.start()

    # ------------------------------------------------------------------ connect / disconnect
    def connect_server(self, url: str, api_key: str = "", name: str = "",
                       remember: bool = True) -> str:
        """Attach to `url` off the GUI thread; `connected(url, error)` follows. Returns the
        normalized URL; raises ValueError for a URL that is not http(s)."""
        url = normalize_base_url(url)
        key = (api_key or "").strip() or None
        self._pending[url] = (name.strip(), key, remember)

        def work():
            error = ""
            try:
                self.engines.connect(url, key, name)
                conn = self.engines.refresh(url)
                error = conn.error if conn is not None else "disconnected meanwhile"
            except Exception as exc:  # noqa: BLE001 - one sentence for the menu / dialog
                error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            post(self._on_done, "connected", url, error)

        start_thread(work, f"connect-{host_label(url)}")
        return url

    def reconnect(self, url: str) -> str:
        """Attach again to a remembered server with its stored key."""
        saved = self.servers.get(url)
        return self.connect_server(url, self.servers.key(url), saved.name if saved else "")

    def disconnect(self, url: str) -> bool:
        conn = self.engines.detach(url)
        if conn is None:
            return False
        fleet = self._fleet()
        if fleet is not None and hasattr(fleet, "remove_server"):
            try:
                fleet.remove_server(conn.url)
            except Exception as exc:  # noqa: BLE001 - the fleet view is not ours to break
                log.warning("fleet remove %s: %s", conn.url, exc)
        # closing waits for its streams (cancelled) to end: not on the GUI thread
        start_thread(lambda: conn.engine.shutdown(timeout=2.0), f"close-{conn.host}")
        if self.focus == conn.url:
            self.set_focus(LOCAL)
        self.changed.emit()
        return True

    def forget(self, url: str) -> bool:
        """Disconnect and drop the server and its key from what is remembered."""
        self.disconnect(url)
        forgotten = self.servers.forget(url)
        self.changed.emit()
        return forgotten

    def connections(self) -> list[Connection]:
        return self.engines.connections()

    def is_connected(self, url: str) -> bool:
        return self.engines.get(normalize_base_url(url)) is not None

    # ------------------------------------------------------------------ refresh
    def refresh_all(self) -> None:
        for conn in self.engines.connections():
            self.refresh(conn.url)

    def refresh(self, url: str) -> None:
        if self._closing or url in self._refreshing:
            return
        self._refreshing.add(url)

        def work():
            error = ""
            try:
                conn = self.engines.refresh(url)
                error = conn.error if conn is not None else ""
            except Exception as exc:  # noqa: BLE001 - the next refresh tries again
                error = str(exc)
            post(self._on_done, "refreshed", url, error)

        start_thread(work, f"refresh-{host_label(url)}")

    def _on_done(self, what: str, url: str, error: str) -> None:
        if self._closing:
            return
        if what == "refreshed":
            self._refreshing.discard(url)
        elif what == "connected":
            name, key, remember = self._pending.pop(url, ("", None, False))
            conn = self.engines.get(url)
            if remember and not error:
                self.servers.remember(url, name, key)
            if conn is not None:
                self._add_to_fleet(conn, key)
            # views (the Server page's picker, the menus) first, so whoever reacts to
            # `connected` finds the server listed everywhere
            self.changed.emit()
            self.connected.emit(url, error)
            return
        self.changed.emit()

    def _add_to_fleet(self, conn: Connection, key: str | None) -> None:
        fleet = self._fleet()
        if fleet is None or not hasattr(fleet, "add_server"):
            return
        try:
            from ..engine.remote.fleet import ServerRef

            fleet.add_server(ServerRef(conn.url, key, conn.name))
        except Exception as exc:  # noqa: BLE001 - chat and benchmark work without the fleet
            log.warning("fleet add %s: %s", conn.url, exc)

    # ------------------------------------------------------------------ where numbers come from
    def set_focus(self, target: str | None) -> None:
        """The page on show says whose numbers it shows (LOCAL or a server URL)."""
        target = target or LOCAL
        if target != LOCAL and self.engines.get(target) is None:
            target = LOCAL
        if target != self.focus:
            self.focus = target
            self.focus_changed.emit(target)

    def focus_text(self) -> str:
        """The status bar's engine text when the focus is a server ("" for LOCAL)."""
        conn = None if self.focus == LOCAL else self.engines.get(self.focus)
        if conn is None:
            return ""
        if conn.error:
            return f"engine: {conn.host} · unreachable"
        state = conn.stats.state if conn.stats is not None else "connecting"
        return f"engine: {conn.host} · {state}"

    def shutdown(self) -> None:
        self._closing = True
        self.timer.stop()
        self.engines.shutdown()
