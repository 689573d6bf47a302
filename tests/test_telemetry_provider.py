"""Providers with a stand-in `npu-smi` on PATH (the one boundary that cannot exist here): it
replays real captures, hangs past the timeout, or fails like the real tool does."""

from __future__ import annotations

import os
import queue
import stat
import time

import numpy as np
import pytest
from npu_console.engine.telemetry import TelemetryPoller, make_provider
from npu_console.engine.telemetry.providers import NpuSmiProvider, NvmlProvider, SnapshotSource


def write_stand_in(tmp_path, capture, mode="ok"):
    """An executable `npu-smi` whose behaviour the test switches through a mode file."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    mode_file = tmp_path / "mode"
    mode_file.write_text(mode)
    script = bindir / "npu-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'mode=$(cat "{mode_file}")\n'
        'case "$mode" in\n'
        f'  ok) cat "{capture}" ;;\n'
        "  hang) sleep 30 ;;\n"
        '  fail) echo "dcmi module initialize failed. ret is -8005"; exit 255 ;;\n'
        '  crash) echo "Segmentation fault" >&2; exit 139 ;;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script, mode_file


@pytest.fixture
def stand_in(tmp_path, npu_smi_fixtures, monkeypatch):
    script, mode_file = write_stand_in(tmp_path, npu_smi_fixtures / "910b2_info_1.txt")
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return script, mode_file


def test_auto_finds_npu_smi_on_path_and_parses(stand_in):
    source = make_provider("auto", timeout_s=5)
    assert source.name == "npu-smi"
    snap = source.sample()
    assert snap.error is None and snap.source == "npu-smi"
    npus = [d for d in snap.devices if d.kind == "npu"]
    assert [d.key for d in npus] == [f"npu{i}-0" for i in range(8)]
    assert npus[0].mem_used_mb == 62877 and npus[0].mem_total_mb == 65536
    assert npus[4].power_w == 99.8 and npus[4].temp_c == 42
    assert [p.pid for p in npus[3].processes] == [412128]
    assert len(snap.processes) == 8 and snap.processes[0].name == "mindie_llm_back"
    assert snap.devices[-1].kind == "cpu" and snap.host is not None
    assert snap.host.proc_pid == os.getpid() and snap.host.proc_rss_mb > 10


def test_timeout_is_reported(stand_in):
    script, mode = stand_in
    mode.write_text("hang")
    provider = NpuSmiProvider(script, timeout_s=0.5)
    t0 = time.monotonic()
    reading = provider.read()
    assert time.monotonic() - t0 < 10.0  # the hung tool (sleep 30) and its child were killed
    assert reading.error.kind == "timeout" and "0.5" in reading.error.message
    assert reading.devices == ()


def test_nonzero_exit_reports_code_and_message(stand_in):
    script, mode = stand_in
    mode.write_text("fail")
    reading = NpuSmiProvider(script).read()
    assert reading.error.kind == "exit"
    assert reading.error.code == -8005
    assert reading.error.message == "dcmi module initialize failed. ret is -8005"
    mode.write_text("crash")
    reading = NpuSmiProvider(script).read()
    assert reading.error.code == 139 and "Segmentation fault" in reading.error.message


def test_missing_binary(tmp_path):
    reading = NpuSmiProvider(tmp_path / "no-such-npu-smi").read()
    assert reading.error.kind == "missing"
    source = make_provider("npu-smi", npu_smi_path=str(tmp_path / "nope"))
    snap = source.sample()
    assert snap.error.kind == "missing"
    assert [d.kind for d in snap.devices] == ["cpu"]  # the host view still works


def test_auto_without_npu_smi_falls_back_to_host(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    source = make_provider("auto")
    snap = source.sample()
    if source.name == "nvml":
        pytest.skip("NVML is usable on this machine")
    assert source.name == "host" and snap.error is None
    assert [d.key for d in snap.devices] == ["cpu"]
    assert any("npu-smi not found" in w for w in snap.warnings)


def test_nvml_absent_reports_cleanly():
    provider = NvmlProvider()
    if provider.available:
        pytest.skip("NVML is usable on this machine")
    reading = provider.read()
    assert reading.error.kind == "unavailable" and "NVML" in reading.error.message
    snap = SnapshotSource(provider).sample()
    assert snap.error is not None and snap.devices[-1].kind == "cpu"


def test_replay_cycles_captures(npu_smi_fixtures):
    files = [npu_smi_fixtures / "a3_info_6.txt", npu_smi_fixtures / "err_info_1.txt"]
    source = make_provider("replay", replay_files=files)
    a, b, c = source.sample(), source.sample(), source.sample()
    assert a.source == "replay:a3_info_6.txt" and len(a.accelerators) == 4
    assert a.device("npu1-1").processes[0].pid == 990711
    assert b.error.code == -8005 and b.accelerators == ()
    assert c.accelerators == a.accelerators


def test_poller_survives_timeout_and_failure(stand_in):
    script, mode = stand_in
    source = make_provider("npu-smi", npu_smi_path=str(script), timeout_s=0.4)
    poller = TelemetryPoller(source, interval_s=0.05)
    got: queue.Queue = queue.Queue()
    poller.subscribe(got.put)

    def wait_for(pred, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                snap = got.get(timeout=0.2)
            except queue.Empty:
                continue
            if pred(snap):
                return snap
        raise AssertionError("no matching snapshot")

    poller.start()
    try:
        ok = wait_for(lambda s: s.error is None and s.accelerators)
        assert len(ok.accelerators) == 8
        mode.write_text("hang")
        assert wait_for(lambda s: s.error is not None).error.kind == "timeout"
        mode.write_text("fail")
        assert (
            wait_for(lambda s: s.error is not None and s.error.kind == "exit").error.code == -8005
        )
        mode.write_text("ok")
        wait_for(lambda s: s.error is None and len(s.accelerators) == 8)
        assert poller.running
        # the failed cycles left gaps (NaN), not stale values, in the history
        t, v = poller.history("npu0-0:mem_used_mb")
        assert len(t) == len(v) >= 3
        assert v[-1] == 62877
        assert np.isnan(v).any()  # NaN where npu-smi failed
    finally:
        poller.close()
    assert not poller.running
