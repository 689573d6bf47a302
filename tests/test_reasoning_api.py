"""reasoning_content over HTTP: the real server on loopback with the reasoning demo model, read by
the official `openai` package, httpx, our remote client and the serving benchmark."""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
from support.api import own_engine, running_server, sse_events

pytestmark = pytest.mark.slow

openai = pytest.importorskip("openai")

ASK = {"model": "think", "messages": [{"role": "user", "content": "Spell rocket backwards."}],
       "temperature": 0, "max_tokens": 200}


@contextlib.contextmanager
def _engine(think_model_dir, demo_model_dir=None, **config):
    with own_engine(None, max_running=4, **config) as eng:
        eng.load(think_model_dir, name="think", default=True).result(300)
        if demo_model_dir is not None:
            eng.load(demo_model_dir, name="demo").result(300)
        yield eng


@pytest.fixture(scope="module")
def served(think_model_dir, demo_model_dir):
    with _engine(think_model_dir, demo_model_dir) as eng, \
            running_server(eng, stream_interval_ms=0) as (_, url):
        yield eng, url


@pytest.fixture()
def client(served):
    with openai.OpenAI(base_url=served[1] + "/v1", api_key="none", max_retries=0,
                       timeout=120) as c:
        yield c


def test_openai_client_reads_reasoning_content(served, client):
    engine, _ = served
    resp = client.chat.completions.create(**ASK)
    msg = resp.choices[0].message
    assert resp.choices[0].finish_reason == "stop"
    assert msg.reasoning_content and msg.content  # an extra field, kept by the client
    for part in (msg.content, msg.reasoning_content):
        assert "<think>" not in part and "</think>" not in part
    usage = resp.usage
    assert 0 < usage.completion_tokens_details.reasoning_tokens < usage.completion_tokens
    # the same numbers as the engine reports for the same request
    done = engine.generate(GenerationRequest(messages=ASK["messages"],
                                             params=SamplingParams(max_tokens=200,
                                                                   temperature=0.0)))
    assert (done.reasoning, done.text) == (msg.reasoning_content, msg.content)
    assert done.finish.usage.reasoning_tokens == usage.completion_tokens_details.reasoning_tokens
    assert done.finish.usage.completion_tokens == usage.completion_tokens


def test_openai_streaming_sends_reasoning_then_content(client):
    whole = client.chat.completions.create(**ASK).choices[0].message
    reasoning, content, order, usage = [], [], [], None
    for chunk in client.chat.completions.create(**ASK, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        r = getattr(delta, "reasoning_content", None)
        if r:
            reasoning.append(r)
            order.append("r")
        if delta.content:
            content.append(delta.content)
            order.append("c")
    assert "".join(reasoning) == whole.reasoning_content
    assert "".join(content) == whole.content
    assert len(reasoning) > 3  # streamed live, not in one piece at the end
    assert order == sorted(order, key=lambda x: x != "r")  # all reasoning before the answer
    assert usage.completion_tokens_details.reasoning_tokens > 0


def _raw(url: str, body: dict) -> tuple[dict, list[dict]]:
    with httpx.Client(base_url=url, timeout=120) as h:
        whole = h.post("/v1/chat/completions", json=body).json()
        with h.stream("POST", "/v1/chat/completions",
                      json={**body, "stream": True,
                            "stream_options": {"include_usage": True}}) as r:
            chunks = sse_events(r.iter_lines())
    return whole, chunks


def test_wire_format_is_vllms(served):
    whole, chunks = _raw(served[1], ASK)
    message = whole["choices"][0]["message"]
    assert set(message) == {"role", "content", "reasoning_content"}
    assert whole["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": whole["usage"]["completion_tokens_details"]["reasoning_tokens"]}
    deltas = [c["choices"][0]["delta"] for c in chunks if c != "[DONE]" and c["choices"]]
    assert any("reasoning_content" in d for d in deltas)
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == message["content"]


def test_models_without_reasoning_send_no_reasoning_fields(served):
    body = {"model": "demo", "messages": [{"role": "user", "content": "Explain os.path.join."}],
            "temperature": 0, "max_tokens": 24}
    whole, chunks = _raw(served[1], body)
    assert set(whole["choices"][0]["message"]) == {"role", "content"}
    assert "completion_tokens_details" not in whole["usage"]
    text = json.dumps(chunks)
    assert "reasoning" not in text and "completion_tokens_details" not in text
    with httpx.Client(base_url=served[1], timeout=60) as h:
        cards = {c["id"]: c for c in h.get("/v1/models").json()["data"]}
    assert cards["think"]["reasoning_parser"] == "deepseek_r1"
    assert cards["demo"]["reasoning_parser"] is None


def test_reasoning_parser_none_serves_raw_text(think_model_dir):
    with _engine(think_model_dir, reasoning_parser="none") as eng, \
            running_server(eng) as (_, url):
        whole, _ = _raw(url, ASK)
    message = whole["choices"][0]["message"]
    assert "reasoning_content" not in message
    assert message["content"].startswith("<think>\n") and "\n</think>\n\n" in message["content"]
    assert "completion_tokens_details" not in whole["usage"]


def test_remote_client_reads_reasoning(served, client):
    from npu_console.engine.remote import RemoteEngine

    whole = client.chat.completions.create(**ASK)
    with RemoteEngine(served[1], model="think", poll_interval_s=None) as remote:
        assert {m.name: m.reasoning_parser for m in remote.models()}["think"] == "deepseek_r1"
        handle = remote.submit(GenerationRequest(
            messages=ASK["messages"], params=SamplingParams(max_tokens=200, temperature=0.0)))
        done = handle.result(120)
    assert done.reasoning == whole.choices[0].message.reasoning_content
    assert done.text == whole.choices[0].message.content
    fin = done.finish
    assert fin.usage.reasoning_tokens == whole.usage.completion_tokens_details.reasoning_tokens
    assert 0 < fin.timings.ttft_s < fin.timings.first_answer_s and fin.timings.reasoning_s > 0


def test_bench_serve_reports_time_to_first_answer_token(served):
    from npu_console.engine.bench.serving import ServingConfig, run_serving_benchmark

    def run(model: str):
        return run_serving_benchmark(ServingConfig(
            base_url=served[1], model=model, endpoint="chat", num_prompts=3, concurrency=3,
            input_len=8, output_len=120, ignore_eos=False, seed=1))

    think = run("think")
    m = think.metrics
    assert m.completed == 3 and m.first_answer_ms.count == 3
    assert m.first_answer_ms.p50 > m.ttft_ms.p50
    assert all(r.reasoning_tokens and r.first_answer_s > r.ttft_s for r in think.requests)
    assert "Time to first answer token" in think.summary_text()
    assert think.summary_row()["p50_first_answer_ms"] == m.first_answer_ms.p50
    plain = run("demo")
    assert plain.metrics.completed == 3 and plain.metrics.first_answer_ms.count == 0
    assert "first answer" not in plain.summary_text()


def test_smollm2_answers_as_before(smollm2_gguf):
    """SmolLM2-135M-Instruct (a real chat model whose template has no think tags): no parser,
    no reasoning fields, streaming or not."""
    with own_engine(None, max_running=2) as eng:
        info = eng.load(smollm2_gguf, name="smollm2").result(900)
        assert info.reasoning_parser is None
        with running_server(eng) as (_, url):
            whole, chunks = _raw(url, {
                "model": "smollm2", "temperature": 0, "max_tokens": 16,
                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    assert set(whole["choices"][0]["message"]) == {"role", "content"}
    assert "Paris" in whole["choices"][0]["message"]["content"]
    assert "completion_tokens_details" not in whole["usage"]
    assert "reasoning" not in json.dumps(chunks)
