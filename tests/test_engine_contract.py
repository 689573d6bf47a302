"""The EngineClient contract, run against every implementation: the in-process LocalEngine and
the RemoteEngine talking to a real npu-console server on loopback (which itself serves a
LocalEngine). Both load the real stories260K model."""

from __future__ import annotations

import asyncio
import time

import pytest
from npu_console.engine.runtime.types import (
    ContextLengthError,
    FinishEvent,
    GenerationRequest,
    InvalidRequestError,
    ModelNotFoundError,
    SamplingParams,
    TokenEvent,
)
from support.api import own_engine

pytestmark = pytest.mark.slow

PROMPT = "Once upon a time, there was a little"


@pytest.fixture(scope="module")
def served(stories_dir):
    from npu_console.engine.api import ServerController

    with own_engine(stories_dir, "stories", max_running=4) as engine:
        controller = ServerController(engine)
        url = controller.start(port=0)
        yield engine, url
        controller.stop(grace_s=1.0)


@pytest.fixture(scope="module", params=["local", "remote"])
def client(request, served):
    engine, url = served
    if request.param == "local":
        yield engine
        return
    from npu_console.engine.remote import RemoteEngine

    remote = RemoteEngine(url, poll_interval_s=0.2)
    yield remote
    remote.shutdown()


def greedy(n: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, **kw)


def test_stream_ends_with_one_finish_event_with_usage(client):
    handle = client.submit(GenerationRequest(prompt=PROMPT, params=greedy(12)))
    events = list(handle)
    assert isinstance(events[-1], FinishEvent)
    assert all(isinstance(e, TokenEvent) for e in events[:-1])
    fin = events[-1]
    assert fin.finish_reason == "length"
    assert fin.usage.completion_tokens == 12
    assert fin.usage.prompt_tokens > 5
    t = fin.timings
    assert t.ttft_s is not None and 0 < t.ttft_s <= t.e2e_s
    assert t.tpot_s is not None and t.tpot_s > 0
    assert fin.model == "stories"
    assert "".join(e.text for e in events[:-1]).strip()


def test_greedy_text_matches_the_local_engine(client, served):
    engine, _ = served
    expected = engine.generate(GenerationRequest(prompt=PROMPT, params=greedy(16)), 60).text
    got = client.submit(GenerationRequest(prompt=PROMPT, params=greedy(16))).result(60)
    assert got.text == expected
    assert got.finish.usage.completion_tokens == 16


def test_chat_messages_and_stop_strings(client):
    res = client.submit(GenerationRequest(
        messages=[{"role": "user", "content": "Tell me a story."}],
        params=SamplingParams(max_tokens=40, temperature=0.0, stop=("the",)))).result(60)
    assert "the" not in res.text
    assert res.finish.finish_reason in ("stop", "length")


def test_async_iteration(client):
    async def collect():
        handle = client.submit(GenerationRequest(prompt=PROMPT, params=greedy(6)))
        return [ev async for ev in handle]

    events = asyncio.run(collect())
    assert isinstance(events[-1], FinishEvent) and events[-1].usage.completion_tokens == 6


def test_cancel_ends_the_request(client, served):
    engine, _ = served
    handle = client.submit(GenerationRequest(prompt=PROMPT, params=greedy(400)))
    seen = 0
    fin = None
    for ev in handle:
        if isinstance(ev, TokenEvent):
            seen += 1
            if seen == 2:
                handle.cancel()
        else:
            fin = ev
    assert fin is not None and fin.finish_reason == "cancelled"
    assert fin.usage.completion_tokens < 400
    deadline = time.monotonic() + 10
    while engine.stats().running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.stats().running == 0  # the server let go of the engine request too


def test_unknown_model_is_model_not_found(client):
    with pytest.raises(ModelNotFoundError):
        client.submit(GenerationRequest(prompt="x", model="no-such-model"))


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=-1.0),
    SamplingParams(top_p=0.0),
    SamplingParams(max_tokens=0),
])
def test_bad_params_are_invalid_request(client, params):
    with pytest.raises(InvalidRequestError):
        client.submit(GenerationRequest(prompt="x", params=params))


def test_too_long_is_context_length_error(client):
    with pytest.raises(ContextLengthError):
        client.submit(GenerationRequest(prompt=PROMPT, params=SamplingParams(max_tokens=5000)))


def test_models_and_stats(client):
    models = {m.name: m for m in client.models()}
    assert "stories" in models
    assert models["stories"].max_context == 512
    assert models["stories"].architecture == "LlamaForCausalLM"
    stats = client.stats()
    assert stats.state == "ready"
    assert "stories" in stats.models
