"""npu-smi key : value sub-commands (-t usages/common/power/temp/memory/board/health/ecc/proc-mem,
-l, -m) against the real captures."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from npu_console.engine.telemetry.npu_smi_kv import (
    parse_common,
    parse_kv_output,
    parse_memory,
    parse_power,
    parse_temp,
    parse_usages,
)
from npu_console.engine.telemetry.npu_smi_kv_card import (
    parse_board,
    parse_ecc,
    parse_health,
    parse_list,
    parse_mapping,
    parse_proc_mem,
)

# every parser of the key : value sub-commands: none may raise, whatever it is given
ALL_PARSERS = (parse_kv_output, parse_usages, parse_common, parse_temp, parse_power, parse_memory,
               parse_board, parse_health, parse_ecc, parse_proc_mem, parse_list, parse_mapping)


def read(fixtures, name):
    return (fixtures / f"{name}.txt").read_text()


def test_usages_910b_newest_keys(npu_smi_fixtures):
    r = parse_usages(read(npu_smi_fixtures, "910b_usages_1"))
    assert (r.npu_id, r.chip_count, len(r.chips)) == (0, 1, 1)
    c = r.chips[0]
    assert (c.chip_id, c.hbm_capacity_mb, c.hbm_usage_pct, c.ctrlcpu_pct) == (0, 65536, 5, 6)
    assert (c.aivector_pct, c.aicube_pct, c.npu_util_pct, c.ddr_capacity_mb) == (0, 0, 0, 0)
    assert c.vectorcore_pct is None and c.dvpp_pct == {}


def test_usages_a3_tabs_two_dies(npu_smi_fixtures):
    r = parse_usages(read(npu_smi_fixtures, "a3_usages_1"))
    assert (r.npu_id, r.chip_count) == (0, 2)
    assert [(c.chip_id, c.aicore_pct, c.npu_util_pct, c.hbm_usage_pct) for c in r.chips] == [
        (0, 2, 65, 16),
        (1, 12, 58, 16),
    ]
    assert r.chips[0].ddr_capacity_mb == 0 and r.chips[1].ddr_capacity_mb is None


def test_usages_310p_duo_blocks_end_with_chip_id(npu_smi_fixtures):
    r = parse_usages(read(npu_smi_fixtures, "310p3-duo_usages_1"))
    assert [(c.chip_id, c.ddr_capacity_mb, c.ctrlcpu_pct) for c in r.chips] == [
        (0, 44280, 2),
        (1, 43693, 3),
    ]
    assert r.chips[0].dvpp_pct == {"VDEC": 0, "VPC": 0, "VENC": 0, "JPEGE": 0, "JPEGD": 0}
    assert r.chips[0].ddr_bandwidth_pct == 51 and r.chips[0].vectorcore_pct == 0


def test_usages_old_910_ddr_and_hbm(npu_smi_fixtures):
    c = parse_usages(read(npu_smi_fixtures, "910a_usages_1")).chips[0]
    assert (c.ddr_capacity_mb, c.ddr_usage_pct, c.hbm_capacity_mb, c.ctrlcpu_pct) == (
        15171,
        3,
        32768,
        9,
    )


def test_common_chip_first_blocks_and_mcu(npu_smi_fixtures):
    r = parse_common(read(npu_smi_fixtures, "310p3-duo_common_1"))
    assert [(c.chip_id, c.temp_c, c.aicore_freq_mhz, c.aicore_cur_freq_mhz) for c in r.chips] == [
        (0, 60, 1080, 960),
        (1, 59, 1080, 960),
    ]
    assert [(o.name, o.temp_c, o.power_w) for o in r.others] == [("mcu", 48.0, 45.2)]


def test_common_without_blank_lines(npu_smi_fixtures):
    r = parse_common(read(npu_smi_fixtures, "910a_common_2"))
    assert (r.npu_id, r.chip_count) == (0, 1)
    c = r.chips[0]
    assert (c.chip_id, c.aicore_count, c.temp_c, c.power_w, c.hbm_usage_pct) == (0, 30, 41, 71.7, 0)


def test_temp_and_mcu_sensors(npu_smi_fixtures):
    r = parse_temp(read(npu_smi_fixtures, "910b_temp_1"))
    assert [(c.chip_id, c.value) for c in r.chips] == [(0, 39.0)]
    assert r.others[0].name == "MCU"
    assert r.others[0].values["LM75A_TE (C)"] == "36"


def test_power(npu_smi_fixtures):
    r = parse_power(read(npu_smi_fixtures, "910b_power_1"))
    assert [(c.chip_id, c.value) for c in r.chips] == [(0, 103.5)]


def test_memory_keys():
    # no capture of -t memory in the corpus: lines in the printer's format (README section 4)
    text = (
        "\tNPU ID                         : 3\n\tChip Count                     : 1\n\n"
        "\tDDR Capacity(MB)               : 15171\n\tDDR Clock Speed(MHz)           : 2666\n"
        "\tHBM Capacity(MB)               : 32768\n\tHBM Clock Speed(MHz)           : 1200\n"
        "\tHBM Temperature(C)             : 40\n\tHBM Manufacturer ID            : 0x5A\n"
        "\tChip ID                        : 0\n"
    )
    r = parse_memory(text)
    assert r.npu_id == 3
    c = r.chips[0]
    assert (c.chip_id, c.ddr_capacity_mb, c.ddr_clock_mhz, c.hbm_capacity_mb) == (
        0,
        15171,
        2666,
        32768,
    )
    assert (c.hbm_clock_mhz, c.hbm_temp_c, c.hbm_manufacturer_id) == (1200, 40, "0x5A")


def test_board_card_level(npu_smi_fixtures):
    b = parse_board(read(npu_smi_fixtures, "910b_board_1"))
    assert (b.npu_id, b.chip_id, b.product_name, b.model) == (0, None, "IT21HMDC_Bin5", None)
    assert (b.serial_number, b.software_version, b.firmware_version) == (
        "1025C9048791",
        "25.5.1",
        "7.8.0.6.201",
    )
    assert (b.pci_device_id, b.compatibility, b.chip_count, b.slot_id) == ("0xD802", "OK", 1, 0)
    old = parse_board(read(npu_smi_fixtures, "910a_board_1"))
    assert old.product_name is None and old.pci_device_id == "0xD801"


def test_board_chip_level(npu_smi_fixtures):
    b = parse_board(read(npu_smi_fixtures, "910a_board-c_1"))
    assert (b.npu_id, b.chip_id, b.chip_type, b.chip_name, b.chip_version) == (
        0,
        0,
        "Ascend",
        "xxx",
        "V1",
    )
    assert b.vdie_id == "42C711D4 20B03704 4A10C8D4 14CC040A D2102003"
    assert b.ndie_id.startswith("27216594")
    p = parse_board(read(npu_smi_fixtures, "310p3_board-c_1"))
    assert p.die_id == "409921D4 2140A100 E54BDDD4 07CC040A 9B00301F" and p.vdie_id is None
    a3 = parse_board(read(npu_smi_fixtures, "a3_board-c_1"))
    assert (a3.npu_name, a3.chip_name, a3.chip_type) == ("9392", "Ascend910", None)


def test_board_with_inline_annotations(npu_smi_fixtures):
    b = parse_board(read(npu_smi_fixtures, "310_board_1"))
    assert (b.software_version, b.firmware_version) == ("22.0.4", "1.84.15.1.310")
    assert b.values["Faulty Chip Count"] == "0"
    assert b.warnings


def test_health(npu_smi_fixtures):
    h = parse_health(read(npu_smi_fixtures, "910a_health-c_1"))
    assert (h.status, h.error_codes, h.error_info) == ("OK", [], [])


def test_health_with_error_codes_and_continuation():
    # printer format: codes " %04X" on one line, extra info lines with a blank key
    text = (
        "\tHealth Status                  : Alarm\n"
        "\tError Code                     : 80E01801 80E18402\n"
        "\tError Information              : node type=SOC, sensor type=Memory\n"
        "\t                               : node type=HBM, sensor type=ECC\n"
    )
    h = parse_health(text)
    assert h.status == "Alarm"
    assert h.error_codes == ["80E01801", "80E18402"]
    assert h.error_info == ["node type=SOC, sensor type=Memory", "node type=HBM, sensor type=ECC"]


def test_ecc_forty_char_keys(npu_smi_fixtures):
    r = parse_ecc(read(npu_smi_fixtures, "910a_ecc_1"))
    assert len(r.chips) == 1 and r.chips[0].chip_id == 0
    assert len(r.chips[0].counts) == 12
    assert r.chips[0].counts["HBM Double Bit Isolated Pages Count"] == 0
    assert r.chips[0].total("HBM", "Double") == 0


def test_proc_mem(npu_smi_fixtures):
    r = parse_proc_mem(read(npu_smi_fixtures, "a3_proc-mem_1"))
    assert [(c.chip_id, [(p.pid, p.name, p.memory_mb) for p in c.processes]) for c in r.chips] == [
        (0, []),
        (1, [(3229095, "", 48208)]),
    ]


def test_list(npu_smi_fixtures):
    r = parse_list(read(npu_smi_fixtures, "910b4_info-l_1"))
    assert r.total_count == 8
    assert [(n.npu_id, n.chip_count) for n in r.npus] == [(i, 1) for i in range(8)]
    assert not r.warnings
    m = parse_list(read(npu_smi_fixtures, "310_info-l_1"))
    assert m.total_count == 1
    assert [(n.npu_id, n.serial_number, n.product_name) for n in m.npus] == [
        (0, "033GWL10LB000840", None)
    ]


def test_mapping(npu_smi_fixtures):
    r = parse_mapping(read(npu_smi_fixtures, "910b4_info-m_1"))
    assert len(r.entries) == 16
    assert [(e.npu_id, e.chip_id, e.logic_id, e.chip_name) for e in r.chips] == [
        (i, 0, i, "Ascend 910B4") for i in range(8)
    ]
    assert all(e.is_mcu and e.logic_id is None for e in r.entries if e.chip_id == 1)
    a3 = parse_mapping(read(npu_smi_fixtures, "a3_info-m_1"))
    assert [(e.npu_id, e.chip_id, e.logic_id, e.phy_id, e.is_mcu) for e in a3.entries] == [
        (0, 0, 0, 0, False),
        (0, 1, 1, 1, False),
        (0, 2, None, None, True),
        (1, 0, 2, 2, False),
    ]
    duo = parse_mapping(read(npu_smi_fixtures, "310p3-duo_info-m_1"))
    assert [e.logic_id for e in duo.chips] == list(range(8))


# capture file kind (its name: MODEL_KIND_N.txt) -> the parser of that sub-command
BY_KIND = {"usages": parse_usages, "common": parse_common, "temp": parse_temp,
           "power": parse_power, "board": parse_board, "board-c": parse_board,
           "health-c": parse_health, "ecc": parse_ecc, "proc-mem": parse_proc_mem,
           "info-l": parse_list, "info-m": parse_mapping}


def test_every_capture_through_kv_reader(npu_smi_fixtures):
    empty = {fn: fn("") for fn in ALL_PARSERS}
    read_by_own = 0
    for f in sorted(npu_smi_fixtures.glob("*.txt")):
        text = f.read_text()
        for fn in ALL_PARSERS:  # none raises on any capture, and each returns its own type
            assert type(fn(text)) is type(empty[fn]), (f.name, fn.__name__)
        own = BY_KIND.get(f.stem.split("_")[1])
        if own is not None:  # its own parser reads something from it
            assert own(text) != empty[own], (f.name, own.__name__)
            assert parse_kv_output(text) != empty[parse_kv_output], f.name
            read_by_own += 1
    assert read_by_own >= 20


def test_error_output_reported():
    kv = parse_kv_output(
        "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
        "dcmi module initialize failed. ret is -8005\n"
    )
    assert kv.error == "dcmi module initialize failed. ret is -8005"
    assert not kv.blocks[0].values


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" :\t\n#-0123456789ChipIDNPUx")), max_size=400))
def test_fuzz_never_raises(text):
    for fn in ALL_PARSERS:
        fn(text)
