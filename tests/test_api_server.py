"""Server lifecycle: ServerController started and stopped many times, port conflicts, graceful
stop of open streams, and the headless `npu-console serve` command with its signals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from fakes.slow_steps import slowed_steps
from npu_console.engine.api import (
    PortInUseError,
    ServerController,
    ServerStartError,
    UnsafeSettingsError,
    port_in_use,
)
from support.api import default_engine, sse_events

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(stories_dir):
    return default_engine(stories_dir)


def _api_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("npu-console-api")]


def test_start_stop_many_times_leaves_no_thread_and_no_bound_port(engine):
    before = threading.active_count()
    controller = ServerController(engine)
    seen = []
    for _ in range(5):
        url = controller.start("127.0.0.1", 0)
        assert controller.is_running and controller.url == url
        port = controller.port
        assert httpx.get(url + "/health").status_code == 200
        controller.stop(grace_s=1.0)
        assert not controller.is_running and controller.url is None
        assert not port_in_use("127.0.0.1", port)
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health")
        seen.append(port)
    assert _api_threads() == []
    assert threading.active_count() <= before
    # the log outlives restarts: one /health per start
    assert [e.route for e in controller.request_log.entries()] == ["/health"] * 5
    # the same port can be taken again at once
    url = controller.start("127.0.0.1", seen[-1])
    assert url.endswith(f":{seen[-1]}")
    controller.stop()


def test_server_runs_on_uvloop_where_installed(engine):
    """The streaming-overhead bar was met with uvloop (docs/benchmarks.md#http-api); a change
    that silently drops back to asyncio's own loop should show up here, not in a benchmark."""
    uvloop = pytest.importorskip("uvloop")
    controller = ServerController(engine)
    controller.start("127.0.0.1", 0)
    try:
        assert isinstance(controller._loop, uvloop.Loop)
    finally:
        controller.stop(grace_s=1.0)


def test_port_in_use_is_a_typed_error(engine):
    first = ServerController(engine)
    first.start("127.0.0.1", 0)
    try:
        assert port_in_use("127.0.0.1", first.port)
        second = ServerController(engine)
        with pytest.raises(PortInUseError) as err:
            second.start("127.0.0.1", first.port)
        assert str(err.value) == (f"port {first.port} on 127.0.0.1 is already in use: stop the "
                                  "other server or choose another port")
        assert not second.is_running and len(_api_threads()) == 1
        with pytest.raises(ServerStartError, match="already running"):
            first.start("127.0.0.1", 0)
    finally:
        first.stop()


def test_exposed_address_without_key_is_refused(engine):
    controller = ServerController(engine)
    with pytest.raises(UnsafeSettingsError, match="API key"):
        controller.start("0.0.0.0", 0)
    assert not controller.is_running and _api_threads() == []


def _open_stream(url: str, max_tokens: int, events: list, ready: threading.Event):
    body = {"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True, "temperature": 0.0}

    def run():
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            lines = []
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith("data: "):
                    ready.set()
            events.extend(sse_events(lines))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _stream_then_stop(engine, max_tokens: int, grace_s: float) -> tuple[list, float]:
    """Open one stream, stop the server once it flows; (its events, seconds stop() took)."""
    controller = ServerController(engine)
    url = controller.start("127.0.0.1", 0)
    events, ready = [], threading.Event()
    client = _open_stream(url, max_tokens, events, ready)
    assert ready.wait(30)
    t0 = time.monotonic()
    controller.stop(grace_s=grace_s)
    took = time.monotonic() - t0
    client.join(30)
    return events, took


def test_stop_lets_a_short_stream_finish(engine):
    events, _ = _stream_then_stop(engine, 40, grace_s=30.0)
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert "".join(e["choices"][0]["text"] for e in events[:-1])


def test_stop_cancels_streams_after_the_grace_period(engine):
    # 10 ms per step: the stream outlives the grace period (fakes/slow_steps.py)
    with slowed_steps(engine):
        events, took = _stream_then_stop(engine, 450, grace_s=0.3)
    assert events[-1] == "[DONE]"  # ended cleanly, not cut
    assert events[-2]["choices"][0]["finish_reason"] == "cancelled"
    assert took < 10
    assert engine.stats().running == 0 or _wait_idle(engine)


def _wait_idle(engine, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine.stats().running == 0:
            return True
        time.sleep(0.05)
    return False


# ----------------------------------------------------------------------------- the CLI


def _serve(*args: str, env=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "npu_console.cli.main", "serve", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})})


def test_serve_refuses_an_exposed_address_without_a_key():
    proc = _serve("--host", "0.0.0.0", "--port", "0")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        ("error: refusing to listen on 0.0.0.0 without an API key: pass --api-key KEY "
         "(or bind 127.0.0.1)")]


def test_serve_reports_a_busy_port_before_loading(engine):
    holder = ServerController(engine)
    holder.start("127.0.0.1", 0)
    try:
        proc = _serve("--port", str(holder.port), "--model", "/nonexistent")
        _, err = proc.communicate(timeout=120)
    finally:
        holder.stop()
    assert proc.returncode == 2
    assert "already in use" in err and "Traceback" not in err


def _wait_for_url(proc: subprocess.Popen, timeout: float = 240.0) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        m = re.search(r"at (http://\S+)/v1", line)
        if m:
            return m.group(1)
    raise AssertionError(f"serve did not start: {''.join(seen)[-2000:]}")


@pytest.mark.parametrize("sig,extra,ids", [
    (signal.SIGTERM, (), ["stories260K"]),
    (signal.SIGINT, ("--quant", "w8a16"), ["stories260K", "stories260K-w8a16"]),
])
def test_serve_runs_headless_and_stops_on_signals(stories_dir, sig, extra, ids):
    proc = _serve("--model", str(stories_dir), "--port", "0", "--threads", "1",
                  "--api-key", "k", "--log-level", "warning", "--grace", "2", *extra)
    try:
        url = _wait_for_url(proc)
        auth = {"Authorization": "Bearer k"}
        models = httpx.get(url + "/v1/models", headers=auth).json()
        assert [m["id"] for m in models["data"]] == ids
        assert [m["quantization"] for m in models["data"]][1:] == [x.rsplit("-", 1)[1]
                                                                   for x in ids[1:]]
        for model in ids:
            r = httpx.post(url + "/v1/chat/completions", headers=auth, timeout=60, json={
                "model": model, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 3})
            assert r.json()["usage"]["completion_tokens"] == 3 and r.json()["model"] == model
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "stopped" in err
    assert json.dumps(models)  # the server answered before the signal
