"""GET /v1/telemetry and /v1/telemetry/stream on a real `npu-console serve` (loopback, API key,
`--telemetry-input` replaying the real npu-smi capture folder ../shared/fixtures/npu-smi), read
with a real httpx client and compared with what `npu-console smi` prints for the same captures."""

from __future__ import annotations

import itertools
import json
import threading
import time

import httpx
import pytest
from support.api import own_engine, running_server
from support.cli import run_cli
from support.serve import Serve

KEY = "t3lemetry-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
INTERVAL_S = 0.2
SCHEMA_KEYS = {"timestamp", "source", "devices", "processes", "host", "alerts", "warnings", "error"}
# `smi --input --json` chip fields -> the snapshot device's; the memory pair is HBM where the
# table has it (910 class), else the DDR "Memory-Usage" column (310 / 310P / 310B)
SAME_NAME = ("npu_id", "chip_id", "device_id", "name", "health", "power_w", "temp_c",
             "hugepages_used", "hugepages_total", "bus_id")
RENAMED = {"aicore_pct": "util_pct", "memory_used_mb": "ddr_used_mb",
           "memory_total_mb": "ddr_total_mb"}
PROCESS_FIELDS = ("npu_id", "chip_id", "pid", "name", "memory_mb")


@pytest.fixture(scope="module")
def server(npu_smi_fixtures):
    srv = Serve("--api-key", KEY, "--grace", "30", "--telemetry-input", str(npu_smi_fixtures),
                "--telemetry-interval", str(INTERVAL_S))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def smi_folder(npu_smi_fixtures) -> dict:
    """`npu-console smi --input FOLDER --json`, its captures by file name."""
    res = run_cli("smi", "--input", str(npu_smi_fixtures), "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    return {c["file"]: c for c in json.loads(res.stdout)["captures"]}


def _snapshots(url: str, want: int, need_detail: bool = True, timeout: float = 90.0) -> dict:
    """GET /v1/telemetry until `want` different captures (one with chip details) were served."""
    seen: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        while time.monotonic() < deadline:
            reply = client.get("/v1/telemetry")
            assert reply.status_code == 200, reply.text
            snap = reply.json()
            seen.setdefault(snap["source"], snap)
            with_detail = any(d["detail"] for s in seen.values() for d in s["devices"])
            if len(seen) >= want and (with_detail or not need_detail):
                return seen
            time.sleep(INTERVAL_S / 2)
    raise AssertionError(f"only saw {sorted(seen)} in {timeout:.0f} s")


def test_no_key_is_401_on_both_routes(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for route in ("/v1/telemetry", "/v1/telemetry/stream"):
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                reply = client.get(route, headers=headers)
                assert reply.status_code == 401, (route, reply.text)
                assert reply.json()["error"]["code"] == "invalid_api_key"
                assert reply.headers["www-authenticate"] == "Bearer"


def test_telemetry_equals_smi_input_json_field_by_field(server, smi_folder):
    snaps = _snapshots(server.url, want=12)
    compared_chips = with_detail = 0
    for source, snap in snaps.items():
        assert set(snap) == SCHEMA_KEYS
        capture = smi_folder[source.removeprefix("replay:")]
        npus = [d for d in snap["devices"] if d["kind"] == "npu"]
        assert len(npus) == len(capture["chips"]), source
        for dev, chip in zip(npus, capture["chips"], strict=True):
            # every field smi prints for a chip is checked: a new one fails here until mapped
            assert set(chip) == {*SAME_NAME, *RENAMED, "hbm_used_mb", "hbm_total_mb", "detail"}
            for name in SAME_NAME:
                assert dev[name] == chip[name], (source, dev["key"], name)
            for smi_name, api_name in RENAMED.items():
                assert dev[api_name] == chip[smi_name], (source, dev["key"], smi_name)
            hbm = bool(chip["hbm_total_mb"])
            used = chip["hbm_used_mb"] if hbm else chip["memory_used_mb"]
            total = chip["hbm_total_mb"] if hbm else chip["memory_total_mb"]
            assert (dev["mem_used_mb"], dev["mem_total_mb"]) == (used, total), (source, dev["key"])
            assert dev["detail"] == chip["detail"], (source, dev["key"])
            assert dev["key"] == f"npu{chip['npu_id']}-{chip['chip_id']}"
            compared_chips += 1
            with_detail += chip["detail"] is not None
        procs = [{k: p[k] for k in PROCESS_FIELDS} for p in snap["processes"]]
        assert procs == capture["processes"], source
        assert snap["warnings"] == capture["warnings"], source
        if capture["error"] is not None:
            assert snap["error"]["message"] == capture["error"]["message"]
            assert snap["error"]["code"] == capture["error"]["code"]
        assert snap["devices"][-1]["kind"] == "cpu" and snap["host"]["cpu_count"] >= 1
    assert compared_chips >= 12 and with_detail >= 1


def test_telemetry_has_the_schema_of_smi_once_json_for_the_same_capture(server, npu_smi_fixtures):
    res = run_cli("smi", "--replay", str(npu_smi_fixtures), "--once", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    local = json.loads(res.stdout)
    assert set(local) == SCHEMA_KEYS
    remote = None
    deadline = time.monotonic() + 120
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as client:
        while remote is None and time.monotonic() < deadline:
            snap = client.get("/v1/telemetry").json()
            remote = snap if snap["source"] == local["source"] else None
            time.sleep(INTERVAL_S / 2)
    assert remote is not None, f"the server never replayed {local['source']}"
    accel = [d for d in remote["devices"] if d["kind"] != "cpu"]
    assert accel == [d for d in local["devices"] if d["kind"] != "cpu"]
    assert remote["processes"] == local["processes"]
    assert set(remote["devices"][-1]) == set(local["devices"][-1])  # the host's cpu device
    assert set(remote["host"]) == set(local["host"])


def _read_events(url: str, n: int) -> list[dict]:
    events = []
    with (httpx.Client(base_url=url, headers=AUTH, timeout=30) as client,
          client.stream("GET", "/v1/telemetry/stream") as reply):
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if len(events) == n:
                    break
    return events


def test_stream_sends_a_snapshot_per_sample_at_the_poller_cadence(server):
    events = _read_events(server.url, 8)
    stamps = [e["timestamp"] for e in events]
    assert all(set(e) == SCHEMA_KEYS for e in events)
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # each sample once
    assert len({e["source"] for e in events}) >= 6  # the replay moves on every sample
    gaps = [b - a for a, b in itertools.pairwise(stamps[1:])]  # the first may be the cached one
    assert INTERVAL_S * 0.5 < sum(gaps) / len(gaps) < INTERVAL_S * 5, gaps


def test_telemetry_is_404_when_the_server_has_no_poller():
    with own_engine(None) as engine, running_server(engine) as (_, url):
        for route in ("/v1/telemetry", "/v1/telemetry/stream"):
            reply = httpx.get(url + route, timeout=30)
            assert reply.status_code == 404
            assert reply.json()["error"]["code"] == "telemetry_unavailable"


def test_an_open_stream_does_not_hold_the_server_on_stop(server):
    """Last (it stops the module's server): SIGTERM with a stream open and --grace 30 ends the
    stream at once and the process exits 0 within seconds."""
    ended = threading.Event()
    opened = threading.Event()

    def listen():
        with (httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client,
              client.stream("GET", "/v1/telemetry/stream") as reply):
            for line in reply.iter_lines():
                if line.startswith("data: "):
                    opened.set()
        ended.set()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert opened.wait(30)
    t0 = time.monotonic()
    assert server.stop() == 0, "".join(server.lines)[-2000:]
    assert time.monotonic() - t0 < 15
    assert ended.wait(10)
