"""Limits on everything a request can ask for (issue 35): stop strings and messages are bounded,
top_logprobs is refused, requests and bodies have total deadlines, streams a write deadline,
admin work its own threads, log lines cannot be forged, /health says only its status without a
key, and a dead engine loop is always marked crashed and stops `serve` within 5 s.

A real engine on the demo model behind a real uvicorn on loopback."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from fakes.serve_with_fault import CRASH_SEED
from npu_console.engine.api import schemas
from npu_console.engine.api.settings import ApiSettings
from npu_console.engine.api.sse import SSEResponse
from support.api import own_engine, running_server

pytestmark = pytest.mark.slow
# the limits as the server declares them (defaults: what a build without them would be tried at)
MAX_STOP_CHARS = getattr(schemas, "MAX_STOP_CHARS", 256)
MAX_MESSAGES = getattr(schemas, "MAX_MESSAGES", 1024)
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def engine(demo_model_dir):
    with own_engine(demo_model_dir, "demo") as eng:
        yield eng


@pytest.fixture(scope="module")
def url(engine):
    with running_server(engine) as (_, base):
        yield base


def error_of(r, status, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    if param is not None:
        assert err["param"] == param, err
    return err


# ----------------------------------------------------------------------------- bodies


def test_stop_strings_and_messages_are_bounded_and_top_logprobs_is_refused(url):
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    long_stop = "x" * (MAX_STOP_CHARS + 1)
    err = error_of(httpx.post(url + "/v1/completions", json={
        "prompt": "Once", "max_tokens": 2, "stop": [long_stop]}), 400, "stop")
    assert str(MAX_STOP_CHARS) in err["message"]
    error_of(httpx.post(url + "/v1/chat/completions", json={**chat, "stop": long_stop}),
             400, "stop")
    many = [{"role": "user", "content": "a"}] * (MAX_MESSAGES + 1)
    err = error_of(httpx.post(url + "/v1/chat/completions", json={**chat, "messages": many}),
                   400, "messages")
    assert str(MAX_MESSAGES) in err["message"]
    for value in (0, 5):
        err = error_of(httpx.post(url + "/v1/chat/completions",
                                  json={**chat, "top_logprobs": value}), 400, "top_logprobs")
        assert "not supported" in err["message"]
    # at the limits, served
    ok = httpx.post(url + "/v1/chat/completions", json={
        **chat, "stop": ["x" * MAX_STOP_CHARS],
        "messages": [{"role": "user", "content": "a"}] * 8})
    assert ok.status_code == 200, ok.text


# ----------------------------------------------------------------------------- deadlines


def test_a_request_timeout_is_on_by_default_in_serve_and_the_gui():
    from npu_console.cli.main import build_parser
    from npu_console.console.server_service import AdvancedOptions

    assert 0 < ApiSettings().request_timeout_s <= 3600
    args = build_parser().parse_args(["serve", "--model", "m"])
    assert args.request_timeout == ApiSettings().request_timeout_s
    assert AdvancedOptions().request_timeout_s == ApiSettings().request_timeout_s


def test_the_body_timeout_is_a_total_deadline_not_per_chunk(engine):
    with running_server(engine, body_timeout_s=1.5) as (_, url):
        port = urlparse(url).port
        body = b'{"prompt": "Once upon a time", "max_tokens": 2}'
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
            t0 = time.monotonic()
            answer = b""
            s.settimeout(0.25)
            for byte in body:  # one byte every 0.25 s: each chunk is well within 1.5 s
                try:
                    s.sendall(bytes([byte]))
                    answer += s.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if answer:
                    break
            took = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"body_timeout" in answer
    assert took < 5.0  # the whole body would take 12 s


def test_a_stream_whose_client_stops_reading_ends_at_the_write_deadline():
    closed = threading.Event()

    async def chunks():
        try:
            while True:
                yield b"data: {}\n\n"
        finally:
            closed.set()

    async def run() -> float:
        response = SSEResponse(chunks(), write_timeout_s=0.3)

        async def send(message):
            if message["type"] == "http.response.body":
                await asyncio.Event().wait()  # the client's window is full: never drains

        async def receive():
            await asyncio.Event().wait()

        t0 = time.monotonic()
        await asyncio.wait_for(response({"type": "http", "asgi": {"spec_version": "2.4"},
                                         "method": "POST", "headers": []}, receive, send), 10)
        return time.monotonic() - t0

    took = asyncio.run(run())
    assert took < 3.0 and closed.is_set()


# ----------------------------------------------------------------------------- admin threads


def test_completions_keep_flowing_while_admin_calls_block(engine, tmp_path):
    with running_server(engine, allow_admin=True, model_roots=(str(tmp_path),)) as (ctl, url):
        release = threading.Event()
        admin = ctl.app.state.admin
        real_models = admin.models

        def blocked_models():
            release.wait(60)
            return real_models()

        admin.models = blocked_models
        # more blocked admin calls than the event loop's default pool has threads (at most 32)
        pool = ThreadPoolExecutor(40)
        try:
            calls = [pool.submit(httpx.get, url + "/v1/admin/models", timeout=90)
                     for _ in range(40)]
            time.sleep(1.0)
            t0 = time.monotonic()
            for _ in range(3):
                r = httpx.post(url + "/v1/chat/completions", timeout=30, json={
                    "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
                assert r.status_code == 200, r.text
            assert time.monotonic() - t0 < 20
            assert not any(c.done() for c in calls)  # they were blocked all along
        finally:
            release.set()
            results = [c.result() for c in calls]
            pool.shutdown()
        assert all(r.status_code == 200 for r in results)


# ----------------------------------------------------------------------------- logs, health


def test_log_lines_escape_the_path(url, caplog):
    with caplog.at_level(logging.INFO, logger="npu_console.engine.api"):
        httpx.get(url + "/v1/x%0a2026-01-01%20INFO%20GET%20/admin%20200%0d")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
                "/v1/x" in r.getMessage() for r in caplog.records):
            time.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records if "/v1/x" in r.getMessage()]
    assert lines, caplog.text
    for line in lines:
        assert "\n" not in line and "\r" not in line
        assert "\\n2026-01-01" in line


def test_health_says_only_its_status_without_the_key(engine):
    with running_server(engine) as (_, url):
        assert httpx.get(url + "/health").json() == {"status": "ok"}
    with running_server(engine, api_key="infer") as (_, url):
        assert httpx.get(url + "/health").json() == {"status": "ok"}
        assert httpx.get(url + "/health",
                         headers={"Authorization": "Bearer wrong"}).json() == {"status": "ok"}
        full = httpx.get(url + "/health", headers={"Authorization": "Bearer infer"}).json()
        assert full["status"] == "ok" and full["models"] == ["demo"]


# ----------------------------------------------------------------------------- a dead loop


def test_a_failure_in_the_loops_setup_marks_it_crashed(demo_model_dir):
    from npu_console.engine.runtime import EngineConfig, LocalEngine
    from npu_console.engine.runtime.types import EngineError

    config = EngineConfig(num_threads=1)

    def broken() -> int:
        raise RuntimeError("no threads for you")

    object.__setattr__(config, "resolve_threads", broken)
    eng = LocalEngine(config)
    try:
        future = eng.load(demo_model_dir, name="demo")
        with pytest.raises((EngineError, RuntimeError)) as failed:
            future.result(60)
        assert not isinstance(failed.value, TimeoutError)
        assert "no threads for you" in (eng.crash_reason or "")
    finally:
        eng.shutdown(5)


def test_serve_exits_within_5s_of_a_crash_while_a_client_holds_a_body_open(demo_model_dir,
                                                                            tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "fakes" / "serve_with_fault.py"), "serve",
         "--model", str(demo_model_dir), "--port", "0", "--threads", "1",
         "--log-level", "warning", "--grace", "30", "--allow-admin",
         "--model-root", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    held = None
    try:
        url = None
        seen = []
        deadline = time.monotonic() + 240
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"at (http://\S+)/v1", line)
            url = m.group(1) if m else None
        assert url, "".join(seen)
        # a client that started a body and went quiet: the server would wait 30 s for it
        held = socket.create_connection(("127.0.0.1", urlparse(url).port), timeout=30)
        held.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pro")
        r = httpx.post(url + "/v1/completions", timeout=30,
                       json={"prompt": "Once", "max_tokens": 8, "seed": CRASH_SEED})
        crashed_at = time.monotonic()
        assert r.status_code == 500, r.text
        proc.wait(timeout=15)
        took = time.monotonic() - crashed_at
    finally:
        if held is not None:
            held.close()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == 1
    assert took < 5.0, took
