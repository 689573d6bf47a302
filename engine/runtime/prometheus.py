"""Prometheus metrics of an engine, named like vLLM's but with the `npu_console:` prefix.

Gauges and counters are read from `engine.stats()` / `engine.metrics` at scrape time (a custom
collector); latency histograms are fed by an engine listener as requests finish. Everything goes
into the registry the caller passes, never the global one, so several engines (and tests) can
live in one process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

PREFIX = "npu_console:"

_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0)


class _EngineCollector:
    def __init__(self, engine: Any):
        self.engine = engine

    def collect(self):
        s = self.engine.stats()
        m = self.engine.metrics
        gauges = (
            ("num_requests_running", "Requests in the running batch.", s.running),
            ("num_requests_waiting", "Requests waiting to be scheduled.", s.waiting),
            ("kv_cache_usage_perc", "KV-cache usage; 1 means full.", s.kv_usage),
            ("prefix_cache_hit_rate", "Prompt tokens served from the prefix cache (recent).",
             s.prefix_hit_rate),
            ("avg_prompt_throughput_toks_per_s", "Prompt tokens/s over the recent window.",
             s.prompt_tokens_per_s),
            ("avg_generation_throughput_toks_per_s", "Generated tokens/s over the recent window.",
             s.generation_tokens_per_s),
            ("engine_ready", "1 when a model is loaded and the engine runs.",
             1.0 if s.state == "ready" else 0.0),
        )
        for name, doc, value in gauges:
            g = GaugeMetricFamily(PREFIX + name, doc)
            g.add_metric([], float(value))
            yield g
        for name, doc, value in (
            ("prompt_tokens", "Prefill tokens processed.", m.prompt_tokens_total),
            ("generation_tokens", "Tokens generated.", m.generation_tokens_total),
            ("engine_steps", "Engine steps run.", m.steps),
        ):
            c = CounterMetricFamily(PREFIX + name, doc)
            c.add_metric([], float(value))
            yield c


def register_engine_metrics(registry: CollectorRegistry, engine: Any) -> Callable[[], None]:
    """Add the engine's metrics to `registry`; returns a function that detaches them."""
    ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Time to first token.",
                     buckets=_TTFT_BUCKETS, registry=registry)
    tpot = Histogram(PREFIX + "time_per_output_token_seconds", "Time per output token.",
                     buckets=_TPOT_BUCKETS, registry=registry)
    e2e = Histogram(PREFIX + "e2e_request_latency_seconds", "End-to-end request latency.",
                    buckets=_E2E_BUCKETS, registry=registry)
    queue = Histogram(PREFIX + "request_queue_time_seconds", "Time spent waiting in the queue.",
                      buckets=_E2E_BUCKETS, registry=registry)
    prompt_len = Histogram(PREFIX + "request_prompt_tokens", "Prompt tokens per request.",
                           buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000),
                           registry=registry)
    gen_len = Histogram(PREFIX + "request_generation_tokens", "Generated tokens per request.",
                        buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000),
                        registry=registry)
    success = Counter(PREFIX + "request_success", "Finished requests by finish reason.",
                      ["finished_reason"], registry=registry)
    collector = _EngineCollector(engine)
    registry.register(collector)

    def on_step(stats) -> None:
        for fin in stats.finished:
            t = fin.timings
            if t.ttft_s is not None:
                ttft.observe(t.ttft_s)
            if t.tpot_s is not None:
                tpot.observe(t.tpot_s)
            e2e.observe(t.e2e_s)
            queue.observe(t.queue_s)
            prompt_len.observe(fin.usage.prompt_tokens)
            gen_len.observe(fin.usage.completion_tokens)
            success.labels(finished_reason=fin.finish_reason).inc()

    remove_listener = engine.add_listener(on_step)

    def detach() -> None:
        remove_listener()
        for c in (ttft, tpot, e2e, queue, prompt_len, gen_len, success, collector):
            try:
                registry.unregister(c)
            except KeyError:
                pass
    return detach
