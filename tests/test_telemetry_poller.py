"""Poller: history ring buffers, alert rules with hysteresis, subscribers, Prometheus, CLI."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
from npu_console.cli.main import main
from npu_console.engine.telemetry import TelemetryPoller, make_provider
from npu_console.engine.telemetry.alerts import (
    AICoreSaturatedRule,
    EngineMetricRule,
    ErrorRateRule,
    HealthRule,
    MemoryRule,
    ProcessChangeRule,
    TemperatureRule,
)
from npu_console.engine.telemetry.history import MetricHistory
from npu_console.engine.telemetry.prometheus import TelemetryCollector
from npu_console.engine.telemetry.types import DeviceSnapshot
from prometheus_client import CollectorRegistry, generate_latest


def replay(fixtures, *names, **kw):
    return make_provider("replay", replay_files=[fixtures / f"{n}.txt" for n in names], **kw)


def test_history_ring_wraps_and_copies():
    h = MetricHistory(capacity=5)
    for i in range(8):
        h.append(100.0 + i, {"a": float(i), "b": None if i % 2 else float(i)})
    t, v = h.get("a")
    assert t.tolist() == [103.0, 104.0, 105.0, 106.0, 107.0]
    assert v.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]
    v[:] = -1  # a copy: the ring is untouched
    assert h.get("a")[1].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]
    t, v = h.get("a", seconds=2.0)
    assert t.tolist() == [105.0, 106.0, 107.0]
    _, b = h.get("b")
    assert np.isnan(b[0]) and b[1] == 4.0
    assert h.get("missing")[0].size == 0
    assert h.keys() == ["a", "b"]


def test_default_history_holds_an_hour(npu_smi_fixtures):
    poller = TelemetryPoller(replay(npu_smi_fixtures, "910b3_info_1"))
    assert poller.history_capacity * poller.interval_s >= 3600


def test_poll_once_feeds_history(npu_smi_fixtures):
    poller = TelemetryPoller(replay(npu_smi_fixtures, "910b3_info_1", "910b3_info_4"), rules=[])
    for _ in range(4):
        poller.poll_once()
    t, v = poller.history("npu2-0:mem_used_mb")
    assert v.tolist() == [41052.0, 3334.0, 41052.0, 3334.0]
    assert np.all(np.diff(t) >= 0)
    _, pct = poller.history("npu2-0:mem_pct")
    assert pct[0] == pytest.approx(100 * 41052 / 65536)
    keys = poller.history_keys()
    for k in (
        "npu7-0:power_w",
        "npu0-0:temp_c",
        "npu0-0:util_pct",
        "cpu:util_pct",
        "host:cpu_pct",
        "host:mem_used_mb",
        "proc:rss_mb",
        "proc:cpu_pct",
    ):
        assert k in keys
    assert poller.latest.source == "replay:910b3_info_4.txt"


def collect_events(poller):
    events = []
    poller.subscribe_alerts(events.append)
    return events


def test_temperature_hysteresis(npu_smi_fixtures, tmp_path):
    # 910a_info_5 is at 82 C; build a 78 C and a 70 C variant of the same capture
    text = (npu_smi_fixtures / "910a_info_5.txt").read_text()
    (tmp_path / "t78.txt").write_text(text.replace("79.4        82", "79.4        78"))
    (tmp_path / "t70.txt").write_text(text.replace("79.4        82", "79.4        70"))
    files = [
        npu_smi_fixtures / "910a_info_5.txt",
        tmp_path / "t78.txt",
        npu_smi_fixtures / "910a_info_5.txt",
        tmp_path / "t70.txt",
    ]
    poller = TelemetryPoller(
        make_provider("replay", replay_files=files), interval_s=1, rules=[TemperatureRule(80, 75)]
    )
    events = collect_events(poller)
    poller.poll_once()
    assert [(e.rule, e.subject, e.state, e.value) for e in events] == [
        ("temperature", "npu0-0", "raised", 82.0)
    ]
    poller.poll_once()  # 78: below raise_at but above clear_at: still raised
    poller.poll_once()  # 82 again: no second "raised"
    assert len(events) == 1 and len(poller.active_alerts()) == 1
    poller.poll_once()  # 70: cleared
    assert [e.state for e in events] == ["raised", "cleared"]
    assert poller.active_alerts() == ()


def test_health_memory_and_saturation_rules(npu_smi_fixtures):
    poller = TelemetryPoller(
        replay(npu_smi_fixtures, "310b4_info_2", "310b4_info_1"),
        rules=[HealthRule()],
    )
    events = collect_events(poller)
    poller.poll_once()
    poller.poll_once()
    assert [(e.subject, e.state) for e in events] == [("npu0-0", "raised"), ("npu0-0", "cleared")]
    assert "Alarm" in events[0].message and events[0].severity == "critical"

    busy = TelemetryPoller(
        replay(npu_smi_fixtures, "910b1_info_1"),
        rules=[MemoryRule(99.0, 95.0), AICoreSaturatedRule(95, 90, 2)],
    )
    events = collect_events(busy)
    busy.poll_once()
    assert {(e.rule, e.subject) for e in events} == {("hbm", f"npu{i}-0") for i in range(8)}
    busy.poll_once()  # the second 96 % sample of npu2 and npu4 raises saturation
    sat = [e.subject for e in events if e.rule == "aicore_saturated"]
    assert sorted(sat) == ["npu2-0", "npu4-0"]


def test_process_appeared_and_vanished(npu_smi_fixtures):
    poller = TelemetryPoller(
        replay(npu_smi_fixtures, "910b3_info_4", "910b3_info_1", "err_info_1", "910b3_info_4"),
        rules=[ProcessChangeRule()],
    )
    events = collect_events(poller)
    for _ in range(4):
        poller.poll_once()
    assert [(e.subject, e.state, e.message) for e in events] == [
        ("npu2-0/pid 1333928", "event", "npu2-0: process pid 1333928 appeared"),
        ("npu2-0/pid 1333928", "event", "npu2-0: process pid 1333928 vanished"),
    ]


@dataclass
class FakeStatsSource:
    """Engine stats as the engine's stats() returns them (cumulative counters) + a p99."""

    finished: int = 0
    failed: int = 0
    p99: float = 1.0

    def __call__(self):
        return {
            "requests_finished": self.finished,
            "requests_failed": self.failed,
            "p99_e2e_s": self.p99,
        }


def test_engine_rules(npu_smi_fixtures):
    stats = FakeStatsSource()
    poller = TelemetryPoller(
        replay(npu_smi_fixtures, "910b3_info_4"),
        rules=[
            EngineMetricRule("p99_latency", "p99_e2e_s", 5.0, 4.0, " s"),
            ErrorRateRule(0.1, 0.05),
        ],
        engine_stats=stats,
    )
    events = collect_events(poller)
    poller.poll_once()
    stats.finished, stats.failed, stats.p99 = 90, 10, 6.0  # 10 % failing, slow
    poller.poll_once()
    assert {(e.rule, e.state) for e in events} == {
        ("p99_latency", "raised"),
        ("error_rate", "raised"),
    }
    stats.finished, stats.failed, stats.p99 = 190, 11, 3.0  # 1 % failing, fast
    poller.poll_once()
    assert [(e.rule, e.state) for e in events[2:]] == [
        ("p99_latency", "cleared"),
        ("error_rate", "cleared"),
    ]


def test_subscribers_run_on_poller_thread_and_survive_errors(npu_smi_fixtures):
    poller = TelemetryPoller(replay(npu_smi_fixtures, "a3_info_2"), interval_s=0.05)
    threads, done = [], threading.Event()

    def bad(_snap):
        raise RuntimeError("subscriber bug")

    def good(snap):
        threads.append(threading.current_thread().name)
        if len(threads) >= 3:
            done.set()

    poller.subscribe(bad)
    unsubscribe = poller.subscribe(good)
    poller.start()
    try:
        assert done.wait(10)
    finally:
        poller.stop(5)
    assert set(threads) == {"telemetry-poller"}
    n = len(threads)
    unsubscribe()
    poller.poll_once()
    assert len(threads) == n
    assert len(poller.latest.accelerators) == 16


def test_snapshots_are_immutable(npu_smi_fixtures):
    snap = replay(npu_smi_fixtures, "a3_info_6").sample()
    with pytest.raises(AttributeError):
        snap.devices[0].temp_c = 1.0  # type: ignore[misc]
    assert isinstance(snap.devices, tuple)
    dev = DeviceSnapshot(kind="npu", index=0, key="k", name="x", mem_used_mb=5, mem_total_mb=0)
    assert dev.mem_pct is None


def test_prometheus_collector(npu_smi_fixtures):
    poller = TelemetryPoller(replay(npu_smi_fixtures, "a3_info_6"), rules=[])
    registry = CollectorRegistry()
    registry.register(TelemetryCollector(poller))
    before = generate_latest(registry).decode()
    assert "npu_console_telemetry_up" in before
    poller.poll_once()
    text = generate_latest(registry).decode()
    assert "machine_npu_nums 4.0" in text
    assert (
        'npu_chip_info_hbm_used_memory{id="3",kind="npu",model_name="Ascend910",'
        'pcie_bus_info="0000:39:00.0",vdie_id=""} 10568.0'
    ) in text
    assert 'npu_chip_info_hbm_total_memory{id="0"' in text
    assert 'npu_chip_info_power{id="0",kind="npu",model_name="Ascend910"' in text
    assert 'npu_chip_info_power{id="1"' not in text  # die 1 power "-" is not exported as 0
    assert 'npu_chip_info_temperature{id="2",kind="npu",model_name="Ascend910",' in text
    assert 'npu_chip_info_health_status{id="0"' in text and "npu_chip_info_utilization" in text
    assert 'process_id="990711"' in text
    assert 'npu_console_telemetry_up{source="replay:a3_info_6.txt"} 1.0' in text


def test_cli_once_replay(npu_smi_fixtures, capsys):
    path = npu_smi_fixtures / "910b4_info_3.txt"
    assert main(["smi", "--once", "--replay", str(path), "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "source: replay:910b4_info_3.txt" in out
    assert "npu0-0" in out and "26838 / 32768" in out
    assert "1406630" in out and "mindie_llm_back" in out
    assert "host: cpu" in out


def test_cli_live_refreshes(npu_smi_fixtures, capsys):
    files = [str(npu_smi_fixtures / "910b3_info_4.txt"), str(npu_smi_fixtures / "err_info_1.txt")]
    t0 = time.monotonic()
    assert main(["smi", "--replay", *files, "--interval", "0.2", "--count", "3"]) == 0
    assert time.monotonic() - t0 >= 0.35
    out = capsys.readouterr().out
    assert out.count("npu-console smi") == 3
    assert "error: exit: dcmi module initialize failed. ret is -8005" in out


def test_cli_host_fallback_without_npu_smi(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["smi", "--once", "--source", "host"]) == 0
    out = capsys.readouterr().out
    assert "cpu " in out and "host: cpu" in out
    assert main(["smi", "--once", "--npu-smi", str(tmp_path / "nope"), "--source", "npu-smi"]) == 0
    assert "error: missing: npu-smi not found" in capsys.readouterr().out


def test_cli_bad_arguments(capsys, tmp_path):
    assert main(["smi", "--interval", "0"]) == 2
    assert main(["smi", "--replay", str(tmp_path / "nope.txt"), "--once"]) == 2
    assert capsys.readouterr().err.count("error:") == 2
