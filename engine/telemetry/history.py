"""Per-metric ring buffers (engine.ring.Ring, preallocated numpy arrays).

Writers (the poller thread) and readers (plots on the GUI thread, the CLI) hold a lock only for
an O(capacity) array copy, so readers never wait on a slow npu-smi call.
"""

from __future__ import annotations

import threading

import numpy as np

from ..ring import Ring


class MetricHistory:
    def __init__(self, capacity: int = 1800, max_keys: int | None = None):
        if capacity < 1:
            raise ValueError("history capacity must be at least 1")
        self.capacity = int(capacity)
        # each key preallocates a ring: a source that names new keys on every sample (a
        # hostile server rotating device ids) stops adding rings here
        self.max_keys = max_keys
        self.dropped_keys = 0
        self._rings: dict[str, Ring] = {}
        self._lock = threading.Lock()

    def append(self, timestamp: float, values: dict[str, float | None]) -> None:
        """Record one sample of several metrics at the same instant (None -> NaN)."""
        with self._lock:
            for key, value in values.items():
                ring = self._rings.get(key)
                if ring is None:
                    if self.max_keys is not None and len(self._rings) >= self.max_keys:
                        self.dropped_keys += 1
                        continue
                    ring = self._rings[key] = Ring(self.capacity)
                ring.append(timestamp, value)

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._rings)

    def get(self, key: str, seconds: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(t, values) copies, oldest first; `seconds` keeps the span ending at the newest sample."""
        with self._lock:
            ring = self._rings.get(key)
        if ring is None or not len(ring):
            return np.empty(0), np.empty(0)
        return ring.span(seconds)

    def clear(self) -> None:
        with self._lock:
            self._rings.clear()
