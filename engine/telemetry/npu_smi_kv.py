"""Parsers for npu-smi's key : value sub-commands, part 1: the shared reader and the chip readings
(`info -t usages|common|power|temp|memory`). Card facts (`-t board|health|ecc|proc-mem`, `-l`,
`-m`) are in `npu_smi_kv_card.py`.

All share one reader: lines are `<indent><key padded to 30 or 40> : <value>`, blocks are
separated by blank lines, a block's `Chip ID` may come first (common) or last (usages, temp...),
and a key seen twice inside one block starts a new block (some captures have no blank lines).
Typed results keep every raw key in `values`, so keys this code does not know are not lost.
Nothing here raises on bad input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .smi_values import to_float, to_int, to_str

_HEAD_KEYS = ("NPU ID", "Chip Count", "Total Count", "Card Count")
_ANNOTATION_RE = re.compile(r"\t+\s*#.*$")


# ----------------------------------------------------------------------------- generic reader


@dataclass
class KvBlock:
    values: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # non key:value lines, in order

    def get(self, *keys: str) -> str | None:
        """First present key among `keys` (npu-smi spells some keys differently per product)."""
        for key in keys:
            if key in self.values:
                return self.values[key]
        return None

    @property
    def chip_id(self) -> int | None:
        return to_int(self.values.get("Chip ID"))

    @property
    def chip_name(self) -> str | None:
        return to_str(self.values.get("Chip Name"))


@dataclass
class KvOutput:
    head: dict[str, str] = field(default_factory=dict)  # NPU ID, Chip Count, Total Count...
    blocks: list[KvBlock] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # an npu-smi error line ("... ret is -8005"), if that is all there was


def _split_kv(line: str) -> tuple[str, str] | None:
    # keys are padded, so " : " is the separator; fall back to the first ":" for odd pastes
    if " : " in line:
        key, _, value = line.partition(" : ")
    elif ":" in line and not line.lstrip().lower().startswith("process id:"):
        key, _, value = line.partition(":")
    else:
        return None
    return key.strip(), value.strip()


def parse_kv_output(text: str) -> KvOutput:
    """Read any key : value npu-smi output into a head and per-chip blocks."""
    out = KvOutput()
    try:
        _read_kv(text, out)
    except Exception as exc:  # noqa: BLE001 - keep the partial result
        out.warnings.append(f"internal parser error: {type(exc).__name__}: {exc}")
    return out


def _read_kv(text: str, out: KvOutput) -> None:
    if not isinstance(text, str):
        text = str(text or "")
    groups: list[list[str]] = [[]]
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.rstrip()
        if not line.strip():
            if groups[-1]:
                groups.append([])
            continue
        if line.lstrip().startswith("#"):
            out.warnings.append("annotation line ignored")
            continue
        groups[-1].append(line)
    groups = [g for g in groups if g]

    head_done = False
    for group in groups:
        block = KvBlock()
        last_key: str | None = None
        for line in group:
            cleaned = _ANNOTATION_RE.sub("", line)
            if cleaned != line:
                out.warnings.append("inline annotation removed")
            kv = _split_kv(cleaned)
            if kv is None:
                if "ret is" in cleaned.lower() and out.error is None:
                    out.error = cleaned.strip()
                block.lines.append(cleaned.strip())
                continue
            key, value = kv
            if not key:
                # continuation line of a multi-line value (health's Error Information)
                if last_key is not None:
                    block.values[last_key] = (block.values[last_key] + "\n" + value).strip()
                continue
            if not head_done and key in _HEAD_KEYS and not block.values and key not in out.head:
                out.head[key] = value
                continue
            if key in block.values:
                out.blocks.append(block)
                block = KvBlock()
            block.values[key] = value
            last_key = key
        head_done = True
        if block.values or block.lines:
            out.blocks.append(block)
    if not out.head and not out.blocks:
        out.warnings.append("no key : value lines found")


# ----------------------------------------------------------------------------- typed results


@dataclass
class _Chips:
    npu_id: int | None = None
    chip_count: int | None = None
    warnings: list[str] = field(default_factory=list)


def _head(kv: KvOutput, result: Any) -> None:
    result.npu_id = to_int(kv.head.get("NPU ID"))
    result.chip_count = to_int(kv.head.get("Chip Count"))
    result.warnings = list(kv.warnings)


def _read_chips(text: str, result: Any, chip: Callable[[KvBlock, Any], Any]) -> Any:
    """The one loop of every per-chip sub-command: the head into `result`, then chip(block,
    result) for each block, kept in result.chips unless it returns None (a block it skips, or
    one it filed elsewhere in `result`, such as board sensors)."""
    kv = parse_kv_output(text)
    _head(kv, result)
    for b in kv.blocks:
        item = chip(b, result)
        if item is not None:
            result.chips.append(item)
    return result


def _board_or(b: KvBlock, result: Any, chip: Callable[[], Any]) -> Any:
    # a block without a Chip ID is the MCU's (board sensors); an empty one is nothing
    if b.chip_id is not None:
        return chip()
    if b.values:
        result.others.append(_other(b))
    return None


@dataclass
class ChipUsages:
    chip_id: int | None
    ddr_capacity_mb: int | None  # "Memory Capacity(MB)" on 310/310B
    ddr_usage_pct: int | None
    hbm_capacity_mb: int | None
    hbm_usage_pct: int | None
    hugepages_total: int | None
    hugepages_usage_pct: int | None
    aicore_pct: int | None
    aivector_pct: int | None
    aicube_pct: int | None
    aicpu_pct: int | None
    ctrlcpu_pct: int | None
    vectorcore_pct: int | None
    npu_util_pct: int | None
    ddr_bandwidth_pct: int | None
    hbm_bandwidth_pct: int | None
    dvpp_pct: dict[str, int | None]  # VDEC, VPC, VENC, JPEGE, JPEGD (310P)
    values: dict[str, str]


@dataclass
class UsagesResult(_Chips):
    chips: list[ChipUsages] = field(default_factory=list)


def parse_usages(text: str) -> UsagesResult:
    """`npu-smi info -t usages -i N`."""
    return _read_chips(text, UsagesResult(), _usages_chip)


def _usages_chip(b: KvBlock, _res: UsagesResult) -> ChipUsages | None:
    if not b.values:
        return None
    dvpp = {
        k[len("DVPP ") :].split(" ")[0]: to_int(v)
        for k, v in b.values.items()
        if k.startswith("DVPP ")
    }
    return ChipUsages(
        chip_id=b.chip_id,
        ddr_capacity_mb=to_int(b.get("DDR Capacity(MB)", "Memory Capacity(MB)")),
        ddr_usage_pct=to_int(b.get("DDR Usage Rate(%)", "Memory Usage Rate(%)")),
        hbm_capacity_mb=to_int(b.get("HBM Capacity(MB)")),
        hbm_usage_pct=to_int(b.get("HBM Usage Rate(%)")),
        hugepages_total=to_int(b.get("DDR Hugepages Total(page)", "Hugepages Total(page)")),
        hugepages_usage_pct=to_int(
            b.get("DDR Hugepages Usage Rate(%)", "Hugepages Usage Rate(%)")
        ),
        aicore_pct=to_int(b.get("Aicore Usage Rate(%)")),
        aivector_pct=to_int(b.get("Aivector Usage Rate(%)")),
        aicube_pct=to_int(b.get("Aicube Usage Rate(%)")),
        aicpu_pct=to_int(b.get("Aicpu Usage Rate(%)")),
        ctrlcpu_pct=to_int(b.get("Ctrlcpu Usage Rate(%)")),
        vectorcore_pct=to_int(b.get("Vectorcore Usage Rate(%)")),
        npu_util_pct=to_int(b.get("NPU Utilization(%)")),
        ddr_bandwidth_pct=to_int(
            b.get("DDR Bandwidth Usage Rate(%)", "Memory Bandwidth Usage Rate(%)")
        ),
        hbm_bandwidth_pct=to_int(b.get("HBM Bandwidth Usage Rate(%)")),
        dvpp_pct=dvpp,
        values=dict(b.values),
    )


@dataclass
class ChipCommon:
    chip_id: int | None
    memory_usage_pct: int | None
    hbm_usage_pct: int | None
    aicore_pct: int | None
    aicore_freq_mhz: int | None
    aicore_cur_freq_mhz: int | None
    aicore_count: int | None
    temp_c: int | None
    power_w: float | None
    values: dict[str, str]


@dataclass
class BoardSensors:
    """A block without a Chip ID: the MCU / board controller (`Chip Name : mcu`)."""

    name: str | None
    temp_c: float | None
    power_w: float | None
    values: dict[str, str]


@dataclass
class CommonResult(_Chips):
    chips: list[ChipCommon] = field(default_factory=list)
    others: list[BoardSensors] = field(default_factory=list)


def _temp_of(b: KvBlock) -> str | None:
    return b.get("Temperature(C)", "NPU Temperature (C)", "Temperature (C)", "NPU Temperature(C)")


def _power_of(b: KvBlock) -> str | None:
    return b.get("NPU Real-time Power(W)", "Power Dissipation(W)", "Real-time Power(W)")


def _other(b: KvBlock) -> BoardSensors:
    return BoardSensors(
        name=b.chip_name,
        temp_c=to_float(_temp_of(b)),
        power_w=to_float(_power_of(b)),
        values=dict(b.values),
    )


def parse_common(text: str) -> CommonResult:
    """`npu-smi info -t common -i N`."""
    return _read_chips(text, CommonResult(), _common_chip)


def _common_chip(b: KvBlock, res: CommonResult) -> ChipCommon | None:
    return _board_or(b, res, lambda: ChipCommon(
        chip_id=b.chip_id,
        memory_usage_pct=to_int(b.get("Memory Usage Rate(%)", "DDR Usage Rate(%)")),
        hbm_usage_pct=to_int(b.get("HBM Usage Rate(%)")),
        aicore_pct=to_int(b.get("Aicore Usage Rate(%)")),
        aicore_freq_mhz=to_int(b.get("Aicore Freq(MHZ)", "Aicore Freq(MHz)")),
        aicore_cur_freq_mhz=to_int(b.get("Aicore curFreq(MHZ)", "Aicore curFreq(MHz)")),
        aicore_count=to_int(b.get("Aicore Count")),
        temp_c=to_int(_temp_of(b)),
        power_w=to_float(_power_of(b)),
        values=dict(b.values),
    ))


@dataclass
class ChipReading:
    chip_id: int | None
    value: float | None
    values: dict[str, str]


@dataclass
class TempResult(_Chips):
    chips: list[ChipReading] = field(default_factory=list)  # value = temperature in C
    others: list[BoardSensors] = field(default_factory=list)  # MCU sensors (LM75A_TE ...)


def parse_temp(text: str) -> TempResult:
    """`npu-smi info -t temp -i N`."""
    return _read_chips(text, TempResult(), lambda b, res: _board_or(
        b, res, lambda: ChipReading(b.chip_id, to_float(_temp_of(b)), dict(b.values))))


@dataclass
class PowerResult(_Chips):
    chips: list[ChipReading] = field(default_factory=list)  # value = watts
    others: list[BoardSensors] = field(default_factory=list)
    rated_w: float | None = None


def parse_power(text: str) -> PowerResult:
    """`npu-smi info -t power -i N`."""
    return _read_chips(text, PowerResult(), _power_chip)


def _power_chip(b: KvBlock, res: PowerResult) -> ChipReading | None:
    rated = to_float(b.get("Rated Power Dissipation(W)"))
    if rated is not None:
        res.rated_w = rated
    return _board_or(b, res, lambda: ChipReading(b.chip_id, to_float(_power_of(b)),
                                                 dict(b.values)))


@dataclass
class ChipMemory:
    chip_id: int | None
    ddr_capacity_mb: int | None
    ddr_clock_mhz: int | None
    hbm_capacity_mb: int | None
    hbm_clock_mhz: int | None
    hbm_temp_c: int | None
    hbm_manufacturer_id: str | None
    values: dict[str, str]


@dataclass
class MemoryResult(_Chips):
    chips: list[ChipMemory] = field(default_factory=list)


def parse_memory(text: str) -> MemoryResult:
    """`npu-smi info -t memory -i N`."""
    return _read_chips(text, MemoryResult(), _memory_chip)


def _memory_chip(b: KvBlock, _res: MemoryResult) -> ChipMemory | None:
    if not b.values:
        return None
    return ChipMemory(
        chip_id=b.chip_id,
        ddr_capacity_mb=to_int(
            b.get("DDR Capacity(MB)", "Total DDR Capacity(MB)", "Memory Capacity(MB)")
        ),
        ddr_clock_mhz=to_int(b.get("DDR Clock Speed(MHz)", "DDR Clock Speed(MHZ)")),
        hbm_capacity_mb=to_int(b.get("HBM Capacity(MB)")),
        hbm_clock_mhz=to_int(b.get("HBM Clock Speed(MHz)", "HBM Clock Speed(MHZ)")),
        hbm_temp_c=to_int(b.get("HBM Temperature(C)")),
        hbm_manufacturer_id=to_str(b.get("HBM Manufacturer ID")),
        values=dict(b.values),
    )
