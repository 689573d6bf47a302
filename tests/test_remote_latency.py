"""TTFT / ITL of a connected server, read from its /metrics latency histograms over the last
30 s (engine/remote/prom.py): the quantile arithmetic, vLLM's names, and a real server whose
requests the fleet monitor sees, checked against the engine's own exact timings."""

from __future__ import annotations

import time

import numpy as np
import pytest
from npu_console.engine.remote.prom import LatencyWindow, parse_metrics, window_quantiles

BUCKETS = ((0.1, 2.0), (0.5, 6.0), (1.0, 10.0), (float("inf"), 10.0))


def test_quantiles_interpolate_within_the_bucket_like_prometheus():
    p50, p99 = window_quantiles(BUCKETS, ())
    # rank 5 of 10 falls in (0.1, 0.5] holding observations 3..6: 0.1 + 0.4 * 3/4
    assert p50 == pytest.approx(0.4)
    assert p99 == pytest.approx(0.5 + 0.5 * 3.9 / 4)
    # only what was observed between the scrapes counts
    old = ((0.1, 2.0), (0.5, 2.0), (1.0, 2.0), (float("inf"), 2.0))
    assert window_quantiles(BUCKETS, old, (0.5,)) == (pytest.approx(0.1 + 0.4 * 4 / 4),)
    assert window_quantiles(BUCKETS, BUCKETS) == (None, None)  # nothing new
    # a restarted server (counts went back) counts from zero, not negative
    assert window_quantiles(old, BUCKETS) == window_quantiles(old, ())
    # past the last finite bound: that bound, as Prometheus answers
    slow = ((0.1, 0.0), (1.0, 1.0), (float("inf"), 10.0))
    assert window_quantiles(slow, (), (0.99,)) == (1.0,)


def test_vllm_v1_names_are_read_and_summed_over_models():
    text = "\n".join(
        f'vllm:{name}_bucket{{le="{le}",model_name="{m}"}} {n}'
        for m in ("a", "b")
        for name, rows in (("time_to_first_token_seconds", ((0.1, 1), (0.5, 3), ("+Inf", 4))),
                           ("inter_token_latency_seconds", ((0.01, 5), (0.05, 9), ("+Inf", 10))))
        for le, n in rows) + "\n"
    snap = parse_metrics(text, now=1.0)
    assert snap.ttft_buckets == ((0.1, 2.0), (0.5, 6.0), (float("inf"), 8.0))
    assert snap.itl_buckets == ((0.01, 10.0), (0.05, 18.0), (float("inf"), 20.0))
    window = LatencyWindow(window_s=30.0)
    assert set(window.add(parse_metrics("", now=0.0)).values()) == {None}  # no histogram yet
    got = window.add(snap)
    assert got["engine:ttft_p50_ms"] == pytest.approx(1000 * (0.1 + 0.4 * 2 / 4))
    assert got["engine:itl_p50_ms"] == pytest.approx(1000 * (0.01 + 0.04 * 0 / 8))


@pytest.mark.slow
def test_the_fleet_monitor_reads_a_real_servers_latency(stories_dir):
    from npu_console.engine.remote.fleet import FleetMonitor, ServerRef
    from npu_console.engine.remote.prom import LATENCY_KEYS
    from npu_console.engine.runtime.prometheus import _TTFT_BUCKETS
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
    from support.api import keyed_server

    with keyed_server(stories_dir, "stories", "k-latency", max_running=4) as (engine, url):
        fleet = FleetMonitor(poll_s=0.2)
        try:
            fleet.add(ServerRef(url, "k-latency"))
            deadline = time.monotonic() + 30
            while fleet.snapshot(url).state != "up" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fleet.snapshot(url).state == "up"
            # no request yet: no latency to show
            assert all(np.isnan(fleet.history(url, k)[1]).all() for k in LATENCY_KEYS)
            params = SamplingParams(max_tokens=24, ignore_eos=True, seed=1)
            for _ in range(6):
                engine.submit(GenerationRequest(prompt="Once upon", params=params)).result(60)

            def latest(key):
                v = fleet.history(url, key)[1]
                return float(v[-1]) if len(v) and not np.isnan(v[-1]) else None

            deadline = time.monotonic() + 30
            while latest("engine:itl_p50_ms") is None and time.monotonic() < deadline:
                time.sleep(0.1)
            got = {k: latest(k) for k in LATENCY_KEYS}
        finally:
            fleet.close()
        assert None not in got.values(), got
        assert got["engine:ttft_p50_ms"] <= got["engine:ttft_p99_ms"]
        assert got["engine:itl_p50_ms"] <= got["engine:itl_p99_ms"]
        # the histogram's p50 lies in the bucket that holds the engine's exact median TTFT
        exact = float(np.median(engine.metrics.series("ttft_s", 300)[1]))
        bounds = (0.0, *_TTFT_BUCKETS)
        i = next(i for i, le in enumerate(bounds) if exact <= le)
        assert bounds[i - 1] * 1000 <= got["engine:ttft_p50_ms"] <= bounds[i] * 1000, (exact, got)
