"""The console's remote side against a real `vllm serve` (SmolLM2, float, on loopback), started
with the launch command the console writes (tests/support/vllm.py): /v1/models, chat streaming
through RemoteEngine, the engine numbers from vLLM's own /metrics names, `npu-console bench
serve --base-url`, and a fleet card that says "engine only" (vLLM has no telemetry endpoint)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from npu_console.engine.runtime.types import FinishEvent, GenerationRequest, SamplingParams

pytestmark = [pytest.mark.peers, pytest.mark.slow]

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


@pytest.fixture(scope="module")
def vllm(smollm2_hf, vllm_servers):
    return vllm_servers.get(smollm2_hf, "smollm2")


@pytest.fixture
def remote(vllm):
    from npu_console.engine.remote import RemoteEngine

    eng = RemoteEngine(vllm.url, model=vllm.name, poll_interval_s=0.5)
    yield eng
    eng.shutdown()


def _run(eng, **req):
    handle = eng.submit(GenerationRequest(params=GREEDY, **req))
    text, finish = [], None
    for ev in handle:
        if isinstance(ev, FinishEvent):
            finish = ev
        else:
            text.append(getattr(ev, "text", "") or "")
    return "".join(text), finish, len(text)


def test_models_lists_the_served_name(remote, vllm):
    models = remote.models()
    assert [m.name for m in models] == [vllm.name]
    assert models[0].max_context == 1024  # --max-model-len from the launch command


def test_chat_streams_token_by_token_with_usage(remote):
    text, finish, chunks = _run(remote, messages=[
        {"role": "user", "content": "What is the capital of France? Answer in one word."}])
    assert finish is not None and finish.error is None, finish
    assert "Paris" in text
    assert finish.usage.completion_tokens >= 1 and finish.usage.prompt_tokens > 10
    assert chunks >= 2  # streamed, not one block
    t = finish.timings
    assert t.ttft_s > 0 and t.e2e_s >= t.ttft_s


def test_engine_numbers_come_from_vllm_metrics(remote):
    before = remote.scrape()
    assert before is not None and before.flavour == "vllm"
    _run(remote, prompt="The capital of France is")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        after = remote.scrape()
        if (after.generation_tokens or 0) >= (before.generation_tokens or 0) + GREEDY.max_tokens:
            break
        time.sleep(0.5)
    assert after.generation_tokens - (before.generation_tokens or 0) >= GREEDY.max_tokens
    assert after.finished >= (before.finished or 0) + 1
    assert after.kv_total_tokens and after.kv_total_tokens > 1000  # vllm:cache_config_info
    stats = remote.stats()
    assert stats.state == "ready" and stats.models == ("smollm2",)
    assert stats.requests_finished >= 1


def test_bench_serve_against_vllm(vllm, tmp_path, smollm2_hf):
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "npu_console.cli.main", "bench", "serve", "--base-url",
         vllm.url, "--concurrency", "4", "--num-prompts", "8", "--input-len", "32",
         "--output-len", "8", "--tokenizer", str(smollm2_hf), "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(out.with_suffix(".json").read_text())
    summary = result["metrics"]
    assert summary["completed"] == 8 and summary.get("failed", 0) == 0, summary
    assert summary["total_output_tokens"] == 8 * 8  # ignore_eos honoured by vLLM
    assert summary["ttft_ms"]["p50"] > 0


def test_fleet_card_is_fed_by_vllm_metrics_and_says_engine_only(vllm, qapp, remote):
    from npu_console.console.widgets.host_card import HostCard
    from npu_console.engine.remote.fleet import FleetMonitor, ServerRef

    with FleetMonitor(poll_s=0.5) as fleet:
        fleet.add(ServerRef(vllm.url, name="vllm-cpu"))
        _run(remote, prompt="Water boils at")
        deadline = time.monotonic() + 30
        snap = None
        while time.monotonic() < deadline:
            snap = fleet.snapshot(vllm.url)
            if snap is not None and snap.state == "up" and snap.engine is not None:
                break
            time.sleep(0.25)
        assert snap is not None and snap.state == "up", snap
        assert snap.telemetry is None and "no telemetry" in (snap.error or "")
        assert snap.engine.models == ("smollm2",)
        assert snap.engine.requests_finished >= 1
        card = HostCard(vllm.url)
        card.show_host(snap)
        assert card.title.text() == "vllm-cpu"
        assert card.chips.text().startswith("engine only")
        assert "tok/s" in card.engine.text() and "queued" in card.engine.text()
