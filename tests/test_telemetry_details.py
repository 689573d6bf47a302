"""npu-smi `info -t` sub-commands in the snapshot: real captures replayed from a capture folder,
`smi --input DIR --json`, and the live provider's slow lane against a stand-in `npu-smi` that
replays real captures, hangs or fails (the one boundary that cannot exist here)."""

from __future__ import annotations

import json
import shutil
import stat
import time

import pytest
from npu_console.cli.main import main
from npu_console.engine.telemetry import make_provider
from npu_console.engine.telemetry.capture_folder import classify, scan_folder
from npu_console.engine.telemetry.npu_health import NO_TEXT, explain_codes, explain_status
from npu_console.engine.telemetry.npu_smi_kv import parse_usages
from npu_console.engine.telemetry.npu_smi_kv_card import parse_board, parse_ecc, parse_health
from npu_console.engine.telemetry.providers import NpuSmiProvider

FAMILY_910A = ("910a_info_1", "910a_usages_2", "910a_board_1", "910a_board-c_1", "910a_ecc_1",
               "910a_health-c_1")


def read(fixtures, name):
    return (fixtures / f"{name}.txt").read_text()


@pytest.fixture
def folder_910a(tmp_path, npu_smi_fixtures):
    """A capture folder: one 8-card old-910 table and that family's sub-command captures."""
    folder = tmp_path / "captures"
    folder.mkdir()
    for name in FAMILY_910A:
        shutil.copy(npu_smi_fixtures / f"{name}.txt", folder)
    (folder / "notes.md").write_text("not a capture")
    return folder


def test_file_names_classify():
    assert classify("910a_info_1.txt").command == "info"
    c = classify("310p3-duo_usages_1.txt")
    assert (c.prefix, c.command, c.n) == ("310p3-duo", "usages", 1)
    assert classify("a3_proc-mem_1.txt") is None  # not read into details
    assert classify("910b4_info-l_1.txt") is None and classify("910b3_topo_1.txt") is None
    assert (classify("usages.txt").prefix, classify("health-c.txt").command) == ("", "health-c")


def test_replayed_folder_fills_the_chip_detail(folder_910a, npu_smi_fixtures):
    found = scan_folder(folder_910a)
    assert [t.path.name for t in found.tables] == ["910a_info_1.txt"]
    assert len(found.subcommands) == 5
    snap = make_provider("replay", replay_files=[folder_910a]).sample()
    assert snap.error is None and snap.source == "replay:910a_info_1.txt"
    first, *others = snap.accelerators
    assert len(others) == 7 and all(d.detail is None for d in others)  # captures are of NPU 0
    det = first.detail
    usage = parse_usages(read(npu_smi_fixtures, "910a_usages_2")).chips[0]
    assert (det.aicpu_pct, det.ctrlcpu_pct) == (usage.aicpu_pct, usage.ctrlcpu_pct)
    assert (det.hbm_bandwidth_pct, det.ddr_bandwidth_pct) == (0.0, 0.0)
    board = parse_board(read(npu_smi_fixtures, "910a_board_1"))
    assert det.firmware_version == board.firmware_version == "7.1.0.7.220"
    assert det.software_version == "23.0.5" and det.serial_number is None  # not printed there
    assert det.chip_version == "V1"  # from -t board -c
    ecc = parse_ecc(read(npu_smi_fixtures, "910a_ecc_1")).chips[0]
    assert dict(det.ecc) == ecc.counts and len(det.ecc) == 12
    assert det.ecc_count("HBM", "Double") == 0 and det.ecc_count("DDR", "Single") == 0
    assert det.health_status == "OK" and det.health_meaning.startswith("healthy")
    assert det.error_codes == () and det.errors == () and det.updated_at is None
    assert set(det.sources) == {f"{n}.txt" for n in FAMILY_910A[1:]}
    # health-c has no NPU ID line: it is filed under the table's first card, and says so
    assert any("910a_health-c_1.txt" in w and "NPU 0" in w for w in snap.warnings)


def test_a3_usages_go_to_each_die(tmp_path, npu_smi_fixtures):
    folder = tmp_path / "a3"
    folder.mkdir()
    for name in ("a3_info_6", "a3_usages_1"):
        shutil.copy(npu_smi_fixtures / f"{name}.txt", folder)
    snap = make_provider("replay", replay_files=[folder]).sample()
    dies = {d.key: d.detail for d in snap.accelerators}
    assert dies["npu0-0"].npu_util_pct == 65 and dies["npu0-1"].npu_util_pct == 58
    assert dies.get("npu1-0") is None  # the capture is of NPU 0 only


def test_folder_without_a_table_is_an_error(tmp_path, npu_smi_fixtures):
    shutil.copy(npu_smi_fixtures / "910b_usages_1.txt", tmp_path)
    snap = make_provider("replay", replay_files=[tmp_path]).sample()
    assert snap.error.kind == "missing" and "no `npu-smi info` table" in snap.error.message
    assert main(["smi", "--input", str(tmp_path), "--json"]) == 2  # a CliError


def test_smi_input_dir_json_on_the_real_corpus(npu_smi_fixtures, capsys):
    assert main(["smi", "--input", str(npu_smi_fixtures), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    caps = {c["file"]: c for c in data["captures"]}
    assert "910b3_info_1.txt" in caps and "910a_info_1.txt" in caps
    assert all(ch["detail"] is None for ch in caps["910b3_info_1.txt"]["chips"])  # no 910b3_*
    chip0 = caps["910a_info_1.txt"]["chips"][0]
    assert (chip0["npu_id"], chip0["chip_id"], chip0["hbm_total_mb"]) == (0, 0, 32768)
    det = chip0["detail"]
    assert det["health_status"] == "OK" and det["firmware_version"] == "7.1.0.7.220"
    assert det["ecc"]["HBM Single Bit Error Count"] == 0 and det["error_codes_explained"] == []
    assert det["ctrlcpu_pct"] == 9  # 910a_usages_1 comes first in name order
    assert "910a_ecc_1.txt" in caps["910a_info_1.txt"]["subcommand_files"]
    a3 = caps["a3_info_6.txt"]["chips"]
    assert [c["detail"]["npu_util_pct"] for c in a3[:2]] == [65, 58]


def test_smi_input_dir_renders_details(folder_910a, capsys):
    assert main(["smi", "--input", str(folder_910a), "--no-color"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("npu0-0") and "health" in ln)
    assert "health OK" in line and "ctrl CPU 0%" in line and "fw 7.1.0.7.220" in line
    assert "HBM ECC 1-bit/2-bit 0/0" in line


def test_health_status_and_codes_in_words(npu_smi_fixtures):
    h = parse_health(read(npu_smi_fixtures, "910a_health-c_1"))
    assert (h.status, h.error_codes, h.error_info) == ("OK", [], [])
    for status in ("OK", "Warning", "Alarm", "Critical", "UNKNOWN"):
        assert explain_status(status) and "not one npu-smi documents" not in explain_status(status)
    assert "critical" in explain_status("Critical") and "minor" in explain_status("warning")
    assert "not one npu-smi documents" in explain_status("Bogus")
    assert explain_status(None) is None
    # no capture shows real error codes (fixtures README, gaps): the pairing on its own terms
    assert explain_codes(["80E01801", "80CB8009"], ["first", "second"]) == [
        ("80E01801", "first"), ("80CB8009", "second")]
    assert explain_codes(["80E01801"], []) == [("80E01801", NO_TEXT)]
    assert explain_codes(["A", "B"], ["one line"]) == [("A", "one line"), ("B", "one line")]


# ----------------------------------------------------------------------------- live slow lane


def write_stand_in(tmp_path, fixtures):
    """`npu-smi`: `info` cats a real 8-card table; `info -t T -i 0 [-c 0]` cats NPU 0's real
    capture of T; other cards exit 2. A mode file makes every sub-command hang or fail, and each
    call is logged, so the test counts the table's and the sub-commands' cadences."""
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copy(fixtures / "910a_info_1.txt", caps / "table.txt")
    for t, name in (("usages", "910a_usages_2"), ("board", "910a_board_1"), ("ecc", "910a_ecc_1"),
                    ("health-c", "910a_health-c_1")):
        shutil.copy(fixtures / f"{name}.txt", caps / f"{t}.txt")
    mode, log = tmp_path / "sub_mode", tmp_path / "calls.log"
    mode.write_text("ok")
    script = tmp_path / "npu-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        f'if [ "$#" -eq 1 ]; then cat "{caps}/table.txt"; exit 0; fi\n'
        f'case "$(cat "{mode}")" in\n'
        "  hang) sleep 30 ;;\n"
        '  fail) echo "dcmi module initialize failed. ret is -8005"; exit 255 ;;\n'
        "esac\n"
        't="$3"; [ "$#" -ge 7 ] && t="$t-c"\n'
        'if [ "$5" != 0 ]; then echo "no capture of card $5"; exit 2; fi\n'
        f'cat "{caps}/$t.txt"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, mode, log


def wait_until(pred, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_live_details_arrive_on_their_own_cadence(tmp_path, npu_smi_fixtures):
    script, _mode, log = write_stand_in(tmp_path, npu_smi_fixtures)
    provider = NpuSmiProvider(script, timeout_s=5, detail_interval_s=3600, detail_timeout_s=2)
    try:
        first = provider.read()
        assert first.error is None and len(first.devices) == 8
        wait_until(lambda: provider.details.rounds >= 1)
        for _ in range(5):
            reading = provider.read()
        det = reading.devices[0].detail
        assert det.health_status == "OK" and det.firmware_version == "7.1.0.7.220"
        assert (det.ctrlcpu_pct, det.aicpu_pct, det.hbm_bandwidth_pct) == (0.0, 0.0, 0.0)
        assert det.ecc_count("HBM", "Single") == 0 and det.updated_at > time.time() - 60
        assert "npu-smi info -t usages -i 0" in det.sources and det.errors == ()
        other = reading.devices[3].detail
        assert other.health_status is None and "exit status 2: no capture of card 3" in other.errors[0]
        calls = log.read_text().splitlines()
        # 6 table reads; one round of sub-commands: usages, board, ecc per card + health per chip
        assert calls.count("info") == 6
        assert len([c for c in calls if c != "info"]) == 8 * 4
        assert "info -t health -i 0 -c 0" in calls
    finally:
        provider.close()


def test_hung_sub_command_never_stalls_the_table(tmp_path, npu_smi_fixtures):
    script, mode, _log = write_stand_in(tmp_path, npu_smi_fixtures)
    # the hung sub-commands time out after 2 s: a table read that waited on one would take
    # that long, one that does not takes milliseconds; 1.5 s tells them apart on a busy machine
    provider = NpuSmiProvider(script, timeout_s=5, detail_interval_s=0.2, detail_timeout_s=2.0)
    try:
        provider.read()
        wait_until(lambda: provider.details.rounds >= 1)
        good = provider.read().devices[0].detail
        assert good.firmware_version == "7.1.0.7.220"
        mode.write_text("hang")
        rounds = provider.details.rounds
        slowest = 0.0
        deadline = time.monotonic() + 60
        while provider.details.rounds < rounds + 2 and time.monotonic() < deadline:
            t0 = time.monotonic()
            reading = provider.read()  # while the slow lane waits on a hung npu-smi
            slowest = max(slowest, time.monotonic() - t0)
            assert reading.error is None and len(reading.devices) == 8
        assert provider.details.rounds >= rounds + 2
        assert slowest < 1.5  # well under one sub-command timeout
        det = provider.read().devices[0].detail
        assert any("timed out after 2 s" in e for e in det.errors)
        assert det.firmware_version == "7.1.0.7.220"  # the last good answers stay
        assert det.ecc_count("HBM", "Double") == 0
        later = provider.read().devices[5].detail
        assert any("skipped: npu-smi timed out twice" in e for e in later.errors)
        mode.write_text("fail")
        rounds = provider.details.rounds
        wait_until(lambda: provider.details.rounds >= rounds + 2)
        det = provider.read().devices[0].detail
        assert any("exit status 255: dcmi module initialize failed" in e for e in det.errors)
        mode.write_text("ok")
        rounds = provider.details.rounds
        wait_until(lambda: provider.details.rounds >= rounds + 2)
        assert provider.read().devices[0].detail.errors == ()
    finally:
        provider.close()


def test_details_can_be_switched_off(tmp_path, npu_smi_fixtures):
    script, _mode, log = write_stand_in(tmp_path, npu_smi_fixtures)
    provider = NpuSmiProvider(script, timeout_s=5, details=False)
    reading = provider.read()
    provider.close()
    assert reading.error is None and all(d.detail is None for d in reading.devices)
    assert log.read_text().splitlines() == ["info"]
