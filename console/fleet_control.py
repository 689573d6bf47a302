"""The fleet monitor (engine/remote/fleet.py) as Qt signals on the GUI thread: `ctx.fleet`.

The monitor's polling threads (it starts them, like RemoteEngine does its own) call back on
their threads; here each snapshot is parked under its URL and one posted call
(console.gui_thread) wakes the GUI thread, which takes the newest snapshot of every host at
once. So a burst of polls costs one wake-up, nothing on the GUI thread waits on a lock held across a request, and a host removed
meanwhile is never drawn again.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, Signal

from ..engine.remote.fleet import FleetMonitor, HostSnapshot, ServerRef
from ..engine.remote.urls import normalize_base_url
from .gui_thread import post

log = logging.getLogger(__name__)


class FleetControl(QObject):
    host_changed = Signal(object)  # fleet.HostSnapshot, on the GUI thread
    host_removed = Signal(str)  # the URL of a host no longer watched

    def __init__(self, parent=None, poll_s: float | None = None):
        super().__init__(parent)
        self.monitor = FleetMonitor() if poll_s is None else FleetMonitor(poll_s)
        self.hosts: dict[str, HostSnapshot] = {}  # the newest of each host (GUI thread)
        self._pending: dict[str, HostSnapshot] = {}
        self._lock = threading.Lock()
        self._woken = False
        self._closed = False
        self._unsubscribe = self.monitor.subscribe(self._arrived)

    # ------------------------------------------------------------------ the attach side
    def add_server(self, ref: ServerRef) -> ServerRef:
        """Watch a server (returns at once; ValueError for a URL that is not http(s)). Adding
        a URL again replaces its key and name."""
        ref = self.monitor.add(ref)
        snap = self.monitor.snapshot(ref.url)
        if snap is not None:
            self.hosts[ref.url] = snap
            self.host_changed.emit(snap)
        return ref

    def remove_server(self, url: str) -> bool:
        url = normalize_base_url(url)
        removed = self.monitor.remove(url)
        if self.hosts.pop(url, None) is not None or removed:
            self.host_removed.emit(url)
        return removed

    def refs(self) -> list[ServerRef]:
        return self.monitor.refs()

    def snapshot(self, url: str) -> HostSnapshot | None:
        return self.hosts.get(url)

    def history(self, url: str, key: str, seconds: float | None = None):
        return self.monitor.history(url, key, seconds)

    # ------------------------------------------------------------------ worker -> GUI
    def _arrived(self, snap: HostSnapshot) -> None:
        """On a polling thread: park the snapshot, wake the GUI thread once."""
        with self._lock:
            self._pending[snap.url] = snap
            if self._woken or self._closed:
                return
            self._woken = True
        post(self._drain)

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            self._woken = False
        watched = {r.url for r in self.monitor.refs()}
        for url, snap in pending.items():
            if url in watched:  # not one removed since it was polled
                self.hosts[url] = snap
                self.host_changed.emit(snap)

    def close(self) -> None:
        """Stop watching (returns at once: each worker ends after its request in flight)."""
        with self._lock:
            self._closed = True
        self._unsubscribe()
        self.monitor.close()
