"""Everything pages share: settings, the bridge, the engine host, telemetry control, the API
server service, the attached servers (remote)."""

from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject, Signal

from .api_key_store import ApiKeyStore
from .bridge import EngineBridge
from .engine_host import EngineHost
from .fleet_control import FleetControl
from .loads import LoadTracker, connect_host
from .remote_host import RemoteHost
from .server_service import ServerService
from .telemetry_control import TelemetryControl

log = logging.getLogger(__name__)


class ConsoleContext(QObject):
    server_state_changed = Signal(str, str)  # lamp state, text (the Server page emits it)

    def __init__(self, settings, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.bridge = EngineBridge(self)
        self.engine_host = EngineHost(self.bridge, self)
        # the model loads in flight, with stage and percent (the chat page and dashboard show it)
        self.loads = LoadTracker()
        connect_host(self.loads, self.engine_host)
        self.telemetry = TelemetryControl(self.bridge, engine_stats=self._engine_stats, parent=self)
        # the API server, its key (the keyring or a 0600 file, never the INI) and queue limit
        self.server = ServerService(lambda: self.bridge.engine, ApiKeyStore(settings),
                                    lambda: self.telemetry.poller)
        # the servers attached with File > Connect to server; `engines` is every engine the
        # pages can target (this console's and each server's)
        self.remote = RemoteHost(settings, lambda: self.bridge.engine,
                                 fleet=lambda: getattr(self, "fleet", None), parent=self)
        self.engines = self.remote.engines
        # every attached server watched at once for the dashboard's host cards (add_server /
        # remove_server; its polling threads never block the window)
        self.fleet = FleetControl(self)
        self._shut = False

    def _engine_stats(self):
        engine = self.bridge.engine
        return engine.stats() if engine is not None else None

    @property
    def closed(self) -> bool:
        return self._shut

    def shutdown(self, timeout: float = 2.5) -> float:
        """Stop loads, streams, telemetry and the engine; returns the seconds it took."""
        if self._shut:
            return 0.0
        self._shut = True
        t0 = time.monotonic()
        self.fleet.close()
        self.engine_host.shutdown()
        self.bridge.shutdown(timeout)
        self.remote.shutdown()
        elapsed = time.monotonic() - t0
        lingering = [t.name for t in threading.enumerate()
                     if t.is_alive() and not t.daemon and t is not threading.main_thread()]
        if lingering:
            log.warning("threads still running after shutdown: %s", lingering)
        return elapsed
