"""Many clients at once over loopback: concurrency, back-pressure (429), health under load and
clients that hang up mid-stream."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import httpx
import pytest
from fakes.slow_steps import slowed_steps
from support.api import (
    default_engine,
    engine_for,
    metric_value,
    run_stream_clients,
    run_stream_clients_in_subprocess,
    running_server,
    stream_post,
    token_count,
)

pytestmark = pytest.mark.slow

PROMPTS = ["Once upon a time", "The little dog", "One day, Lily", "Tom had a red ball",
           "The sun was", "In the park"]


def _body(i: int, max_tokens: int) -> dict:
    return {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens, "temperature": 0.8,
            "seed": i, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}


def test_32_concurrent_streams_all_complete_with_exact_usage(stories_dir):
    engine = default_engine(stories_dir)
    prompt_tokens = {p: token_count(stories_dir, p) for p in PROMPTS}
    with running_server(engine) as (_, url):
        results = run_stream_clients(url, [_body(i, 12) for i in range(32)])
    assert [r["status"] for r in results] == [200] * 32
    for i, r in enumerate(results):
        assert r["done"], r
        assert r["usage"]["completion_tokens"] == 12
        assert r["usage"]["prompt_tokens"] == prompt_tokens[PROMPTS[i % len(PROMPTS)]]
        assert r["text"]


class _HealthProbe(threading.Thread):
    """Polls /health on its own connection and records each answer's latency."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.latencies: list[float] = []
        self.statuses: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self.halt.is_set():
                t0 = time.perf_counter()
                r = client.get(self.url + "/health")
                self.latencies.append(time.perf_counter() - t0)
                self.statuses.append(r.status_code)
                self.halt.wait(0.05)


def test_200_clients_against_a_queue_of_64(stories_dir):
    # few decode slots so that the queue really fills while the clients arrive
    engine = engine_for(stories_dir, max_waiting=64, max_running=4)
    with running_server(engine) as (_, url):
        stream_post(url + "/v1/completions", _body(0, 2))  # a warm server, as in real life
        # a server process keeps its loaded model for good: without this, one full collection
        # over torch's and transformers' objects stalls every thread for most of a second
        gc.freeze()
        probe = _HealthProbe(url)
        probe.start()
        try:
            # clients arrive over one second and all overlap: each step is held 3 ms a running
            # sequence (about 0.3 s a request, 13 requests a second through 4 slots), so the
            # queue fills however fast this machine decodes or however slowly clients start
            with slowed_steps(engine, 0.003):
                results = run_stream_clients_in_subprocess(
                    url, [_body(i, 24) for i in range(200)], stagger_s=0.005)
        finally:
            probe.halt.set()
            probe.join(10)
            gc.unfreeze()
    ok = [r for r in results if r["status"] == 200]
    refused = [r for r in results if r["status"] == 429]
    assert len(ok) + len(refused) == 200, {r["status"] for r in results}
    assert len(ok) >= 64 and refused
    for r in refused:
        assert int(r["retry_after"]) >= 1
        assert r["body"]["error"]["type"] == "rate_limit_error"
    for r in ok:
        assert r["done"] and r["usage"]["completion_tokens"] == 24
    lat = sorted(probe.latencies)
    print(f"/health during the burst: n={len(lat)} p50={lat[len(lat) // 2] * 1e3:.1f} ms "
          f"p95={lat[int(len(lat) * 0.95)] * 1e3:.1f} ms max={lat[-1] * 1e3:.1f} ms")
    assert len(lat) >= 20 and set(probe.statuses) == {200}
    # the bar is 100 ms (tests/bench/bench_api.py measures it); on a shared 2-core machine the
    # test bounds what tells a responsive loop from a stalled one (a burst's generation: seconds)
    assert lat[int(len(lat) * 0.95)] < 0.5, lat[-10:]
    assert lat[-1] < 3.0, lat[-10:]


def test_clients_that_hang_up_free_their_engine_slots(stories_dir):
    engine = default_engine(stories_dir)
    with running_server(engine) as (_, url):

        async def hang_up_after_two_chunks(client, i):
            body = {**_body(i, 400), "stream_options": None}
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                assert r.status_code == 200
                seen = 0
                async for line in r.aiter_lines():
                    seen += line.startswith("data: ")
                    if seen >= 2:
                        return  # leaving the block closes the connection mid-stream

        async def main():
            limits = httpx.Limits(max_connections=10, max_keepalive_connections=0)
            async with httpx.AsyncClient(limits=limits, timeout=60) as client:
                await asyncio.gather(*[hang_up_after_two_chunks(client, i) for i in range(10)])

        asyncio.run(main())
        deadline = time.monotonic() + 20
        while True:
            text = httpx.get(url + "/metrics").text
            running = metric_value(text, "npu_console:num_requests_running")
            live = metric_value(text, "npu_console_api_engine_requests_live")
            if (running, live) == (0.0, 0.0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert (running, live) == (0.0, 0.0)
        cancelled = metric_value(
            "\n".join(x for x in text.splitlines() if 'finished_reason="cancelled"' in x),
            "npu_console:request_success_total")
        assert cancelled == 10
        # 400 tokens each were asked for; hanging up stopped them far earlier
        generated = metric_value(text, "npu_console:request_generation_tokens_sum")
        assert generated < 10 * 400
