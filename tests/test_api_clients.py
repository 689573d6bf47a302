"""Real clients against the real server: the official `openai` package (sync and async,
streaming and not) and curl."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import pytest
from support.api import (
    STORY_PROMPT,
    default_engine,
    running_server,
    sse_events,
    token_count,
)

pytestmark = pytest.mark.slow

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def url(stories_dir):
    with running_server(default_engine(stories_dir), api_key="test-key") as (_, url):
        yield url


@pytest.fixture()
def client(url):
    with openai.OpenAI(base_url=url + "/v1", api_key="test-key", max_retries=0,
                       timeout=60) as c:
        yield c


def test_openai_sync_models_and_completions(client, stories_dir):
    assert [m.id for m in client.models.list()] == ["stories", "stories-bf16",
                                                   "stories-w8a8-dynamic"]
    done = client.completions.create(model="stories", prompt=STORY_PROMPT, max_tokens=6,
                                     temperature=0)
    assert done.choices[0].finish_reason == "length" and done.choices[0].text
    assert done.usage.prompt_tokens == token_count(stories_dir, STORY_PROMPT)
    assert done.usage.completion_tokens == 6
    chat = client.chat.completions.create(
        model="stories", messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=5, temperature=0)
    assert chat.choices[0].message.role == "assistant"
    assert chat.usage.completion_tokens == 5
    # the extra field survives the client's model (pydantic keeps unknown fields)
    assert chat.model_extra["timings"]["predicted_n"] == 5


def test_openai_sync_streaming_equals_non_streaming(client):
    kw = {"model": "stories", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
          "temperature": 0}
    whole = client.chat.completions.create(**kw)
    pieces, usage = [], None
    for chunk in client.chat.completions.create(**kw, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
    assert "".join(pieces) == whole.choices[0].message.content
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_openai_errors_are_typed(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="gpt-4", prompt="x", max_tokens=1)
    assert err.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="stories", prompt="x", temperature=9)
    assert err.value.body["param"] == "temperature"
    bad = openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_openai_async_streaming_and_not(url):
    async def main():
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="test-key",
                                      max_retries=0, timeout=60) as c:
            whole = await c.completions.create(model="stories", prompt=STORY_PROMPT,
                                               max_tokens=6, temperature=0)
            stream = await c.completions.create(model="stories", prompt=STORY_PROMPT,
                                                max_tokens=6, temperature=0, stream=True)
            text = "".join([ch.choices[0].text async for ch in stream if ch.choices])
            # several concurrent async streams over one client
            streams = await asyncio.gather(*[
                c.chat.completions.create(model="stories", max_tokens=4, stream=True,
                                          messages=[{"role": "user", "content": f"Hi {i}"}])
                for i in range(4)])
            counts = []
            for s in streams:
                counts.append(len([ch async for ch in s if ch.choices and
                                   ch.choices[0].delta.content]))
            return whole, text, counts

    whole, text, counts = asyncio.run(main())
    assert text == whole.choices[0].text
    assert all(0 < n <= 4 for n in counts)


@pytest.fixture(scope="module")
def curl():
    path = shutil.which("curl")
    if path is None:
        pytest.skip("curl is not installed (CI installs it with apt)")
    return path


def _curl(curl, *args) -> subprocess.CompletedProcess:
    return subprocess.run([curl, "-sS", "--max-time", "60", *args], check=False,
                          capture_output=True,
                          text=True, timeout=90)


def test_curl_non_streaming_and_streaming(curl, url):
    body = json.dumps({"model": "stories", "prompt": STORY_PROMPT, "max_tokens": 5,
                       "temperature": 0})
    auth = ["-H", "Authorization: Bearer test-key", "-H", "Content-Type: application/json"]
    out = _curl(curl, *auth, "-d", body, url + "/v1/completions")
    assert out.returncode == 0, out.stderr
    whole = json.loads(out.stdout)
    assert whole["usage"]["completion_tokens"] == 5
    body = json.dumps({"model": "stories", "prompt": STORY_PROMPT, "max_tokens": 5,
                       "temperature": 0, "stream": True})
    out = _curl(curl, "-N", *auth, "-d", body, url + "/v1/completions")
    assert out.returncode == 0, out.stderr
    events = sse_events(out.stdout.splitlines())
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == whole["choices"][0]["text"]


def test_curl_sees_status_codes(curl, url):
    out = _curl(curl, "-o", "/dev/null", "-w", "%{http_code}", url + "/health")
    assert out.stdout == "200"
    out = _curl(curl, "-o", "/dev/null", "-w", "%{http_code}", url + "/v1/models")
    assert out.stdout == "401"
    out = _curl(curl, "-w", "\n%{http_code}", "-H", "Authorization: Bearer test-key",
                "-H", "Content-Type: application/json", "-d", "{oops", url + "/v1/completions")
    body, code = out.stdout.rsplit("\n", 1)
    assert code == "400" and json.loads(body)["error"]["type"] == "invalid_request_error"
