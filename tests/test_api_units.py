"""Pieces of the API that need no model: safety rules, request log, parameter translation,
error messages, the port check and the stream chunk encoder."""

from __future__ import annotations

import json
import socket

import pytest
from npu_console.engine.api import (
    ApiSettings,
    RequestLog,
    RequestLogEntry,
    UnsafeSettingsError,
    port_in_use,
)
from npu_console.engine.api.errors import ApiError, api_error_from_engine, validation_message
from npu_console.engine.api.openai_format import ChunkWriter
from npu_console.engine.api.ports import PortInUseError, bound_socket
from npu_console.engine.api.schemas import ChatCompletionRequest, CompletionRequest
from npu_console.engine.api.settings import is_loopback, parse_origins
from npu_console.engine.runtime.types import (
    ContextLengthError,
    FinishEvent,
    QueueFullError,
    RequestTimings,
    Usage,
)
from pydantic import ValidationError


@pytest.mark.parametrize("host,expected", [
    ("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("::1", True),
    ("[::1]", True), ("0.0.0.0", False), ("::", False), ("192.168.1.5", False),
    ("example.org", False),
])
def test_loopback_detection(host, expected):
    assert is_loopback(host) is expected


def test_exposed_host_requires_api_key():
    ApiSettings(host="127.0.0.1").check_safe()
    ApiSettings(host="0.0.0.0", api_key="k").check_safe()
    with pytest.raises(UnsafeSettingsError, match="--api-key"):
        ApiSettings(host="0.0.0.0").check_safe()
    with pytest.raises(UnsafeSettingsError):
        ApiSettings(host="10.0.0.2", api_key="").check_safe()


def test_parse_origins():
    assert parse_origins(None) == ()
    assert parse_origins("http://a.test, http://b.test ,") == ("http://a.test", "http://b.test")
    assert parse_origins("*") == ("*",)


def _entry(i: int) -> RequestLogEntry:
    return RequestLogEntry(time=float(i), method="POST", route="/v1/completions", status=200,
                           duration_s=0.1)


def test_request_log_is_a_ring_buffer_with_subscribers():
    log = RequestLog(size=3)
    seen = []
    unsubscribe = log.subscribe(seen.append)
    for i in range(5):
        log.add(_entry(i))
    assert [e.time for e in log.entries()] == [2.0, 3.0, 4.0]
    assert [e.time for e in seen] == [0.0, 1.0, 2.0, 3.0, 4.0]
    unsubscribe()
    log.add(_entry(5))
    assert len(seen) == 5 and len(log) == 3


def test_broken_subscriber_does_not_stop_logging():
    log = RequestLog(size=10)
    good = []

    def broken(_):
        raise RuntimeError("viewer bug")

    log.subscribe(broken)
    log.subscribe(good.append)
    log.add(_entry(1))
    assert len(good) == 1 and len(log) == 1


def test_sampling_translation_defaults_and_overrides():
    req = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}])
    p = req.sampling(default_max_tokens=77, max_tokens=req.completion_budget())
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.seed, p.stop) == \
        (77, 1.0, 1.0, 0, None, ())
    req = ChatCompletionRequest(
        messages=[{"role": "user", "content": "hi"}], max_tokens=5, max_completion_tokens=9,
        temperature=0, top_p=0.5, top_k=-1, min_p=0.1, seed=3, stop="END",
        presence_penalty=0.5, frequency_penalty=-0.5, repetition_penalty=1.2)
    p = req.sampling(default_max_tokens=77, max_tokens=req.completion_budget(), seed_offset=2)
    assert p.max_tokens == 9  # max_completion_tokens wins, as in OpenAI's API
    assert p.greedy and p.top_p == 0.5 and p.top_k == 0 and p.min_p == 0.1
    assert p.seed == 5 and p.stop == ("END",)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.5, -0.5, 1.2)


def test_text_content_parts_are_joined_and_images_refused():
    req = ChatCompletionRequest(messages=[{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    assert req.engine_messages() == [{"role": "user", "content": "ab"}]
    req = ChatCompletionRequest(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}])
    with pytest.raises(ApiError) as err:
        req.engine_messages()
    assert err.value.status == 400 and err.value.param == "messages.0.content.0.type"


@pytest.mark.parametrize("prompt,expected", [
    ("abc", ["abc"]), (["a", "b"], ["a", "b"]), ([1, 2, 3], [[1, 2, 3]]),
    ([[1], [2, 3]], [[1], [2, 3]]),
])
def test_completion_prompt_forms(prompt, expected):
    assert CompletionRequest(prompt=prompt).prompts() == expected


@pytest.mark.parametrize("prompt", [[], [[]], [-1, 2]])
def test_bad_completion_prompts_are_400(prompt):
    with pytest.raises(ApiError) as err:
        CompletionRequest(prompt=prompt).prompts()
    assert err.value.status == 400 and err.value.param == "prompt"


def test_too_many_stop_sequences():
    req = CompletionRequest(prompt="x", stop=[str(i) for i in range(17)])
    with pytest.raises(ApiError, match="at most 16"):
        req.sampling(default_max_tokens=4)


def test_validation_message_names_the_parameter():
    with pytest.raises(ValidationError) as err:
        CompletionRequest(prompt="x", top_p=1.5)
    message, param = validation_message(err.value.errors())
    assert param == "top_p" and "top_p" in message and "1.5" in message
    with pytest.raises(ValidationError) as err:
        ChatCompletionRequest(messages=[{"role": "wizard", "content": "x"}])
    message, param = validation_message(err.value.errors())
    assert param == "messages.0.role"


def test_engine_errors_map_to_openai_codes():
    e = api_error_from_engine(QueueFullError("full", retry_after_s=2.5))
    assert e.status == 429 and e.headers == {"Retry-After": "3"} and e.code == "queue_full"
    e = api_error_from_engine(ContextLengthError("600 > 512", param="prompt"))
    assert e.status == 400 and e.code == "context_length_exceeded" and e.param == "prompt"


def test_chunk_writer_emits_valid_openai_chunks():
    w = ChunkWriter("chatcmpl-1", "m", chat=True, include_usage=True)
    role = json.loads(w.role(0)[len(b"data: "):])
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["usage"] is None and role["object"] == "chat.completion.chunk"
    tricky = 'quote " backslash \\ newline \n unicode é ☃'
    raw = w.text(1, tricky)
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n") and raw.count(b"\n") == 2
    chunk = json.loads(raw[len(b"data: "):])
    assert chunk["choices"][0] == {"index": 1, "delta": {"content": tricky}, "logprobs": None,
                                   "finish_reason": None}
    fin = FinishEvent("r", "stop", Usage(3, 4), RequestTimings(0.0, 0.0, 0.1, 0.5, 0.1), "m",
                      stop_reason="END")
    chunk = json.loads(w.finish(0, fin)[len(b"data: "):])
    assert chunk["choices"][0]["finish_reason"] == "stop"
    assert chunk["choices"][0]["stop_reason"] == "END"
    w = ChunkWriter("cmpl-1", "m", chat=False, include_usage=False)
    chunk = json.loads(w.text(0, "x")[len(b"data: "):])
    assert chunk["object"] == "text_completion" and chunk["choices"][0]["text"] == "x"
    assert "usage" not in chunk


def test_port_in_use_sees_a_listening_socket():
    holder = bound_socket("127.0.0.1", 0)
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        assert port_in_use("127.0.0.1", port)
        with pytest.raises(PortInUseError, match=f"port {port}"):
            bound_socket("127.0.0.1", port)
    finally:
        holder.close()
    assert not port_in_use("127.0.0.1", port)


def test_port_in_use_ignores_time_wait_leftovers():
    """A closed server whose connections linger in TIME_WAIT must not block a restart."""
    server = bound_socket("127.0.0.1", 0)
    server.listen(1)
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end goes to TIME_WAIT
    client.close()
    server.close()
    assert not port_in_use("127.0.0.1", port)
