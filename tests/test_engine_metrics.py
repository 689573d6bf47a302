"""Metrics: ring buffers, windowed series, Prometheus exposition of a real engine."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from npu_console.engine.ring import Ring
from npu_console.engine.runtime.metrics import EngineMetrics
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.api import own_engine


def test_ring_buffer_keeps_the_latest_in_order():
    r = Ring(4)
    for i in range(10):
        r.append(float(i), float(i * 10))
    t, v = r.ordered()
    assert t.tolist() == [6.0, 7.0, 8.0, 9.0] and v.tolist() == [60.0, 70.0, 80.0, 90.0]
    t[0] = -1  # a copy: the reader cannot corrupt the buffer
    assert r.ordered()[0][0] == 6.0


def test_series_window_and_unknown_name():
    m = EngineMetrics(capacity=8)
    import time

    now = time.time()
    m.record("kv_usage", 0.1, t=now - 100)
    m.record("kv_usage", 0.5, t=now)
    _, v = m.series("kv_usage", seconds=10)
    assert v.tolist() == [0.5]
    assert len(m.series("kv_usage")[0]) == 2
    with pytest.raises(KeyError):
        m.series("nope")


def samples(registry):
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                            + "}" if s.labels else "")
            out[key] = s.value
    return out


@pytest.mark.slow
def test_prometheus_metrics_of_a_real_engine(stories_dir):
    import torch
    from npu_console.engine.models import load_model
    from npu_console.engine.runtime.prometheus import register_engine_metrics
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

    threads = torch.get_num_threads()
    loaded = load_model(stories_dir, device="cpu", dtype="float32")
    engines, registries = [], []
    with contextlib.ExitStack() as owned:
        owned.callback(torch.set_num_threads, threads)  # runs last, after both shutdowns
        for _ in range(2):  # two engines, two registries: no clash
            eng = owned.enter_context(own_engine(loaded, "s", timeout=60))
            reg = CollectorRegistry()
            register_engine_metrics(reg, eng)
            engines.append(eng)
            registries.append(reg)
        eng, reg = engines[0], registries[0]
        p = SamplingParams(max_tokens=5, temperature=0, ignore_eos=True)
        for _ in range(2):
            eng.generate(GenerationRequest(prompt="Once upon a time", params=p), timeout=60)
        h = eng.submit(GenerationRequest(prompt="Once", params=SamplingParams(max_tokens=300)))
        next(iter(h))  # running, not still waiting, when the cancel lands: no race to count
        h.cancel()
        h.result(30)
        eng.generate(GenerationRequest(prompt="x", params=SamplingParams(max_tokens=1)))
        s = samples(reg)
        assert s["npu_console:time_to_first_token_seconds_count"] >= 2
        assert s["npu_console:e2e_request_latency_seconds_count"] == 4
        assert s["npu_console:request_success_total{finished_reason=length}"] == 3
        assert s["npu_console:request_success_total{finished_reason=cancelled}"] == 1
        assert s["npu_console:generation_tokens_total"] >= 11
        assert s["npu_console:num_requests_running"] == 0
        assert s["npu_console:engine_ready"] == 1
        assert samples(registries[1])["npu_console:e2e_request_latency_seconds_count"] == 0
        _, v = eng.metrics.series("ttft_s")
        assert len(v) >= 2 and np.all(v > 0)
