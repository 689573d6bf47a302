"""RemoteEngine beyond the shared contract (tests/test_engine_contract.py): live stats from the
server's /metrics, API keys, unreachable servers, and the metric names of vLLM and MindIE."""

from __future__ import annotations

import time

import pytest
from fakes.slow_steps import slowed_steps
from npu_console.engine.remote import RemoteAuthError, RemoteConnectionError, RemoteEngine
from npu_console.engine.remote.client import request_body
from npu_console.engine.remote.prom import parse_metrics
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

# vLLM v1 exposition (names and labels as vLLM's metrics docs list them)
VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 5.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen"} 1000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen"} 500.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="qwen"} 4.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen"} 6.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 1000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 600.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_cpu_blocks="None",num_gpu_blocks="2048"} 1.0
"""

# MindIE Service's documented /metrics answer (its service monitoring API page), abridged
MINDIE_METRICS = """\
# HELP request_received_total Number of requests received so far.
# TYPE request_received_total counter
request_received_total{model_name="llama2-7b"} 3188
# HELP request_success_total Number of requests proceed successfully so far.
# TYPE request_success_total counter
request_success_total{model_name="llama2-7b"} 2267
# HELP request_failed_total Number of requests failed so far.
# TYPE request_failed_total counter
request_failed_total{model_name="llama2-7b"} 0
# HELP num_requests_running Number of requests currently running on NPU.
# TYPE num_requests_running gauge
num_requests_running{model_name="llama2-7b"} 2
# HELP num_requests_waiting Number of requests waiting to be processed.
# TYPE num_requests_waiting gauge
num_requests_waiting{model_name="llama2-7b"} 1
# HELP prompt_tokens_total Number of prefill tokens processed.
# TYPE prompt_tokens_total counter
prompt_tokens_total{model_name="llama2-7b"} 9564
# HELP avg_generation_throughput_toks_per_s Average generation throughput in tokens/s.
# TYPE avg_generation_throughput_toks_per_s gauge
avg_generation_throughput_toks_per_s{model_name="llama2-7b"} 166.66
# HELP npu_cache_usage_perc NPU KV-cache usage. 1 means 100 percent usage.
# TYPE npu_cache_usage_perc gauge
npu_cache_usage_perc{model_name="llama2-7b"} 0.5
"""


def test_vllm_metrics_are_read():
    s = parse_metrics(VLLM_METRICS, now=1.0)
    assert s.flavour == "vllm"
    assert (s.running, s.waiting, s.kv_usage) == (3.0, 5.0, 0.25)
    assert s.kv_total_tokens == 2048 * 16
    assert (s.prompt_tokens, s.generation_tokens, s.finished) == (1000.0, 500.0, 10.0)
    assert s.prefix_hits / s.prefix_queries == pytest.approx(0.6)


def test_mindie_metrics_are_read():
    s = parse_metrics(MINDIE_METRICS, now=1.0)
    assert s.flavour == "mindie"
    assert (s.running, s.waiting, s.kv_usage) == (2.0, 1.0, 0.5)
    assert (s.finished, s.failed, s.generation_tps) == (2267.0, 0.0, 166.66)


def test_v0_cache_gauge_name_and_percent_values():
    s = parse_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 40\n', now=0.0)
    assert s.kv_usage == pytest.approx(0.4)


def test_request_body_keeps_strict_servers_happy():
    path, body = request_body(GenerationRequest(prompt="hi"), "m")
    assert path == "/v1/completions"
    assert set(body) == {"stream", "stream_options", "max_tokens", "temperature", "top_p",
                         "model", "prompt"}
    path, body = request_body(GenerationRequest(
        messages=[{"role": "user", "content": "hi"}],
        params=SamplingParams(top_k=5, ignore_eos=True, stop=("x",), seed=3)), None)
    assert path == "/v1/chat/completions"
    assert (body["top_k"], body["ignore_eos"], body["stop"], body["seed"]) == (5, True, ["x"], 3)
    assert "model" not in body


def test_request_body_leaves_model_defaults_to_the_server_and_keeps_explicit_fields():
    # the caller left temperature / repetition_penalty to the model: not in the body
    _, body = request_body(GenerationRequest(prompt="hi", params=SamplingParams(
        model_defaults=("temperature", "repetition_penalty"))), "m", {"repetition_penalty": 1.2})
    assert "temperature" not in body and "repetition_penalty" not in body and "top_p" in body
    # an explicit 1.0 is sent only to a server that would otherwise put its model's 1.2 there
    explicit = GenerationRequest(prompt="hi", params=SamplingParams(repetition_penalty=1.0))
    assert request_body(explicit, "m", {"repetition_penalty": 1.2})[1]["repetition_penalty"] == 1.0
    assert "repetition_penalty" not in request_body(explicit, "m", {})[1]


@pytest.fixture(scope="module")
def keyed_server(stories_dir):
    from support.api import keyed_server as serving

    with serving(stories_dir, "stories", "sekret", max_running=4) as served:
        yield served


@pytest.mark.slow
def test_stats_follow_the_servers_metrics(keyed_server):
    engine, url = keyed_server
    # 10 ms per step: the two requests are still running when stats are polled and they are
    # cancelled (fakes/slow_steps.py)
    with slowed_steps(engine), RemoteEngine(url, api_key="sekret", poll_interval_s=0.1) as remote:
        params = SamplingParams(max_tokens=500, ignore_eos=True)
        handles = [remote.submit(GenerationRequest(prompt="Once", params=params))
                   for _ in range(2)]
        deadline = time.monotonic() + 15
        seen = None
        while time.monotonic() < deadline:
            s = remote.stats()
            if s.running == 2 and s.generation_tokens_per_s > 0:
                seen = s
                break
            time.sleep(0.05)
        assert seen is not None, remote.stats()
        assert seen.kv_usage > 0 and seen.models == ("stories",)
        for h in handles:
            h.cancel()
        for h in handles:
            assert h.result(10).finish.finish_reason == "cancelled"
        deadline = time.monotonic() + 10
        while remote.stats().running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert remote.stats().running == 0
        assert engine.stats().running == 0


@pytest.mark.slow
def test_wrong_key_is_an_auth_error(keyed_server):
    _, url = keyed_server
    with RemoteEngine(url, api_key="wrong", poll_interval_s=None) as remote:
        with pytest.raises(RemoteAuthError, match="refused the API key"):
            remote.submit(GenerationRequest(prompt="x"))
        with pytest.raises(RemoteAuthError):
            remote.models()


def test_unreachable_server_is_a_connection_error():
    with RemoteEngine("http://127.0.0.1:9/v1", poll_interval_s=None,
                      connect_timeout_s=2) as remote:
        with pytest.raises(RemoteConnectionError, match="cannot reach"):
            remote.submit(GenerationRequest(prompt="x"))
        with pytest.raises(RemoteConnectionError):
            remote.models()
        stats = remote.stats()
        assert stats.state == "error" and "cannot reach" in stats.last_error


def test_bad_url_is_refused():
    with pytest.raises(ValueError, match="http"):
        RemoteEngine("localhost:8000")
