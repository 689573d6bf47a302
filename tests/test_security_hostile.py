"""A hostile server cannot take the console down (issue 35): the fleet view caps devices,
history keys and answer sizes and gives each poll a total deadline; the remote engine client
caps SSE lines and error messages. Real sockets on loopback, the server scripted byte by byte
(support/hostile_http.py)."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from npu_console.engine.remote import RemoteEngine
from npu_console.engine.remote import fleet as fleet_mod
from npu_console.engine.remote.fleet import FleetMonitor, ServerRef
from npu_console.engine.runtime.types import EngineError, GenerationRequest, SamplingParams
from support.hostile_http import HostileServer, endless, head, json_answer, trickle
from support.waiting import wait_for

MODELS = {"object": "list", "data": [{"id": "m", "object": "model"}]}
METRICS = b"# a server with no engine metrics\n"


def telemetry(devices: int, prefix: str) -> dict:
    return {"timestamp": time.time(), "source": "host", "host": None, "processes": [],
            "alerts": [], "warnings": [], "error": None,
            "devices": [{"kind": "npu", "index": i, "key": f"{prefix}-{i}", "name": "chip",
                         "util_pct": 1.0, "mem_used_mb": 1.0, "mem_total_mb": 2.0,
                         "temp_c": 40.0, "power_w": 10.0} for i in range(devices)]}


def plain(path: str):
    if path.startswith("/v1/models"):
        return json_answer(MODELS)
    return [(head(200, "text/plain", len(METRICS)) + METRICS, 0.0)]


def snapshot_when(monitor: FleetMonitor, url: str, pred, timeout: float):
    def matching():
        snap = monitor.snapshot(url)
        return snap if snap is not None and pred(snap) else None
    return wait_for(matching, timeout, f"a matching snapshot of {url}")


# ----------------------------------------------------------------------------- fleet


def test_rotating_device_ids_cannot_grow_the_fleet_history_without_end():
    counter = itertools.count()

    def handler(method, path):
        if path == "/v1/telemetry":  # 200 chips, all with new ids on every poll
            return json_answer(telemetry(200, f"npu{next(counter)}"))
        return plain(path)

    with HostileServer(handler) as url, FleetMonitor(poll_s=0.02) as monitor:
        monitor.add(ServerRef(url))
        snapshot_when(monitor, url, lambda s: s.state == "up", 20)
        deadline = time.monotonic() + 30
        while next(counter) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        snap = monitor.snapshot(url)
        keys = monitor._workers[url].history.keys()
    assert snap.state == "up"
    assert len(snap.telemetry.devices) == fleet_mod.MAX_DEVICES
    assert "200 devices" in (snap.error or "")
    assert len(keys) <= fleet_mod.MAX_HISTORY_KEYS


def test_a_huge_answer_is_cut_off_and_the_host_is_unreachable():
    def handler(method, path):
        if path == "/v1/telemetry":  # 256 MiB, no length: the reader must stop by itself
            return [(head(200), 0.0), *endless(b"[" * 65536, 256 << 20)]
        return plain(path)

    with HostileServer(handler) as url, FleetMonitor(poll_s=0.1) as monitor:
        monitor.add(ServerRef(url))
        snap = snapshot_when(monitor, url, lambda s: s.state == "unreachable", 20)
    assert "MiB" in snap.error or "within" in snap.error, snap.error


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_server_that_trickles_turns_unreachable_within_the_poll_deadline(where):
    body = json.dumps(telemetry(1, "npu")).encode()

    def handler(method, path):
        if path != "/v1/telemetry":
            return plain(path)
        if where == "body":  # headers at once, then a byte every 0.3 s (each read in time)
            return [(head(200, length=len(body)), 0.0), *trickle(body, 0.3)]
        return trickle(head(200, length=len(body)) + body, 0.3)

    with HostileServer(handler) as url, FleetMonitor(poll_s=0.1) as monitor:
        t0 = time.monotonic()
        monitor.add(ServerRef(url))
        snap = snapshot_when(monitor, url, lambda s: s.state == "unreachable", 20)
        took = time.monotonic() - t0
    assert took < fleet_mod.POLL_DEADLINE_S + 4, took
    assert "within" in snap.error, snap.error


# ----------------------------------------------------------------------------- remote engine


def test_the_remote_client_caps_error_messages_and_sse_lines():
    huge = "x" * (4 << 20)

    def handler(method, path):
        if path.startswith("/v1/models"):
            return json_answer(MODELS)
        if path == "/v1/completions":  # a 4 MiB error message
            return json_answer({"error": {"message": huge, "param": None, "code": None}}, 400)
        if path == "/v1/chat/completions":  # one SSE line that never ends
            return [(head(200, "text/event-stream"), 0.0), (b"data: ", 0.0),
                    *endless(b"a" * 65536, 64 << 20)]
        return plain(path)

    with HostileServer(handler) as url, RemoteEngine(url, poll_interval_s=None,
                                                     connect_timeout_s=5) as remote:
        with pytest.raises(EngineError) as refused:
            remote.submit(GenerationRequest(prompt="x"))
        message = str(refused.value)
        assert len(message) <= 600 and "\n" not in message
        handle = remote.submit(GenerationRequest(messages=[{"role": "user", "content": "hi"}],
                                                 params=SamplingParams(max_tokens=4)))
        fin = handle.result(60).finish
    assert fin.finish_reason == "error"
    assert "stream line over" in (fin.error or ""), fin.error


# ----------------------------------------------------------------------------- remote admin


def test_the_admin_client_caps_answers_event_lines_and_refuses_odd_shapes():
    from npu_console.engine.remote.admin import MAX_ANSWER_BYTES, AdminError, RemoteAdmin

    def handler(method, path):
        if path == "/v1/admin/models":  # an answer that never ends
            return [(head(200), 0.0), *endless(b"[" * 65536, 4 * MAX_ANSWER_BYTES)]
        if path == "/v1/admin/jobs":  # JSON, but not a job list
            return json_answer({"data": [["not", "a", "job"]]})
        if path == "/v1/admin/jobs/j1":
            return json_answer([])
        if path == "/v1/admin/jobs/j1/events":  # one event line that never ends
            return [(head(200, "text/event-stream"), 0.0), (b"data: ", 0.0),
                    *endless(b"a" * 65536, 64 << 20)]
        return json_answer({"error": {"message": "x" * (1 << 20)}}, 500)

    with HostileServer(handler) as url, RemoteAdmin(url, timeout=30) as admin:
        with pytest.raises(AdminError, match="an answer over 8 MiB"):
            admin.models()
        for call in (admin.jobs, lambda: admin.job("j1")):
            with pytest.raises(AdminError, match="unexpected shape"):
                call()
        with pytest.raises(AdminError, match="event line over"):
            list(admin.events("j1"))
        with pytest.raises(AdminError) as refused:  # a 1 MiB error message, cut to one line
            admin.unload("m")
        assert refused.value.status == 500 and len(str(refused.value)) <= 600
