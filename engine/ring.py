"""The one ring buffer: a fixed-size numpy buffer of (time, value) samples, no allocation per
sample. The engine's metrics (engine/runtime/metrics.py), the telemetry history
(engine/telemetry/history.py) and the console's live plots (console/widgets/live_plot.py) all
keep their series in it. Its own lock is held only for an O(capacity) copy, so a slow reader
never stalls a writer (an engine step, a poller sample)."""

from __future__ import annotations

import threading

import numpy as np


class Ring:
    """Preallocated time/value buffer; append from any thread, read copies from any other."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("a ring's capacity must be at least 1")
        self.capacity = int(capacity)
        self._t = np.full(self.capacity, np.nan)
        self._v = np.full(self.capacity, np.nan)
        self._n = 0  # total appended; write index is _n % capacity
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return min(self._n, self.capacity)

    @property
    def count(self) -> int:
        """Samples appended since the last clear (more than len() once it wrapped)."""
        return self._n

    def append(self, t: float, v: float | None) -> None:
        with self._lock:
            i = self._n % self.capacity
            self._t[i] = t
            self._v[i] = np.nan if v is None else v
            self._n += 1

    def replace(self, t: np.ndarray, v: np.ndarray) -> None:
        """Load a whole history at once (the poller keeps its own and hands over copies)."""
        t = np.asarray(t, dtype=float)[-self.capacity:]
        v = np.asarray(v, dtype=float)[-self.capacity:]
        with self._lock:
            n = len(t)
            self._t[:n] = t
            self._v[:n] = v
            self._t[n:] = np.nan
            self._v[n:] = np.nan
            self._n = n

    def clear(self) -> None:
        with self._lock:
            self._t[:] = np.nan
            self._v[:] = np.nan
            self._n = 0

    def last(self) -> float | None:
        with self._lock:
            if not self._n:
                return None
            v = self._v[(self._n - 1) % self.capacity]
        return None if np.isnan(v) else float(v)

    def data(self, since: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Samples oldest first (copies), optionally only those at or after `since`."""
        with self._lock:
            n = len(self)
            if self._n <= self.capacity:
                t, v = self._t[:n].copy(), self._v[:n].copy()
            else:
                i = self._n % self.capacity
                t = np.concatenate((self._t[i:], self._t[:i]))
                v = np.concatenate((self._v[i:], self._v[:i]))
        if since is not None and n:
            start = int(np.searchsorted(t, since, side="left"))
            t, v = t[start:], v[start:]
        return t, v

    def ordered(self) -> tuple[np.ndarray, np.ndarray]:
        """All samples, oldest first (copies)."""
        return self.data()

    def span(self, seconds: float | None) -> tuple[np.ndarray, np.ndarray]:
        """Samples of the last `seconds` ending at the newest one (all when None)."""
        t, v = self.data()
        if seconds is not None and t.size:
            start = int(np.searchsorted(t, t[-1] - float(seconds), side="left"))
            t, v = t[start:], v[start:]
        return t, v
