"""The telemetry poller: one thread that samples a source every `interval_s`, keeps history,
evaluates alert rules and hands immutable snapshots to subscribers (on this thread; a GUI bridge
re-posts them to its own thread)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .alerts import AlertEvent, AlertManager, default_rules
from .history import MetricHistory
from .types import ProviderError, TelemetrySnapshot

log = logging.getLogger(__name__)

SnapshotCallback = Callable[[TelemetrySnapshot], None]
AlertCallback = Callable[[AlertEvent], None]

DEVICE_METRICS = ("util_pct", "mem_used_mb", "mem_pct", "temp_c", "power_w")


def history_values(snap: TelemetrySnapshot) -> dict[str, float | None]:
    """The numbers of one snapshot under their history keys."""
    values: dict[str, float | None] = {}
    for d in snap.devices:
        for metric in DEVICE_METRICS:
            values[f"{d.key}:{metric}"] = getattr(d, metric)
    h = snap.host
    if h is not None:
        values["host:cpu_pct"] = h.cpu_pct
        values["host:mem_used_mb"] = h.mem_used_mb
        values["host:mem_pct"] = h.mem_pct
        values["proc:cpu_pct"] = h.proc_cpu_pct
        values["proc:rss_mb"] = h.proc_rss_mb
    return values


class TelemetryPoller:
    def __init__(
        self,
        source,
        interval_s: float = 2.0,
        history_s: float = 3600.0,
        rules: Iterable[Any] | None = None,
        engine_stats: Callable[[], Any] | None = None,
    ):
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.source = source
        self.interval_s = float(interval_s)
        self._history = MetricHistory(max(1, int(np.ceil(history_s / self.interval_s))))
        self._alerts = AlertManager(default_rules() if rules is None else rules)
        self.engine_stats = engine_stats
        self._subs: list[SnapshotCallback] = []
        self._alert_subs: list[AlertCallback] = []
        self._subs_lock = threading.Lock()
        self._poll_lock = threading.Lock()  # one sample at a time (thread + poll_once callers)
        self._latest: TelemetrySnapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cycles = 0

    # -- subscriptions

    def subscribe(self, callback: SnapshotCallback) -> Callable[[], None]:
        with self._subs_lock:
            self._subs.append(callback)
        return lambda: self._remove(self._subs, callback)

    def subscribe_alerts(self, callback: AlertCallback) -> Callable[[], None]:
        with self._subs_lock:
            self._alert_subs.append(callback)
        return lambda: self._remove(self._alert_subs, callback)

    def _remove(self, lst: list, callback) -> None:
        with self._subs_lock:
            if callback in lst:
                lst.remove(callback)

    # -- reading

    @property
    def latest(self) -> TelemetrySnapshot | None:
        return self._latest

    @property
    def history_capacity(self) -> int:
        return self._history.capacity

    def history(self, key: str, seconds: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self._history.get(key, seconds)

    def history_keys(self) -> list[str]:
        return self._history.keys()

    def active_alerts(self) -> tuple[AlertEvent, ...]:
        return self._alerts.active()

    # -- running

    def poll_once(self) -> TelemetrySnapshot:
        with self._poll_lock:
            try:
                snap = self.source.sample()
            except Exception as exc:  # keep polling whatever the source does
                log.exception("telemetry source failed")
                snap = TelemetrySnapshot(
                    timestamp=time.time(),
                    source=getattr(self.source, "name", "?"),
                    error=ProviderError("unavailable", f"{type(exc).__name__}: {exc}"),
                )
            values = history_values(snap)
            for key in self._history.keys():  # noqa: SIM118 - a method, not a dict
                # a device missing this cycle (failed read) leaves a gap, not a stale line
                values.setdefault(key, None)
            self._history.append(snap.timestamp, values)
            stats = None
            if self.engine_stats is not None:
                try:
                    stats = self.engine_stats()
                except Exception as exc:  # noqa: BLE001
                    log.warning("engine stats callable failed: %s", exc)
            events = self._alerts.evaluate(snap, stats)
            self._latest = snap
            self.cycles += 1
        with self._subs_lock:
            subs, alert_subs = list(self._subs), list(self._alert_subs)
        for cb in subs:
            _call(cb, snap)
        for ev in events:
            for cb in alert_subs:
                _call(cb, ev)
        return snap

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="telemetry-poller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the current sample (an npu-smi call is bounded by its own timeout)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.poll_once()
            next_at += self.interval_s
            now = time.monotonic()
            next_at = max(next_at, now)  # after a slow sample, do not catch up in a burst
            self._stop.wait(next_at - now)

    def close(self) -> None:
        self.stop()
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> TelemetryPoller:  # noqa: PYI034
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _call(cb, arg) -> None:
    try:
        cb(arg)
    except Exception:
        log.exception("telemetry subscriber %r failed", cb)
