"""When each request of a serving run is sent.

--rate R sends requests as a renewal process with mean gap 1/R: gamma-distributed gaps with shape
`burstiness` and scale 1/(R * burstiness). Burstiness 1 is a Poisson process (exponential gaps);
below 1 the traffic comes in bursts, above 1 it is more even. The mean rate stays R either way.
Without a rate every request is due at once and only the concurrency limit paces them.
"""

from __future__ import annotations

import math

import numpy as np


def send_offsets(n: int, rate: float | None, burstiness: float = 1.0,
                 seed: int | None = 0) -> list[float]:
    """Seconds after the start at which request i is due; the first request goes at 0."""
    if n <= 0:
        return []
    if rate is None or math.isinf(rate):
        return [0.0] * n
    if rate <= 0:
        raise ValueError(f"request rate must be positive, got {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be positive, got {burstiness}")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return [0.0] + np.cumsum(gaps).tolist()
