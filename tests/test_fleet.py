"""The fleet monitor (engine/remote/fleet.py) against two real `npu-console serve` processes on
loopback, each with an API key and a different replayed npu-smi capture (8 x 910B3 and 2 x
310P3, real captures from ../shared/fixtures/npu-smi): both come up with their chips and their
engine; one killed turns unreachable within 5 s and comes back when started again on the same
port; a wrong key is 'unauthorized' and is not retried at once; a server that accepts but never
answers turns unreachable too, and nothing waits on it."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import httpx
import pytest
from npu_console.engine.remote.fleet import (
    MAX_BACKOFF_S,
    FleetMonitor,
    ServerRef,
    backoff_s,
    chip_summary,
    health_rank,
)
from support.fleet_servers import ServeProcess
from support.waiting import wait_for

KEY_A, KEY_B = "fleet-key-a", "fleet-key-b"
CAPTURE_A = "910b3_info_1.txt"  # 8 x 910B3
CAPTURE_B = "310p3_info_8.txt"  # 2 x 310P3


class Recorder:
    """Every snapshot a monitor publishes, with the thread it came on."""

    def __init__(self, monitor: FleetMonitor):
        self.items: list[tuple[float, str, object]] = []
        self.lock = threading.Lock()
        monitor.subscribe(self)

    def __call__(self, snap) -> None:
        with self.lock:
            self.items.append((time.monotonic(), threading.current_thread().name, snap))

    def of(self, url: str) -> list:
        with self.lock:
            return [(t, s) for t, _name, s in self.items if s.url == url]


@pytest.fixture(scope="module")
def servers(npu_smi_fixtures):
    a = ServeProcess("--api-key", KEY_A, "--telemetry-input", str(npu_smi_fixtures / CAPTURE_A),
                     "--telemetry-interval", "0.5").start()
    b = ServeProcess("--api-key", KEY_B, "--telemetry-input", str(npu_smi_fixtures / CAPTURE_B),
                     "--telemetry-interval", "0.5").start()
    try:
        a.wait_ready()
        b.wait_ready()
        yield a, b
    finally:
        a.stop()
        b.stop()


# ---------------------------------------------------------------------- pure parts


def test_backoff_doubles_to_the_cap_and_jitters():
    assert [backoff_s(n, lambda: 0.5) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    low = [backoff_s(n, lambda: 0.0) for n in range(1, 6)]
    high = [backoff_s(n, lambda: 1.0) for n in range(1, 6)]
    assert low == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8])
    assert high == pytest.approx([1.2, 2.4, 4.8, 9.6, 19.2])
    assert backoff_s(100, lambda: 1.0) == MAX_BACKOFF_S  # jitter never passes the cap
    # a monitor's own schedule (tests shrink it)
    assert [backoff_s(n, lambda: 0.5, 0.2, 1.6) for n in range(1, 6)] == pytest.approx(
        [0.2, 0.4, 0.8, 1.6, 1.6])
    for bad in ({"backoff_first_s": 0}, {"backoff_first_s": 2.0, "backoff_max_s": 1.0}):
        with pytest.raises(ValueError, match="backoff"):
            FleetMonitor(**bad)


def test_chip_summary_of_a_replayed_capture(npu_smi_fixtures):
    from npu_console.engine.telemetry import make_provider

    snap = make_provider("replay", replay_files=[str(npu_smi_fixtures / CAPTURE_A)]).sample()
    chips = snap.accelerators
    s = chip_summary(snap)
    assert s.chips == 8 == len(chips)
    assert s.worst_health == "OK"
    assert s.mem_total_mb == sum(d.mem_total_mb for d in chips)
    assert s.mem_used_mb == sum(d.mem_used_mb for d in chips)
    assert s.power_w == pytest.approx(sum(d.power_w for d in chips))
    assert s.util_pct == pytest.approx(sum(d.util_pct for d in chips) / 8)
    assert health_rank("Critical") > health_rank("Alarm") > health_rank("Warning") > \
        health_rank("OK") > health_rank(None)


def test_telemetry_json_reads_back_into_the_same_snapshots(npu_smi_fixtures):
    """snapshot_from_json inverts snapshot_json over every capture of the folder (chip details,
    processes, alerts included), so remote chips render like local ones."""
    from npu_console.engine.telemetry import TelemetryPoller, make_provider
    from npu_console.engine.telemetry.snapshot_json import (
        TelemetryJsonError,
        snapshot_from_json,
        snapshot_json,
    )

    poller = TelemetryPoller(make_provider("replay", replay_files=[str(npu_smi_fixtures)]))
    with_detail = with_alerts = 0
    for _ in range(40):
        snap = poller.poll_once()
        data = json.loads(json.dumps(snapshot_json(snap, poller.active_alerts())))
        back, alerts = snapshot_from_json(data)
        assert back == snap, snap.source
        assert alerts == poller.active_alerts()
        with_detail += any(d.detail is not None for d in back.devices)
        with_alerts += bool(alerts)
    assert with_detail and with_alerts
    for bad in ({}, {"devices": "x"}, {"devices": [{"kind": "npu"}]}, {"devices": [3]}):
        with pytest.raises(TelemetryJsonError):
            snapshot_from_json(bad)


def test_a_bad_url_is_refused_at_once():
    with FleetMonitor() as fleet, pytest.raises(ValueError, match="http"):
        fleet.add(ServerRef("10.0.0.5:8000"))


# ---------------------------------------------------------------------- real servers


@pytest.mark.slow
def test_two_servers_up_then_one_lost_and_back(servers):
    a, b = servers
    # the backoff shrunk (0.2 s doubling to 1.6 s, not 1 s to 30 s): the same schedule in
    # seconds instead of minutes
    fleet = FleetMonitor(poll_s=0.5, backoff_first_s=0.2, backoff_max_s=1.6)
    rec = Recorder(fleet)
    try:
        ref_a = fleet.add(ServerRef(a.url + "/v1/", KEY_A, "rack-a"))
        fleet.add(ServerRef(b.url, KEY_B))
        assert ref_a.url == a.url  # normalized: the /v1 and slash dropped
        assert [r.url for r in fleet.refs()] == [a.url, b.url]

        def both_up():
            snaps = {s.url: s for s in fleet.snapshots()}
            ready = all(s.state == "up" and s.telemetry is not None and s.engine is not None
                        and s.engine.models for s in snaps.values())
            return snaps if ready else None

        snaps = wait_for(both_up, 30, "both servers up")
        sa, sb = snaps[a.url], snaps[b.url]
        assert (sa.label, sb.label) == ("rack-a", b.url.removeprefix("http://"))
        assert [d.name for d in sa.telemetry.accelerators] == ["910B3"] * 8
        assert [d.name for d in sb.telemetry.accelerators] == ["310P3"] * 2
        assert sa.source == sb.source == "replay"
        assert sa.engine.models == sb.engine.models == ("demo",)
        assert sa.engine.state == "ready" and sa.engine.running == 0 and sa.engine.waiting == 0
        assert chip_summary(sa.telemetry).chips == 8 and chip_summary(sb.telemetry).chips == 2
        # callbacks come from the workers, never the caller's thread
        names = {name for _t, name, _s in rec.items}
        assert threading.current_thread().name not in names
        assert {n for n in names if n.startswith("fleet-")} == names
        # a host's history fills: chips and engine
        t, v = fleet.history(a.url, "npu0-0:mem_used_mb")
        assert len(t) >= 1 and v[-1] == sa.telemetry.accelerators[0].mem_used_mb
        assert len(fleet.history(a.url, "engine:generation_tps")[0]) >= 1

        # lose server B: unreachable within 5 s, A unaffected
        b.kill()
        killed = time.monotonic()
        lost = wait_for(lambda: (s := fleet.snapshot(b.url)).state == "unreachable" and s, 10,
                        "B unreachable")
        took = time.monotonic() - killed
        print(f"\nunreachable {took:.2f} s after the kill: {lost.error}")
        assert took < 5.0
        assert "cannot reach" in lost.error and lost.next_retry_s is not None
        assert lost.retry_at > time.time() - 1
        assert lost.telemetry is not None  # the last data stays, for a greyed card
        assert fleet.snapshot(a.url).state == "up"
        # backoff: the tries while it is down space out (0.2, 0.4, 0.8, 1.6 s, each +-20 %)
        fails = wait_for(lambda: (f := [s for _t, s in rec.of(b.url)
                                        if s.state == "unreachable"])[4:] and f, 30,
                         "five failed polls")
        waits = [s.next_retry_s for s in fails]
        print("retry waits while down:", [round(w, 2) for w in waits])
        assert waits[:4] == sorted(waits[:4]) and waits[3] > 2 * waits[0]
        assert max(waits) <= 1.6 and waits[0] <= 0.2 * 1.2 + 1e-9
        assert len({s.since for s in fails}) == 1  # one outage, one start time

        # back on the same port: up again
        b.start()
        b.wait_ready()
        back = time.monotonic()
        up = wait_for(lambda: (s := fleet.snapshot(b.url)).state == "up" and s,
                      fleet.backoff[1] + 15, "B up again")
        print(f"up {time.monotonic() - back:.1f} s after the restart")
        assert [d.name for d in up.telemetry.accelerators] == ["310P3"] * 2
        assert up.error is None and up.since > lost.since

        # remove: no more snapshots for it
        assert fleet.remove(b.url) and not fleet.remove(b.url)
        assert [r.url for r in fleet.refs()] == [a.url]
        n = len(rec.of(b.url))
        time.sleep(1.5)
        assert len(rec.of(b.url)) == n
    finally:
        fleet.close()
        assert fleet.join(10)


def _count_401(url: str, key: str) -> float:
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {key}"},
                     timeout=10).text
    return sum(float(m.group(1)) for m in
               re.finditer(r'^npu_console_api_requests_total\{[^}]*status="401"[^}]*\} (\S+)',
                           text, re.MULTILINE))


@pytest.mark.slow
def test_a_wrong_key_is_unauthorized_and_not_hammered(servers):
    a, _b = servers
    before = _count_401(a.url, KEY_A)
    fleet = FleetMonitor(poll_s=0.1)
    rec = Recorder(fleet)
    try:
        fleet.add(ServerRef(a.url, "not-the-key"))
        snap = wait_for(lambda: (s := fleet.snapshot(a.url)).state == "unauthorized" and s, 10,
                        "unauthorized")
        assert "refused the API key" in snap.error and "401" in snap.error
        assert snap.telemetry is None and snap.engine is None
        assert snap.next_retry_s >= MAX_BACKOFF_S * 0.75
        time.sleep(1.5)  # 15 polls at the normal pace; none may happen
        assert [s.state for _t, s in rec.of(a.url)] == ["connecting", "unauthorized"]
        assert _count_401(a.url, KEY_A) - before == 1
        # no key at all: the same
        fleet.add(ServerRef(a.url))
        wait_for(lambda: fleet.snapshot(a.url).state == "unauthorized", 10, "unauthorized")
    finally:
        fleet.close()
        assert fleet.join(10)


def test_a_server_that_never_answers_is_unreachable_and_blocks_nobody():
    """A listener that accepts connections but never replies (a hung server): the poll times out
    and the host turns unreachable within 5 s; add / remove / close return at once meanwhile."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    fleet = FleetMonitor()
    try:
        t0 = time.monotonic()
        fleet.add(ServerRef(url, "k"))
        assert time.monotonic() - t0 < 2.0  # at once (generous: a shared machine)
        assert fleet.snapshot(url).state == "connecting"
        snap = wait_for(lambda: (s := fleet.snapshot(url)).state == "unreachable" and s, 10,
                        "unreachable")
        took = time.monotonic() - t0
        print(f"\nhung server unreachable after {took:.2f} s: {snap.error}")
        assert took < 8.0 and "timed out" in snap.error  # 2.5 s read timeout; generous
        t1 = time.monotonic()
        fleet.add(ServerRef(url, "other"))  # replaces the worker stuck in its request
        assert fleet.remove(url)
        fleet.close()
        assert time.monotonic() - t1 < 2.0
        assert fleet.join(10)  # the stuck workers end by their own timeouts
    finally:
        fleet.close()
        sock.close()
