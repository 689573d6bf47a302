"""ReplicaPool: two CPU replicas (LocalEngines with one torch thread each) behind one client."""

from __future__ import annotations

import time

import pytest
from npu_console.engine.runtime.types import (
    FinishEvent,
    GenerationRequest,
    ModelNotFoundError,
    SamplingParams,
    TokenEvent,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool(stories_dir):
    from npu_console.engine.remote import ReplicaPool
    from npu_console.engine.runtime import EngineConfig

    p = ReplicaPool.local(["cpu", "cpu"], EngineConfig(max_running=4, num_threads=1))
    infos = p.load(stories_dir, name="stories", timeout=120)
    assert [i.name for i in infos] == ["stories", "stories"]
    p.labels = ["cpu-a", "cpu-b"]
    yield p
    p.shutdown()


def long(n=300):
    return GenerationRequest(prompt="Once upon a time",
                             params=SamplingParams(max_tokens=n, ignore_eos=True))


def test_requests_spread_over_the_least_loaded_replicas(pool):
    before = {s.label: s.submitted for s in pool.replica_stats()}
    handles = [pool.submit(long()) for _ in range(4)]
    where = [pool.replica_of(h.request_id) for h in handles]
    assert sorted(where) == ["cpu-a", "cpu-a", "cpu-b", "cpu-b"]
    # both replicas decode at once, each on its own engine thread
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        per = {s.label: s.stats.running for s in pool.replica_stats()}
        if per == {"cpu-a": 2, "cpu-b": 2}:
            break
        time.sleep(0.02)
    assert per == {"cpu-a": 2, "cpu-b": 2}
    total = pool.stats()
    assert total.running == 4 and total.max_running == 8 and total.models == ("stories",)
    # the next request goes to the replica that has room after one of its requests ends
    handles[0].cancel()
    assert handles[0].result(10).finish.finish_reason == "cancelled"
    freed = where[0]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if {s.label: s.outstanding for s in pool.replica_stats()}[freed] == 1:
            break
        time.sleep(0.01)
    extra = pool.submit(long())
    assert pool.replica_of(extra.request_id) == freed
    for h in handles[1:] + [extra]:
        h.cancel()
    for h in handles[1:] + [extra]:
        assert h.result(10).finish.finish_reason == "cancelled"
    after = {s.label: s.submitted for s in pool.replica_stats()}
    assert sum(after.values()) - sum(before.values()) == 5
    assert all(s.outstanding == 0 for s in pool.replica_stats())


def test_pool_keeps_the_engine_contract(pool):
    handle = pool.submit(GenerationRequest(
        prompt="Once upon a time", params=SamplingParams(max_tokens=8, temperature=0.0,
                                                         ignore_eos=True)))
    events = list(handle)
    assert isinstance(events[-1], FinishEvent) and events[-1].usage.completion_tokens == 8
    assert all(isinstance(e, TokenEvent) for e in events[:-1])
    with pytest.raises(ModelNotFoundError, match="not loaded on any replica"):
        pool.submit(GenerationRequest(prompt="x", model="nope"))
    assert [m.name for m in pool.models()] == ["stories"]
    assert [label for label, _ in pool.replica_models()] == ["cpu-a", "cpu-b"]


def test_pool_behind_the_http_api(pool):
    """The pool is an EngineClient, so the OpenAI server can front both replicas."""
    import httpx
    from npu_console.engine.api import ServerController

    controller = ServerController(pool)
    url = controller.start(port=0)
    try:
        r = httpx.post(url + "/v1/completions", json={"prompt": "Once", "max_tokens": 5,
                                                      "ignore_eos": True}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5
        metrics = httpx.get(url + "/metrics", timeout=10).text
        assert "npu_console:num_requests_running" in metrics
    finally:
        controller.stop(grace_s=1.0)
