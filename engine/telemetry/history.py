"""Per-metric ring buffers in preallocated numpy arrays.

Writers (the poller thread) and readers (plots on the GUI thread, the CLI) share one lock that
is held only for an O(capacity) array copy, so readers never wait on a slow npu-smi call.
"""

from __future__ import annotations

import threading

import numpy as np


class _Ring:
    __slots__ = ("count", "head", "t", "v")

    def __init__(self, capacity: int):
        self.t = np.full(capacity, np.nan, dtype=np.float64)
        self.v = np.full(capacity, np.nan, dtype=np.float64)
        self.head = 0  # next write position
        self.count = 0


class MetricHistory:
    def __init__(self, capacity: int = 1800):
        if capacity < 1:
            raise ValueError("history capacity must be at least 1")
        self.capacity = int(capacity)
        self._rings: dict[str, _Ring] = {}
        self._lock = threading.Lock()

    def append(self, timestamp: float, values: dict[str, float | None]) -> None:
        """Record one sample of several metrics at the same instant (None -> NaN)."""
        with self._lock:
            for key, value in values.items():
                ring = self._rings.get(key)
                if ring is None:
                    ring = self._rings[key] = _Ring(self.capacity)
                ring.t[ring.head] = timestamp
                ring.v[ring.head] = np.nan if value is None else value
                ring.head = (ring.head + 1) % self.capacity
                if ring.count < self.capacity:
                    ring.count += 1

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._rings)

    def get(self, key: str, seconds: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(t, values) copies, oldest first; `seconds` keeps the span ending at the newest sample."""
        with self._lock:
            ring = self._rings.get(key)
            if ring is None or ring.count == 0:
                return np.empty(0), np.empty(0)
            if ring.count < self.capacity:
                t = ring.t[: ring.count].copy()
                v = ring.v[: ring.count].copy()
            else:
                t = np.concatenate((ring.t[ring.head :], ring.t[: ring.head]))
                v = np.concatenate((ring.v[ring.head :], ring.v[: ring.head]))
        if seconds is not None and t.size:
            start = np.searchsorted(t, t[-1] - float(seconds), side="left")
            t, v = t[start:], v[start:]
        return t, v

    def clear(self) -> None:
        with self._lock:
            self._rings.clear()
