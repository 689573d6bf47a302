"""The API over real HTTP (uvicorn on a free loopback port) on a real model (stories260K)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
from support.api import (
    STORY_PROMPT,
    default_engine,
    metric_value,
    own_engine,
    running_server,
    stream_post,
    token_count,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(stories_dir):
    return default_engine(stories_dir)


@pytest.fixture(scope="module")
def server(engine):
    with running_server(engine) as (controller, url):
        yield controller, url


@pytest.fixture(scope="module")
def url(server):
    return server[1]


def post(url, path, body, **kw):
    return httpx.post(url + path, json=body, timeout=120, **kw)


def assert_error(r, status, param=None, contains=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"] and "Traceback" not in r.text
    if param is not None:
        assert err["param"] == param
    if contains is not None:
        assert contains in err["message"], err["message"]
    return err


# ----------------------------------------------------------------------------- happy paths


def test_models_lists_every_variant_and_a_request_picks_one(url):
    r = httpx.get(url + "/v1/models")
    assert r.status_code == 200
    cards = {m["id"]: m for m in r.json()["data"]}
    assert set(cards) == {"stories", "stories-bf16", "stories-w8a8-dynamic"}
    assert cards["stories"]["dtype"] == "float32" and cards["stories-bf16"]["dtype"] == "bfloat16"
    assert cards["stories"]["quantization"] is None
    assert cards["stories-w8a8-dynamic"]["quantization"] == "w8a8-dynamic"
    assert cards["stories"]["max_model_len"] == 512
    # 64-wide layers sit in cache: the native fp32 kernel is for bigger ones (cpu_linear.py)
    assert {c["linear_kernels"] for c in cards.values()} == {"torch"}
    # decode-only steps of float32 models run as one native call (native_decode.py); bf16 not
    from npu_console.engine.kernels import native
    expect = "native" if native.available() else "torch"
    assert cards["stories"]["decode_step"] == cards["stories-w8a8-dynamic"]["decode_step"] == expect
    assert cards["stories-bf16"]["decode_step"] == "torch"
    # the int8 layers say what runs them: the native kernels on AVX2 and AVX512-VNNI CPUs alike
    kernels = cards["stories-w8a8-dynamic"]["int8_kernels"]
    # ... and name the instructions: native-avx512-vnni where the CPU has them, else native-avx2
    if native.available():
        assert kernels == f"native-{native.int8_isa()}"
    else:
        assert kernels.startswith("fbgemm")
    assert cards["stories"]["int8_kernels"] == ""
    for name in cards:
        r = post(url, "/v1/completions", {"model": name, "prompt": STORY_PROMPT, "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == name
    assert httpx.get(url + "/v1/models/stories-bf16").json()["id"] == "stories-bf16"
    assert_error(httpx.get(url + "/v1/models/nope"), 404, param="model")


def test_health_when_ready(url):
    r = httpx.get(url + "/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}  # no key, no details (issue 35)


def test_completion_matches_the_engine_and_counts_exactly(url, engine, stories_dir):
    r = post(url, "/v1/completions", {"prompt": STORY_PROMPT, "max_tokens": 8, "temperature": 0,
                                      "model": "stories"})
    assert r.status_code == 200
    body = r.json()
    direct = engine.generate(GenerationRequest(
        prompt=STORY_PROMPT, model="stories",
        params=SamplingParams(max_tokens=8, temperature=0.0)), timeout=120)
    choice = body["choices"][0]
    assert body["object"] == "text_completion" and body["model"] == "stories"
    assert choice["text"] == direct.text and choice["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["prompt_tokens"] == token_count(stories_dir, STORY_PROMPT)
    assert usage["completion_tokens"] == 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + 8
    timings = body["timings"]
    assert timings["predicted_n"] == 8 and timings["ttft_ms"] > 0
    assert timings["e2e_ms"] >= timings["ttft_ms"] and timings["queue_ms"] >= 0


def test_stream_equals_non_stream_and_ends_with_usage_then_done(url):
    body = {"prompt": STORY_PROMPT, "max_tokens": 8, "temperature": 0}
    whole = post(url, "/v1/completions", body).json()
    events = stream_post(url + "/v1/completions",
                         {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    # the same counts; cached_tokens may differ: the second run reuses the first one's prefix
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert {k: usage_chunk["usage"][k] for k in counts} == {k: whole["usage"][k] for k in counts}
    assert usage_chunk["timings"]["predicted_n"] == 8
    chunks = events[:-2]
    assert all(c["usage"] is None for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == whole["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len({c["id"] for c in events[:-1]}) == 1


@pytest.mark.parametrize("interval_ms", [0, 250])
def test_stream_interval_coalesces_fast_tokens_and_loses_none(engine, url, interval_ms):
    """0: one chunk per token. 250 ms on a model that makes hundreds of tokens/s: a handful of
    chunks carry all of them, the first still alone (TTFT is not held back), same text."""
    body = {"prompt": STORY_PROMPT, "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    whole = post(url, "/v1/completions", body).json()["choices"][0]["text"]
    with running_server(engine, stream_interval_ms=interval_ms) as (_, own_url):
        events = stream_post(own_url + "/v1/completions", {**body, "stream": True})
    texts = [c["choices"][0]["text"] for c in events[:-1] if c["choices"][0]["text"]]
    assert "".join(texts) == whole
    # the first chunk carries the first token alone: the text of a one-token completion
    one = post(url, "/v1/completions", {**body, "max_tokens": 1}).json()["choices"][0]["text"]
    assert texts[0] == one
    if interval_ms == 0:
        assert len(texts) >= 40  # (a few tokens may hold back half a character)
    else:
        assert len(texts) <= 12


def test_chat_stream_has_role_first_and_no_usage_unless_asked(url):
    events = stream_post(url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 5,
        "stream": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")


def test_chat_completion_usage(url):
    r = post(url, "/v1/chat/completions", {
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Hi"}],
        "max_completion_tokens": 4, "temperature": 0})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    assert body["usage"]["completion_tokens"] <= 4
    assert body["usage"]["prompt_tokens"] > 0


def test_stop_string_cuts_the_text(url):
    base = {"prompt": STORY_PROMPT, "max_tokens": 12, "temperature": 0}
    full = post(url, "/v1/completions", base).json()["choices"][0]["text"]
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    cut = post(url, "/v1/completions", {**base, "stop": [stop, "zzzz"]}).json()["choices"][0]
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop
    assert stop not in cut["text"] and full.startswith(cut["text"])


def test_seed_makes_sampling_reproducible(url):
    body = {"prompt": STORY_PROMPT, "max_tokens": 12, "temperature": 1.0, "seed": 1234}
    a = post(url, "/v1/completions", body).json()["choices"][0]["text"]
    b = post(url, "/v1/completions", body).json()["choices"][0]["text"]
    assert a == b
    others = {post(url, "/v1/completions", {**body, "seed": s}).json()["choices"][0]["text"]
              for s in (1, 2, 3)}
    assert len(others | {a}) > 1


def test_n_choices_and_prompt_batches(url, stories_dir):
    r = post(url, "/v1/completions", {"prompt": STORY_PROMPT, "n": 3, "max_tokens": 4,
                                      "temperature": 1.0, "seed": 5})
    assert r.status_code == 200
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    # OpenAI counts the prompt once for n choices
    assert body["usage"]["prompt_tokens"] == token_count(stories_dir, STORY_PROMPT)
    assert body["usage"]["completion_tokens"] == 12
    r = post(url, "/v1/completions", {"prompt": ["Once", "The dog"], "n": 2, "max_tokens": 3,
                                      "temperature": 0})
    body = r.json()
    texts = [c["text"] for c in body["choices"]]
    assert texts[0] == texts[1] and texts[2] == texts[3]  # greedy: same prompt, same text
    assert body["usage"]["prompt_tokens"] == token_count(stories_dir, "Once") + \
        token_count(stories_dir, "The dog")
    events = stream_post(url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "n": 2, "max_tokens": 3,
        "stream": True, "stream_options": {"include_usage": True}})
    finished = {c["choices"][0]["index"] for c in events[:-2] if c["choices"][0]["finish_reason"]}
    assert finished == {0, 1} and events[-2]["usage"]["completion_tokens"] == 6
    assert_error(post(url, "/v1/completions", {"prompt": "x", "n": 9}), 400, param="n")


def test_token_id_prompt_and_echo(url, stories_dir):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(stories_dir)).encode(STORY_PROMPT)
    by_ids = post(url, "/v1/completions", {"prompt": ids, "max_tokens": 5, "temperature": 0})
    by_text = post(url, "/v1/completions", {"prompt": STORY_PROMPT, "max_tokens": 5,
                                            "temperature": 0})
    assert by_ids.json()["choices"][0]["text"] == by_text.json()["choices"][0]["text"]
    assert by_ids.json()["usage"]["prompt_tokens"] == len(ids)
    echoed = post(url, "/v1/completions", {"prompt": STORY_PROMPT, "max_tokens": 5,
                                           "temperature": 0, "echo": True}).json()
    assert echoed["choices"][0]["text"] == STORY_PROMPT + by_text.json()["choices"][0]["text"]
    assert_error(post(url, "/v1/completions", {"prompt": ids, "echo": True}), 400, param="echo")
    assert_error(post(url, "/v1/completions", {"prompt": [10**6]}), 400, param="prompt")


def test_legacy_chat_route(url):
    r = post(url, "/chat", {"prompt": STORY_PROMPT, "max_length": 6, "temperature": 0.0,
                            "top_p": 1.0})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"response", "usage"} and body["response"]
    assert body["usage"]["completion_tokens"] == 6
    assert_error(post(url, "/chat", {"max_length": 6}), 400, param="prompt")


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("raw,param,contains", [
    (b"{not json", None, "not valid JSON"),
    (b"[1, 2]", None, None),
    (b"", None, None),
    (b'{"prompt": "x", "temperature": "hot"}', "temperature", "temperature"),
    (b'{"prompt": "x", "max_tokens": 0}', "max_tokens", "max_tokens"),
    (b'{"prompt": "x", "top_p": 0}', "top_p", None),
    (b'{"prompt": "x", "seed": -1}', "seed", None),
    (b'{"prompt": "x", "stop": 5}', None, "stop"),
    (b'{"prompt": {"a": 1}}', None, "prompt"),
    (b'{"temperature": 1}', "prompt", "prompt"),
])
def test_bad_completion_bodies_are_400_naming_the_parameter(url, raw, param, contains):
    r = httpx.post(url + "/v1/completions", content=raw, timeout=30,
                   headers={"content-type": "application/json"})
    assert_error(r, 400, param=param, contains=contains)


@pytest.mark.parametrize("body,param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user"}], "logprobs": True}, "logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop"),
    ({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 3}, "presence_penalty"),
])
def test_bad_chat_bodies_are_400(url, body, param):
    assert_error(post(url, "/v1/chat/completions", body), 400, param=param)


def test_unknown_model_is_404(url):
    err = assert_error(post(url, "/v1/chat/completions", {
        "model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}), 404, param="model")
    assert err["code"] == "model_not_found" and "stories" in err["message"]


def test_prompt_over_context_is_400_with_both_numbers(url, stories_dir):
    prompt = "the cat sat on the mat " * 100
    n = token_count(stories_dir, prompt)
    assert n > 512
    err = assert_error(post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 4}), 400)
    assert err["code"] == "context_length_exceeded"
    assert "512" in err["message"] and str(n) in err["message"]


def test_without_max_tokens_the_completion_fits_the_context(url, stories_dir):
    """The default max_tokens (256) is not the caller's limit: near the end of the context the
    request gets what is left, as vLLM does; an explicit max_tokens that does not fit is 400."""
    prompt = "the cat sat on the mat " * 50
    n = token_count(stories_dir, prompt)
    assert 512 - 256 < n < 512 - 1
    r = post(url, "/v1/completions", {"prompt": prompt, "ignore_eos": True, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["prompt_tokens"] == n
    assert body["usage"]["completion_tokens"] == 512 - n
    assert body["choices"][0]["finish_reason"] == "length"
    err = assert_error(post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 256}), 400)
    assert err["code"] == "context_length_exceeded" and str(512 - n) in err["message"]


def test_oversized_body_is_413_before_it_is_read(url):
    big = b'{"prompt": "' + b"x" * 1_200_000 + b'"}'
    r = httpx.post(url + "/v1/completions", content=big, timeout=30,
                   headers={"content-type": "application/json"})
    err = assert_error(r, 413)
    assert "1000000" in err["message"]

    def chunked():  # no Content-Length: the limit is enforced while the body arrives
        for _ in range(40):
            yield b"x" * 50_000

    r = httpx.post(url + "/v1/completions", content=chunked(), timeout=30,
                   headers={"content-type": "application/json"})
    assert_error(r, 413)


def test_a_client_still_sending_an_oversized_body_gets_its_413_not_a_reset(url):
    """The server answers 413 before it has read the body; closing with unread data would reset
    the connection and the client would lose the answer (the soak lost 29 of 80 that way).
    Ten times on one kept-alive connection, between good requests, as a real client sends
    them: every oversized one must come back as a 413, every good one as a 200."""
    big = b'{"prompt": "' + b"x" * 1_500_000 + b'"}'

    async def client() -> list:
        got = []
        async with httpx.AsyncClient(base_url=url, timeout=30,
                                     limits=httpx.Limits(max_connections=1)) as c:
            for _ in range(10):
                got.append(await c.post("/v1/completions", content=big,
                                        headers={"content-type": "application/json"}))
                got.append(await c.post("/v1/completions",
                                        json={"prompt": "Once", "max_tokens": 2}))
        return got

    answers = asyncio.run(client())
    for big_answer in answers[::2]:
        assert_error(big_answer, 413)
    assert all(r.status_code == 200 for r in answers[1::2])


def test_unknown_route_and_method(url):
    assert_error(httpx.get(url + "/v1/nothing"), 404)
    assert_error(httpx.get(url + "/v1/completions"), 405)


def test_request_log_records_tokens_and_keeps_prompts_out(server):
    controller, url = server
    seen = []
    unsubscribe = controller.request_log.subscribe(seen.append)
    try:
        post(url, "/v1/completions", {"prompt": "secret words", "max_tokens": 3,
                                      "temperature": 0})
        post(url, "/v1/completions", {"prompt": "x", "top_k": -5})
    finally:
        unsubscribe()
    ok, bad = seen[-2], seen[-1]
    assert (ok.method, ok.route, ok.status, ok.model) == ("POST", "/v1/completions", 200,
                                                          "stories")
    assert ok.completion_tokens == 3 and ok.prompt_tokens > 0 and ok.ttft_s > 0
    assert ok.duration_s >= ok.ttft_s and ok.prompt is None
    assert bad.status == 400
    assert controller.request_log.entries()[-1] == bad


def test_metrics_count_requests(url):
    def served() -> float:
        text = httpx.get(url + "/metrics").text
        return metric_value(text, "npu_console_api_requests_total") or 0.0

    before = served()
    post(url, "/v1/completions", {"prompt": "x", "max_tokens": 1})
    # the /metrics scrape itself is counted too once answered
    assert served() == before + 2
    text = httpx.get(url + "/metrics").text
    assert metric_value(text, "npu_console_api_engine_requests_live") == 0


# ----------------------------------------------------------------------------- other settings


def test_api_key_guards_everything_but_health(engine):
    with running_server(engine, api_key="s3cret") as (_, url):
        assert httpx.get(url + "/health").status_code == 200
        for path in ("/v1/models", "/metrics", "/docs", "/openapi.json"):
            err = assert_error(httpx.get(url + path), 401)
            assert err["code"] == "invalid_api_key"
        assert_error(httpx.get(url + "/v1/models", headers={"Authorization": "Bearer nope"}), 401)
        assert_error(httpx.get(url + "/v1/models", headers={"Authorization": "s3cret"}), 401)
        ok = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


def test_cors_only_when_origins_are_given(engine, url):
    preflight = {"Origin": "http://app.test", "Access-Control-Request-Method": "POST"}
    r = httpx.options(url + "/v1/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in r.headers
    with running_server(engine, cors_origins=("http://app.test",), api_key="k") as (_, curl):
        r = httpx.options(curl + "/v1/chat/completions", headers=preflight)
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "http://app.test"
        r = httpx.options(curl + "/v1/chat/completions",
                          headers={**preflight, "Origin": "http://evil.test"})
        assert "access-control-allow-origin" not in r.headers


def test_prompt_logging_when_enabled(engine):
    with running_server(engine, log_prompts=True) as (controller, url):
        post(url, "/v1/completions", {"prompt": "remember me", "max_tokens": 1})
        assert "remember me" in controller.request_log.entries()[-1].prompt


def test_no_model_is_503_and_loading_is_503(stories_dir, monkeypatch):
    from support.loading import held_loads

    with own_engine(None) as empty, running_server(empty) as (_, url):
        r = httpx.get(url + "/health")
        assert r.status_code == 503 and r.json()["status"] == "no_model"
        assert_error(post(url, "/v1/completions", {"prompt": "x"}), 503,
                     contains="no model")
        release = held_loads(monkeypatch)  # the load cannot end before /health answers
        job = empty.load(stories_dir, name="late")
        r = httpx.get(url + "/health")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        assert not job.done()
        release.set()
        job.result(300)
        assert httpx.get(url + "/health").status_code == 200
        assert post(url, "/v1/completions", {"prompt": "x", "max_tokens": 1}).json()[
            "model"] == "late"


def test_metrics_include_device_telemetry_when_a_poller_is_given(engine, npu_smi_fixtures):
    from npu_console.engine.api import ServerController
    from npu_console.engine.telemetry.poller import TelemetryPoller
    from npu_console.engine.telemetry.providers import make_provider

    source = make_provider("replay", replay_files=[npu_smi_fixtures / "a3_info_6.txt"])
    poller = TelemetryPoller(source, rules=[])
    poller.poll_once()
    controller = ServerController(engine, telemetry_poller=poller)
    url = controller.start("127.0.0.1", 0)
    try:
        text = httpx.get(url + "/metrics").text
    finally:
        controller.stop()
    assert "machine_npu_nums 4.0" in text and 'npu_console_telemetry_up{source="replay' in text
    assert metric_value(text, "npu_console:engine_ready") == 1.0
    assert metric_value(text, "npu_console:num_requests_running") is not None


def test_first_token_is_its_own_group_even_when_the_rest_already_waits(engine):
    """The worst case of a fast model: every event is buffered before the stream looks. The
    first text token still comes alone, then everything else at once (no tick waited)."""
    import asyncio
    import time

    from npu_console.engine.api.batch import Batch
    from npu_console.engine.runtime.types import (
        FinishEvent,
        GenerationRequest,
        SamplingParams,
        TokenEvent,
    )

    handle = engine.submit(GenerationRequest(prompt=STORY_PROMPT, params=SamplingParams(
        max_tokens=12, temperature=0.0, ignore_eos=True)))
    deadline = time.monotonic() + 60
    while not handle.done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert handle.done
    batch = Batch(ctx=None, requests=[], n=1)
    batch.handles = [handle]

    async def groups():
        return [g async for g in batch.event_groups(min_interval=10.0)]  # a tick would hang

    got = asyncio.run(asyncio.wait_for(groups(), timeout=5))
    assert len(got) == 2
    first = [ev for _, ev in got[0] if isinstance(ev, TokenEvent) and ev.text]
    assert len(first) == 1 and got[0][-1][1] is first[0]
    rest = [ev for _, ev in got[1]]
    assert isinstance(rest[-1], FinishEvent) and rest[-1].usage.completion_tokens == 12
    tokens = [ev for _, ev in got[0] + got[1] if isinstance(ev, TokenEvent)]
    assert sum(len(ev.token_ids) for ev in tokens) == 12  # nothing lost in the split
