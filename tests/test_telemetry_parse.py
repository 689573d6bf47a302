"""npu-smi `info` table parser against the real captures in ../shared/fixtures/npu-smi."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_console.cli.main import main
from npu_console.engine.telemetry.npu_smi_table import parse_npu_smi_info

CHIP_KEYS = [
    "npu_id",
    "chip_id",
    "device_id",
    "name",
    "health",
    "power_w",
    "temp_c",
    "hugepages_used",
    "hugepages_total",
    "bus_id",
    "aicore_pct",
    "memory_used_mb",
    "memory_total_mb",
    "hbm_used_mb",
    "hbm_total_mb",
]


def chip(npu, chip_id, dev, name, health, power, temp, hp, bus, aicore, mem, hbm):
    return dict(
        zip(
            CHIP_KEYS,
            [
                npu,
                chip_id,
                dev,
                name,
                health,
                power,
                temp,
                hp[0],
                hp[1],
                bus,
                aicore,
                mem[0],
                mem[1],
                hbm[0],
                hbm[1],
            ],
        )
    )


def parse(fixtures, name):
    return parse_npu_smi_info((fixtures / f"{name}.txt").read_text())


def test_every_capture_parses_without_exception(npu_smi_fixtures):
    files = sorted(npu_smi_fixtures.glob("*.txt"))
    assert len(files) > 50
    for f in files:
        info = parse_npu_smi_info(f.read_text())
        if "_info_" in f.name and not f.name.startswith("err_"):
            assert info.chips, f.name
            assert info.error is None, f.name
        # JSON-serialisable whatever the input
        json.dumps(info.to_json())


# one capture per layout, values transcribed from the capture by hand
LAYOUT_CASES = [
    # 310-80: oldest layout, no hugepages, 5 cards x 4 chips, Device column
    (
        "310_info_3",
        80,
        "20.2.2",
        "20.2.2",
        20,
        13,
        chip(
            2051,
            1,
            13,
            "310",
            "OK",
            12.8,
            50,
            (None, None),
            "0000:8E:00.0",
            0,
            (2621, 8192),
            (None, None),
        ),
    ),
    # 310P-94: narrow 310P with numeric power; tool and driver versions differ
    (
        "310p3_info_2",
        94,
        "22.0.0",
        "22.0.2",
        1,
        0,
        chip(
            0,
            0,
            0,
            "310P3",
            "OK",
            16.3,
            53,
            (1236, 1236),
            "0000:86:00.0",
            0,
            (4060, 21534),
            (None, None),
        ),
    ),
    # 310B-90: Bus-Id NA
    (
        "310b4_info_1",
        90,
        "23.0.rc3",
        "23.0.rc3",
        1,
        0,
        chip(0, 0, 0, "310B4", "OK", 7.7, 54, (15, 15), None, 0, (2166, 3513), (None, None)),
    ),
    # 310-106: 300I Duo, power NA, 5-digit memory touching the slash, ids 0..32896
    (
        "310p3-duo_info_1",
        106,
        "25.3.rc1",
        "25.3.rc1",
        8,
        1,
        chip(
            0,
            1,
            1,
            "310P3",
            "OK",
            None,
            84,
            (16997, 16997),
            "0000:01:00.0",
            0,
            (35270, 43693),
            (None, None),
        ),
    ),
    (
        "310p3-duo_info_1",
        106,
        "25.3.rc1",
        "25.3.rc1",
        8,
        7,
        chip(
            32896,
            1,
            7,
            "310P3",
            "OK",
            None,
            81,
            (0, 0),
            "0000:84:00.0",
            0,
            (1265, 43693),
            (None, None),
        ),
    ),
    # 910-86: no Hugepages column
    (
        "910a_info_4",
        86,
        "21.0.2",
        "21.0.2",
        2,
        1,
        chip(
            4,
            0,
            None,
            "910A",
            "OK",
            65.6,
            58,
            (None, None),
            "0000:86:00.0",
            0,
            (1809, 15079),
            (0, 32768),
        ),
    ),
    # 910-93
    (
        "910a_info_3",
        93,
        "21.0.4",
        "21.0.4",
        2,
        1,
        chip(
            1,
            0,
            None,
            "910A",
            "OK",
            67.2,
            36,
            (15, 15),
            "0000:81:00.0",
            0,
            (1274, 15171),
            (1, 32768),
        ),
    ),
    # 910-98: DDR pool + HBM, HBM used touching the slash
    (
        "910premiuma_info_1",
        98,
        "23.0.rc2",
        "23.0.rc2",
        8,
        3,
        chip(
            3,
            0,
            None,
            "910PremiumA",
            "OK",
            179.6,
            41,
            (34, 34),
            "0000:01:00.0",
            15,
            (2436, 15039),
            (31842, 32768),
        ),
    ),
    # wide-116 (26.x)
    (
        "910b3_info_3",
        116,
        "26.1.0",
        "26.1.0",
        8,
        0,
        chip(
            0, 0, None, "910B3", "OK", 100.0, 50, (0, 0), "0000:C1:00.0", 0, (0, 0), (8676, 65536)
        ),
    ),
    # A3 98: Chip Phy-ID row, die 1 power "-"
    (
        "a3_info_2",
        98,
        "24.1.rc3.7",
        "24.1.rc3.7",
        16,
        15,
        chip(
            7, 1, 15, "Ascend910", "OK", None, 37, (0, 0), "0000:83:00.0", 0, (0, 0), (3188, 65536)
        ),
    ),
    (
        "a3_info_2",
        98,
        "24.1.rc3.7",
        "24.1.rc3.7",
        16,
        10,
        chip(
            5, 0, 10, "Ascend910", "OK", 189.1, 37, (0, 0), "0000:89:00.0", 0, (0, 0), (3398, 65536)
        ),
    ),
    # A3 wide-116 fragment
    (
        "a3_info_5",
        116,
        "26.0.rc2",
        "26.0.rc2",
        2,
        1,
        chip(
            0, 1, 1, "Ascend910", "OK", None, 34, (0, 0), "0000:9F:00.0", 0, (0, 0), (2874, 65536)
        ),
    ),
    # 950: NPU ID | Name cells, no chip row, NPU Util column
    (
        "950dt_info_1",
        116,
        None,
        None,
        8,
        3,
        chip(3, 0, None, "Ascend950DT", "OK", 395.1, 48, (0, 0), None, 0, (0, 0), (4857, 98304)),
    ),
    # trailing space after every line; health Alarm; power 0.0
    (
        "310b4_info_2",
        106,
        "23.0.0",
        "23.0.0",
        1,
        0,
        chip(0, 0, 0, "310B4", "Alarm", 0.0, 65, (15, 15), None, 0, (3628, 15609), (None, None)),
    ),
    # Bus-Id NA, hand-annotated version line
    (
        "310_info_2",
        106,
        "22.0.4",
        "22.0.4",
        1,
        0,
        chip(0, 0, 0, "310", "OK", 12.8, 51, (0, 187), None, 0, (5745, 7757), (None, None)),
    ),
]


@pytest.mark.parametrize(
    "name,width,tool,driver,n_chips,idx,expected",
    LAYOUT_CASES,
    ids=[f"{c[0]}#{c[5]}" for c in LAYOUT_CASES],
)
def test_layout_fields(npu_smi_fixtures, name, width, tool, driver, n_chips, idx, expected):
    info = parse(npu_smi_fixtures, name)
    assert info.width == width
    assert info.tool_version == tool
    assert info.driver_version == driver
    assert len(info.chips) == n_chips
    assert info.chips[idx].to_json() == expected
    assert info.error is None


def test_310_four_chip_cards_keep_printed_order(npu_smi_fixtures):
    info = parse(npu_smi_fixtures, "310_info_3")
    assert [(c.npu_id, c.chip_id) for c in info.chips] == [
        (n, c) for n in range(2048, 2053) for c in range(4)
    ]
    assert [c.device_id for c in info.chips] == list(range(20))


def test_a3_dies_pair_with_phy_ids(npu_smi_fixtures):
    info = parse(npu_smi_fixtures, "a3_info_2")
    assert [(c.npu_id, c.chip_id, c.device_id) for c in info.chips] == [
        (n, d, 2 * n + d) for n in range(8) for d in range(2)
    ]
    assert all(c.power_w is None for c in info.chips if c.chip_id == 1)
    assert all(c.power_w is not None for c in info.chips if c.chip_id == 0)


def test_process_table_multi_chip_empty_names(npu_smi_fixtures):
    info = parse(npu_smi_fixtures, "310p3-duo_info_1")
    assert [p.to_json() for p in info.processes] == [
        {"npu_id": 0, "chip_id": 0, "pid": 326429, "name": "", "memory_mb": 33842},
        {"npu_id": 0, "chip_id": 0, "pid": 326430, "name": "", "memory_mb": 108},
        {"npu_id": 0, "chip_id": 1, "pid": 326430, "name": "", "memory_mb": 34086},
    ]
    assert info.idle_npus == (96, 32768, 32896)


def test_process_table_two_processes_one_chip(npu_smi_fixtures):
    info = parse(npu_smi_fixtures, "910b4_info_3")
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb) for p in info.processes] == [
        (0, 0, 1406630, "mindie_llm_back", 21835),
        (0, 0, 60575, "python", 2122),
    ]
    assert info.idle_npus == (1,)


def test_process_table_one_per_npu(npu_smi_fixtures):
    info = parse(npu_smi_fixtures, "910b2_info_1")
    assert [(p.npu_id, p.pid) for p in info.processes] == [
        (0, 412122),
        (1, 412124),
        (2, 412126),
        (3, 412128),
        (4, 412140),
        (5, 412147),
        (6, 412154),
        (7, 412161),
    ]
    assert {p.name for p in info.processes} == {"mindie_llm_back"}
    assert {p.memory_mb for p in info.processes} == {59539}


def test_process_table_wide_with_container_column(npu_smi_fixtures):
    info = parse(npu_smi_fixtures, "910b3_info_3")
    assert len(info.processes) == 1
    p = info.processes[0]
    assert (p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb, p.container_pid) == (
        0,
        0,
        485946,
        "pytest",
        5175,
        None,
    )
    assert info.idle_npus == tuple(range(1, 8))


def test_process_on_a3_die_one_and_empty_name(npu_smi_fixtures):
    a3 = parse(npu_smi_fixtures, "a3_info_6")
    assert [p.to_json() for p in a3.processes] == [
        {"npu_id": 1, "chip_id": 1, "pid": 990711, "name": "python", "memory_mb": 7746}
    ]
    b3 = parse(npu_smi_fixtures, "910b3_info_1")
    assert [p.to_json() for p in b3.processes] == [
        {"npu_id": 2, "chip_id": 0, "pid": 1333928, "name": "", "memory_mb": 37709}
    ]


def test_cut_fragment_without_header(npu_smi_fixtures):
    info = parse(npu_smi_fixtures, "a3_info_4")
    assert [c.to_json() for c in info.chips] == [
        chip(
            7, 1, 15, "Ascend910", "OK", None, 35, (0, 0), "0000:83:00.0", 0, (0, 0), (31877, 65536)
        )
    ]
    assert [(p.pid, p.name, p.memory_mb) for p in info.processes] == [(632268, "python3.1", 197)]
    assert any("no column header" in w for w in info.warnings)


def test_driver_warning_trailer(npu_smi_fixtures):
    text = (npu_smi_fixtures / "910b3_info_4.txt").read_text()
    trailer = (
        "[WARNING]The driver package may not be completely installed, which may cause "
        "function abnormal. Please reinstall it.\n"
    )
    plain, warned = parse_npu_smi_info(text), parse_npu_smi_info(text + trailer)
    assert warned.chips == plain.chips and warned.processes == plain.processes
    assert warned.error is None
    assert any("driver package" in w for w in warned.warnings)


@pytest.mark.parametrize("name", ["err_info_1", "err_info_3"])
def test_error_captures(npu_smi_fixtures, name):
    info = parse(npu_smi_fixtures, name)
    assert info.to_json() == {
        "tool_version": None,
        "driver_version": None,
        "chips": [],
        "processes": [],
        "error": {"code": -8005, "message": "dcmi module initialize failed. ret is -8005"},
    }


def test_device_used_error_text():
    info = parse_npu_smi_info(
        "dcmi model initialized failed, because the device is used. ret is -8020\n"
    )
    assert info.error.code == -8020
    assert info.error.message.startswith("dcmi model initialized failed")


def test_unknown_text_gives_warning_not_exception():
    info = parse_npu_smi_info("bash: npu-smi: command not found\n")
    assert info.chips == () and info.error is None
    assert info.warnings
    assert parse_npu_smi_info("").warnings


def test_crlf_and_cut_lines(npu_smi_fixtures):
    text = (npu_smi_fixtures / "910premiuma_info_1.txt").read_text()
    crlf = parse_npu_smi_info(text.replace("\n", "\r\n"))
    assert crlf.chips == parse_npu_smi_info(text).chips
    lines = text.splitlines()
    for n in range(len(lines)):
        for cut in (0, 17):
            partial = "\n".join(lines[:n] + [lines[n][:cut]])
            parse_npu_smi_info(partial)  # never raises


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("|+-= /\n0123456789NAOKabc.:")), max_size=600))
def test_fuzz_never_raises(text):
    info = parse_npu_smi_info(text)
    json.dumps(info.to_json())


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fuzz_mutated_capture(npu_smi_fixtures, data):
    text = (npu_smi_fixtures / "310p3-duo_info_1.txt").read_text()
    i = data.draw(st.integers(0, len(text) - 1))
    j = data.draw(st.integers(i, min(len(text), i + 40)))
    junk = data.draw(st.text(max_size=20))
    parse_npu_smi_info(text[:i] + junk + text[j:])


def test_cli_input_json(npu_smi_fixtures, capsys):
    path = npu_smi_fixtures / "a3_info_6.txt"
    assert main(["smi", "--input", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["tool_version", "driver_version", "chips", "processes", "error"]
    assert out == parse_npu_smi_info(path.read_text()).to_json()
    assert list(out["chips"][0]) == CHIP_KEYS
    assert out["chips"][1]["power_w"] is None and out["chips"][3]["hbm_used_mb"] == 10568


def test_cli_input_error_capture(npu_smi_fixtures, capsys):
    assert main(["smi", "--input", str(npu_smi_fixtures / "err_info_3.txt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["chips"] == [] and out["error"]["code"] == -8005


def test_cli_missing_file_is_one_line(tmp_path, capsys):
    assert main(["smi", "--input", str(tmp_path / "nope.txt"), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "no such file" in err
