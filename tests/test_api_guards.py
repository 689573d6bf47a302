"""What keeps a web page, a careless client or a slow one from driving or starving the API:
Host header check, JSON-only bodies, bounded metric labels, error events in broken streams, no
file-system paths in /v1/models, request deadlines, the concurrency limit and read timeouts.
A real engine on the demo model behind a real uvicorn on loopback."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlparse

import httpx
import pytest
from fakes.faults import breaking_handles
from fakes.slow_steps import slowed_steps
from npu_console.engine.api.settings import ApiSettings
from support.api import metric_value, own_engine, running_server, sse_events

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(demo_model_dir):
    with own_engine(demo_model_dir, "demo") as eng:
        yield eng


@pytest.fixture(scope="module")
def url(engine):
    with running_server(engine) as (_, base):
        yield base


def body(**kw):
    return {"prompt": "Once upon a time", "max_tokens": 4, **kw}


def error_of(r, status, code=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    if code is not None:
        assert err["code"] == code, err
    return err


def port_of(url: str) -> int:
    return urlparse(url).port


# ----------------------------------------------------------------------------- Host header


def test_a_foreign_host_header_is_refused_on_a_loopback_server(url):
    for method, path, payload in (("GET", "/v1/models", None), ("GET", "/health", None),
                                  ("POST", "/v1/completions", body())):
        r = httpx.request(method, url + path, json=payload, headers={"Host": "evil.example"})
        err = error_of(r, 400, "invalid_host")
        assert "evil.example" in err["message"] and "--allowed-hosts" in err["message"]
    port = port_of(url)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST.",
                 "localhost"):
        assert httpx.get(url + "/v1/models", headers={"Host": host}).status_code == 200, host
    # the official client (Host: 127.0.0.1:port) is served
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["demo"]


def test_allowed_hosts_add_names_and_any_host_is_allowed_on_exposed_servers(engine):
    with running_server(engine, allowed_hosts=("api.example",)) as (_, url):
        assert httpx.get(url + "/v1/models", headers={"Host": "api.example:443"}
                         ).status_code == 200
        assert httpx.get(url + "/v1/models").status_code == 200  # loopback names stay
        assert httpx.get(url + "/v1/models", headers={"Host": "evil.example"}
                         ).status_code == 400
    exposed = ApiSettings(host="0.0.0.0", api_key="k")
    assert exposed.host_allowed("anything.example")  # a key guards an exposed server
    pinned = ApiSettings(host="0.0.0.0", api_key="k", allowed_hosts=("api.example",))
    assert pinned.host_allowed("api.example") and not pinned.host_allowed("evil.example")
    assert ApiSettings(allowed_hosts=("*",)).host_allowed("evil.example")


# ----------------------------------------------------------------------------- bodies


@pytest.mark.parametrize("headers", [{}, {"Content-Type": "text/plain"},
                                     {"Content-Type": "application/x-www-form-urlencoded"}])
def test_a_body_that_is_not_declared_json_is_refused(url, headers):
    # text/plain and form posts are what a web page may send cross-origin without a preflight
    raw = json.dumps(body()).encode()
    r = httpx.post(url + "/v1/completions", content=raw, headers=headers)
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["error"]["message"]
    r = httpx.post(url + "/v1/chat/completions", content=json.dumps(
        {"messages": [{"role": "user", "content": "Hi"}]}).encode(), headers=headers)
    assert 400 <= r.status_code < 500


def test_json_with_a_charset_is_accepted(url):
    r = httpx.post(url + "/v1/completions", content=json.dumps(body()).encode(),
                   headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4


# ----------------------------------------------------------------------------- metrics


def test_unknown_paths_do_not_grow_the_metrics(engine):
    with running_server(engine) as (_, url), httpx.Client(base_url=url) as client:
        for i in range(2000):
            assert client.get(f"/v1/x{i}").status_code == 404
        assert client.post("/v1/completions", json=body()).status_code == 200
        assert client.get("/v1/models/demo").status_code == 200
        text = client.get("/metrics").text
    series = [line for line in text.splitlines()
              if line.startswith("npu_console_api_requests_total{")]
    assert len(series) <= 10, series
    assert not any("/v1/x" in line for line in text.splitlines())
    assert any('route="unmatched",status="404"' in s and s.endswith(" 2000.0") for s in series)
    assert any('route="/v1/models/{model_id:path}"' in s for s in series)
    assert metric_value(text, "npu_console_api_requests_total") >= 2002


# ----------------------------------------------------------------------------- streams


def test_a_stream_that_breaks_after_the_200_ends_with_an_error_event_then_done(engine, url):
    stream_body = body(max_tokens=64, stream=True, ignore_eos=True)
    with slowed_steps(engine, 0.01), breaking_handles(engine, after=2), httpx.stream(
            "POST", url + "/v1/completions", json=stream_body, timeout=60) as r:
        assert r.status_code == 200
        events = sse_events(r.iter_lines())
    assert events[-1] == "[DONE]"
    err = events[-2]["error"]
    assert err["code"] == "internal_error" and err["type"] == "server_error"
    assert "InjectedFault" in err["message"] and "Traceback" not in err["message"]
    assert any("choices" in e for e in events[:-2])  # tokens went out before it broke
    deadline = time.monotonic() + 10
    while engine.stats().running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.stats().running == 0  # the broken request's engine work was cancelled
    # the official client sees an API error, not a silently short answer
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    with slowed_steps(engine, 0.01), breaking_handles(engine, after=2), \
            pytest.raises(openai.APIError, match="stream failed"):
        for _ in client.completions.create(model="demo", prompt="Once", max_tokens=64,
                                           stream=True, extra_body={"ignore_eos": True}):
            pass


# ----------------------------------------------------------------------------- /v1/models


def test_models_show_no_paths_unless_asked(engine, url, demo_model_dir):
    text = httpx.get(url + "/v1/models").text
    card = json.loads(text)["data"][0]
    assert card["root"] == "demo" and str(demo_model_dir) not in text
    assert str(demo_model_dir) not in httpx.get(url + "/v1/models/demo").text
    with running_server(engine, expose_paths=True) as (_, exposed):
        assert httpx.get(exposed + "/v1/models").json()["data"][0]["root"] == str(demo_model_dir)


# ----------------------------------------------------------------------------- deadlines


def test_a_request_past_its_deadline_is_cancelled(engine):
    with running_server(engine, request_timeout_s=0.5) as (_, url), slowed_steps(engine, 0.05):
        t0 = time.monotonic()
        r = httpx.post(url + "/v1/completions", json=body(max_tokens=200, ignore_eos=True),
                       timeout=30)
        err = error_of(r, 504, "request_timeout")
        assert "0.5 s" in err["message"] and time.monotonic() - t0 < 5
        with httpx.stream("POST", url + "/v1/chat/completions", timeout=30, json={
                "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 200,
                "ignore_eos": True, "stream": True}) as s:
            events = sse_events(s.iter_lines())
        assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "request_timeout"
        deadline = time.monotonic() + 10
        while engine.stats().running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.stats().running == 0
        # a request within the limit is untouched
        assert httpx.post(url + "/v1/completions", json=body(), timeout=30).status_code == 200


# ----------------------------------------------------------------------------- slow clients


def _connect(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port_of(url)), timeout=10)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _read_response(sock: socket.socket) -> bytes:
    """One whole HTTP/1.1 response with a Content-Length (it may arrive in several segments)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_headers_that_never_finish_are_cut_off(engine):
    with running_server(engine, header_timeout_s=0.5) as (_, url):
        silent = _connect(url)
        slow = _connect(url)
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends
        t0 = time.monotonic()
        for sock in (silent, slow):
            answer = _read_all(sock)  # the server closes the connection
            assert answer.startswith(b"HTTP/1.1 408"), answer
            sock.close()
        assert time.monotonic() - t0 < 5
        # a kept-alive connection whose next request trickles in is cut off too
        sock = _connect(url)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = _read_response(sock)
        assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"}")
        sock.sendall(b"GET /he")
        assert _read_all(sock).startswith(b"HTTP/1.1 408")
        sock.close()
        # whole requests are not affected, however long the answer takes
        assert httpx.post(url + "/v1/completions", json=body(max_tokens=32)).status_code == 200


def test_a_body_that_stalls_gets_408(engine):
    with running_server(engine, body_timeout_s=0.5) as (_, url):
        sock = _connect(url)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pro")
        answer = _read_all(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408") and b"body_timeout" in answer


def test_connections_beyond_the_concurrency_limit_get_503(engine):
    with running_server(engine, limit_concurrency=4) as (_, url):
        idle = [_connect(url) for _ in range(4)]
        time.sleep(0.2)
        try:
            assert httpx.get(url + "/health").status_code == 503
        finally:
            for s in idle:
                s.close()
        deadline = time.monotonic() + 10
        while httpx.get(url + "/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(url + "/health").status_code == 200
