"""Starts and swaps the telemetry poller (live source or replayed npu-smi captures)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from .threads import start_thread

log = logging.getLogger(__name__)

LIVE_INTERVAL_S = 2.0
REPLAY_INTERVAL_S = 1.0


class TelemetryControl(QObject):
    source_changed = Signal(str)  # a human description: "live (npu-smi)", "replay: a.txt, b.txt"

    def __init__(self, bridge, engine_stats: Callable | None = None, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.engine_stats = engine_stats
        self.poller = None
        self.description = "not started"
        self.replay_files: tuple[str, ...] = ()

    def start_live(self) -> None:
        from ..engine.telemetry import make_provider

        self._swap(make_provider("auto"), LIVE_INTERVAL_S, ())

    def start_replay(self, files) -> None:
        """Replay captures in order, one per poll (cycled); a folder stands for its table captures
        with their sub-command captures (chip details). Raises ValueError for missing paths."""
        from ..engine.telemetry import make_provider

        files = tuple(str(Path(f)) for f in files)
        missing = [f for f in files if not Path(f).exists()]
        if missing:
            raise ValueError(f"capture not found: {missing[0]}")
        if not files:
            raise ValueError("no capture files given")
        self._swap(make_provider("replay", replay_files=files), REPLAY_INTERVAL_S, files)

    def _swap(self, provider, interval: float, files: tuple[str, ...]) -> None:
        from ..engine.telemetry import TelemetryPoller, default_rules

        old = self.poller
        poller = TelemetryPoller(provider, interval_s=interval, rules=default_rules(),
                                 engine_stats=self.engine_stats)
        self.poller = poller
        self.replay_files = files
        self.bridge.set_poller(poller)  # subscribe before the first sample: alerts fire once
        # a first synchronous sample so the page never opens on an empty dashboard; replay and
        # host sampling take milliseconds (live npu-smi is polled on its own thread from here on)
        if files or getattr(provider, "name", "") in ("host",):
            poller.poll_once()
        poller.start()
        if old is not None:
            # npu-smi can take seconds to return; never wait for it on the GUI thread
            start_thread(old.stop, "poller-stop")
        if files:
            self.description = "replay: " + ", ".join(Path(f).name for f in files)
        else:
            self.description = f"live ({getattr(provider, 'name', 'auto')})"
        self.source_changed.emit(self.description)

    def stop(self) -> None:
        if self.poller is not None:
            self.poller.stop()
