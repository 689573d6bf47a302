"""Serving metrics with the definitions of vLLM's serving benchmark (`vllm bench serve`).

Per request: TTFT = send -> first generated text; E2EL = send -> last chunk of the answer;
TPOT = (E2EL - TTFT) / (output tokens - 1), only for requests with more than one output token;
ITL = every gap between consecutive chunks that carry text. Reasoning text (`reasoning_content`)
counts as generated text for all of these; for a request whose server sent reasoning, the time to
the first answer token (send -> first `content` after the reasoning) is reported as well.
Throughputs divide by the wall time of the whole run. A request is "good" (goodput) when every
given SLO holds; as in vLLM, a request with a single output token counts with TPOT 0 for that
check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class RequestRecord:
    """One request as the load generator saw it (seconds, client clock)."""

    index: int
    success: bool
    prompt_len: int  # prompt tokens: the server's count when it reported usage, else ours
    output_tokens: int  # the server's usage count, else the number of text chunks
    start_s: float  # send time relative to the start of the run
    ttft_s: float | None = None
    e2el_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None
    request_id: str | None = None  # the server's id of the answer
    usage_reported: bool = False
    finish_reason: str | None = None
    server_timings: dict | None = None  # our server's own per-request timings (ms), if sent
    # send -> first answer text, for requests whose server sent reasoning_content first
    first_answer_s: float | None = None
    reasoning_tokens: int | None = None  # the server's usage count, if it sent one

    @property
    def tpot_s(self) -> float | None:
        if not self.success or self.ttft_s is None or self.e2el_s is None:
            return None
        if self.output_tokens <= 1:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class Distribution:
    """Summary of one latency, in milliseconds."""

    count: int
    mean: float | None
    std: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    min: float | None
    max: float | None

    @classmethod
    def of_seconds(cls, values: list[float]) -> Distribution:
        if not values:
            return cls(0, None, None, None, None, None, None, None)
        ms = np.asarray(values, dtype=np.float64) * 1000.0
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])  # linear interpolation, as numpy/vLLM
        return cls(len(values), float(ms.mean()), float(ms.std()), float(p50), float(p90),
                   float(p99), float(ms.min()), float(ms.max()))


@dataclass(frozen=True)
class SLO:
    """Service-level objectives for goodput, in milliseconds (None = not checked)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2el_ms))

    def met_by(self, r: RequestRecord) -> bool:
        checks = ((self.ttft_ms, r.ttft_s), (self.tpot_ms, r.tpot_s or 0.0),
                  (self.e2el_ms, r.e2el_s))
        return all(limit is None or (value is not None and value * 1000.0 <= limit)
                   for limit, value in checks)


@dataclass(frozen=True)
class ServingMetrics:
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float  # completed requests / s
    output_throughput: float  # output tokens / s
    total_token_throughput: float  # (input + output) tokens / s
    request_goodput: float | None  # requests meeting every SLO / s (None without SLOs)
    good_requests: int | None
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2el_ms: Distribution
    max_concurrency_seen: int
    # requests with reasoning only (count 0 when the server sent none)
    first_answer_ms: Distribution = field(default_factory=lambda: Distribution.of_seconds([]))


def peak_concurrency(records: list[RequestRecord]) -> int:
    """Most requests in flight at once (from send and end times of the finished ones)."""
    edges = []
    for r in records:
        if r.e2el_s is not None:
            edges.append((r.start_s, 1))
            edges.append((r.start_s + r.e2el_s, -1))
    edges.sort(key=lambda e: (e[0], e[1]))  # an end at the same instant as a start goes first
    peak = cur = 0
    for _, d in edges:
        cur += d
        peak = max(peak, cur)
    return peak


def compute_metrics(records: list[RequestRecord], duration_s: float,
                    slo: SLO | None = None) -> ServingMetrics:
    ok = [r for r in records if r.success]
    dur = duration_s if duration_s > 0 else math.nan
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [r.tpot_s for r in ok if r.tpot_s is not None]
    itls = [gap for r in ok for gap in r.itl_s]
    e2els = [r.e2el_s for r in ok if r.e2el_s is not None]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    good = None
    goodput = None
    if slo is not None and slo.any:
        good = sum(1 for r in ok if slo.met_by(r))
        goodput = good / dur
    return ServingMetrics(
        completed=len(ok), failed=len(records) - len(ok), duration_s=duration_s,
        total_input_tokens=total_in, total_output_tokens=total_out,
        request_throughput=len(ok) / dur, output_throughput=total_out / dur,
        total_token_throughput=(total_in + total_out) / dur,
        request_goodput=goodput, good_requests=good,
        ttft_ms=Distribution.of_seconds(ttfts), tpot_ms=Distribution.of_seconds(tpots),
        itl_ms=Distribution.of_seconds(itls), e2el_ms=Distribution.of_seconds(e2els),
        max_concurrency_seen=peak_concurrency(ok),
        first_answer_ms=Distribution.of_seconds(
            [r.first_answer_s for r in ok if r.first_answer_s is not None]))
