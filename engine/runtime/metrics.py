"""Engine metrics: ring buffers (engine.ring) for plots and windowed rates for stats.

The engine thread appends; readers (GUI plots, the API, tests) call `series()`, which copies under
a lock held only for the copy, so a slow reader never stalls a step.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..ring import Ring

SERIES = (
    "running", "waiting", "batch_size", "tokens_per_step", "step_ms",
    "prefill_tokens_per_s", "decode_tokens_per_s", "kv_usage", "prefix_hit_rate",
    # per finished request
    "ttft_s", "tpot_s", "e2e_s", "queue_s",
)


@dataclass(frozen=True)
class StepStats:
    """What one engine step did; passed to engine listeners."""

    time: float  # time.time() at the end of the step
    model: str
    duration_s: float
    running: int
    waiting: int
    batch_size: int  # sequences in the step
    num_tokens: int  # tokens through the model
    prefill_tokens: int
    decode_tokens: int
    kv_used_tokens: int
    kv_total_tokens: int
    prefix_hit_rate: float
    finished: tuple = ()  # FinishEvents of requests that ended in this step


PREFIX_WINDOW = 256  # admitted requests the prefix hit rate is computed over


class EngineMetrics:
    def __init__(self, capacity: int = 4096, window_s: float = 10.0):
        self._lock = threading.Lock()
        self._rings = {name: Ring(capacity) for name in SERIES}
        self.window_s = window_s
        # running sums beside the windows: stats() is read per HTTP request and per plot
        # refresh, and must not scan the window under the lock the engine thread writes with
        self._rate = deque()  # (monotonic, prompt_tokens, generated_tokens)
        self._rate_sums = [0, 0]
        self._prefix = deque()  # (cached, prompt) of the last PREFIX_WINDOW admitted requests
        self._prefix_sums = [0, 0]
        self.steps = 0
        self.requests_finished = 0
        self.requests_failed = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0

    # ---------------------------------------------------------------- writers (engine thread)
    def record(self, name: str, value: float, t: float | None = None) -> None:
        with self._lock:
            self._rings[name].append(time.time() if t is None else t, float(value))

    def record_admission(self, cached: int, prompt: int) -> None:
        with self._lock:
            self._prefix.append((cached, prompt))
            self._prefix_sums[0] += cached
            self._prefix_sums[1] += prompt
            if len(self._prefix) > PREFIX_WINDOW:
                old_cached, old_prompt = self._prefix.popleft()
                self._prefix_sums[0] -= old_cached
                self._prefix_sums[1] -= old_prompt

    def record_step(self, s: StepStats, generated: int) -> None:
        now = time.monotonic()
        with self._lock:
            if s.batch_size == 0:
                return  # a report of requests that ended between steps, not a step
            self.steps += 1
            self.prompt_tokens_total += s.prefill_tokens
            self.generation_tokens_total += generated
            self._rate.append((now, s.prefill_tokens, generated))
            self._rate_sums[0] += s.prefill_tokens
            self._rate_sums[1] += generated
            self._expire_rate(now)
            dt = max(s.duration_s, 1e-9)
            r = self._rings
            for name, val in (("running", s.running), ("waiting", s.waiting),
                              ("batch_size", s.batch_size), ("tokens_per_step", s.num_tokens),
                              ("step_ms", s.duration_s * 1000.0),
                              ("prefill_tokens_per_s", s.prefill_tokens / dt),
                              ("decode_tokens_per_s", generated / dt),
                              ("kv_usage", s.kv_used_tokens / max(1, s.kv_total_tokens)),
                              ("prefix_hit_rate", s.prefix_hit_rate)):
                r[name].append(s.time, float(val))

    def record_finish(self, timings, failed: bool) -> None:
        with self._lock:
            self.requests_finished += 1
            if failed:
                self.requests_failed += 1
            t = time.time()
            for name, val in (("ttft_s", timings.ttft_s), ("tpot_s", timings.tpot_s),
                              ("e2e_s", timings.e2e_s), ("queue_s", timings.queue_s)):
                if val is not None:
                    self._rings[name].append(t, val)

    # ---------------------------------------------------------------- readers (any thread)
    def series(self, name: str, seconds: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Copies of (time.time() stamps, values), the last `seconds` only if given."""
        if name not in self._rings:
            raise KeyError(f"unknown series {name!r}; known: {', '.join(SERIES)}")
        with self._lock:
            t, v = self._rings[name].ordered()
        if seconds is not None and len(t):
            keep = t >= time.time() - seconds
            t, v = t[keep], v[keep]
        return t, v

    def prefix_hit_rate(self) -> float:
        with self._lock:
            cached, prompt = self._prefix_sums
        return cached / prompt if prompt else 0.0

    def _expire_rate(self, now: float) -> None:
        # caller holds self._lock
        while self._rate and now - self._rate[0][0] > self.window_s:
            _, prompt, generated = self._rate.popleft()
            self._rate_sums[0] -= prompt
            self._rate_sums[1] -= generated

    def rates(self) -> tuple[float, float]:
        """(prompt tokens/s, generated tokens/s) over the recent window."""
        now = time.monotonic()
        with self._lock:
            self._expire_rate(now)
            if not self._rate:
                return 0.0, 0.0
            first = self._rate[0][0]
            prompt, generated = self._rate_sums
        span = max(now - first, 0.25)  # one fresh step alone is not a rate
        return prompt / span, generated / span
