"""A dead engine is loud over HTTP: new requests get 503 with the reason at once, /health says
why, and `npu-console serve` exits non-zero so its service manager restarts it. Real engines
on the demo model, a real uvicorn on loopback; the fault goes in through fakes.faults."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fakes.faults import fatal_fault
from fakes.serve_with_fault import CRASH_SEED
from support.api import own_engine, running_server, sse_events

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def engine(demo_model_dir):
    with own_engine(demo_model_dir, "demo") as eng:
        yield eng


def completion(url, **kw):
    return httpx.post(url + "/v1/completions", timeout=30,
                      json={"prompt": "Once", "max_tokens": 8, **kw})


def test_after_a_crash_requests_get_503_with_the_reason_at_once(engine):
    with running_server(engine) as (_, url):
        assert completion(url).status_code == 200
        with fatal_fault(engine), httpx.stream("POST", url + "/v1/completions", timeout=30,
                                               json={"prompt": "Once", "max_tokens": 8,
                                                     "stream": True}) as r:
            events = sse_events(r.iter_lines())
        # the stream that was running when the loop died ends with an error event and [DONE]
        assert events[-1] == "[DONE]"
        errors = [e["error"] for e in events[:-1] if "error" in e]
        assert errors and "engine loop crashed" in errors[0]["message"]
        t0 = time.monotonic()
        r = completion(url)
        elapsed = time.monotonic() - t0
        assert r.status_code == 503 and elapsed < 5.0  # at once, not after a generation
        err = r.json()["error"]
        assert err["type"] == "service_unavailable"
        assert "engine loop crashed" in err["message"] and "EngineKilled" in err["message"]
        chat = httpx.post(url + "/v1/chat/completions", timeout=30, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert chat.status_code == 503
        health = httpx.get(url + "/health")
        assert health.status_code == 503
        assert health.json()["status"] == "error"
        assert health.json() == {"status": "error"}  # no key: the status only (issue 35)
        # restarted, the same server serves again
        engine.restart()
        assert completion(url).status_code == 200
        assert httpx.get(url + "/health").status_code == 200


def test_serve_exits_non_zero_within_5s_when_the_engine_dies(demo_model_dir):
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "fakes" / "serve_with_fault.py"), "serve",
         "--model", str(demo_model_dir), "--port", "0", "--threads", "1",
         "--log-level", "warning", "--grace", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
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
        assert completion(url).status_code == 200
        r = completion(url, seed=CRASH_SEED)
        crashed_at = time.monotonic()
        assert r.status_code == 500 and "engine loop crashed" in r.json()["error"]["message"]
        proc.wait(timeout=5)
        took = time.monotonic() - crashed_at
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == 1 and took < 5.0
    assert "error: the engine stopped: engine loop crashed" in err
    assert "Traceback" not in err.split("engine loop crashed")[-1]
