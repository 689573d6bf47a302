"""Parsers for npu-smi's key : value sub-commands (`info -t usages|common|power|temp|memory|board|
health|ecc|proc-mem`, `info -l`) and the `info -m` chip map.

All share one reader: lines are `<indent><key padded to 30 or 40> : <value>`, blocks are
separated by blank lines, a block's `Chip ID` may come first (common) or last (usages, temp...),
and a key seen twice inside one block starts a new block (some captures have no blank lines).
Typed results keep every raw key in `values`, so keys this code does not know are not lost.
Nothing here raises on bad input.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

_HEAD_KEYS = ("NPU ID", "Chip Count", "Total Count", "Card Count")
_MISSING = {"", "NA", "N/A", "-", "--"}
_ANNOTATION_RE = re.compile(r"\t+\s*#.*$")
_PROC_RE = re.compile(
    r"Process id:\s*(\d+)\s+Process name:(.*?)\s*Process memory\(MB\):\s*(\d+)", re.IGNORECASE
)


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    v = v.strip()
    if v in _MISSING:
        return None
    try:
        return int(v, 0) if v.lower().startswith("0x") else int(v)
    except ValueError:
        try:
            return int(float(v))
        except ValueError:
            return None


def _float(v: str | None) -> float | None:
    if v is None:
        return None
    v = v.strip()
    if v in _MISSING:
        return None
    try:
        return float(v)
    except ValueError:
        return None


def _str(v: str | None) -> str | None:
    if v is None:
        return None
    v = v.strip()
    return None if v in _MISSING else v


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
        return _int(self.values.get("Chip ID"))

    @property
    def chip_name(self) -> str | None:
        return _str(self.values.get("Chip Name"))


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
    result.npu_id = _int(kv.head.get("NPU ID"))
    result.chip_count = _int(kv.head.get("Chip Count"))
    result.warnings = list(kv.warnings)


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
    kv = parse_kv_output(text)
    res = UsagesResult()
    _head(kv, res)
    for b in kv.blocks:
        if not b.values:
            continue
        dvpp = {
            k[len("DVPP ") :].split(" ")[0]: _int(v)
            for k, v in b.values.items()
            if k.startswith("DVPP ")
        }
        res.chips.append(
            ChipUsages(
                chip_id=b.chip_id,
                ddr_capacity_mb=_int(b.get("DDR Capacity(MB)", "Memory Capacity(MB)")),
                ddr_usage_pct=_int(b.get("DDR Usage Rate(%)", "Memory Usage Rate(%)")),
                hbm_capacity_mb=_int(b.get("HBM Capacity(MB)")),
                hbm_usage_pct=_int(b.get("HBM Usage Rate(%)")),
                hugepages_total=_int(b.get("DDR Hugepages Total(page)", "Hugepages Total(page)")),
                hugepages_usage_pct=_int(
                    b.get("DDR Hugepages Usage Rate(%)", "Hugepages Usage Rate(%)")
                ),
                aicore_pct=_int(b.get("Aicore Usage Rate(%)")),
                aivector_pct=_int(b.get("Aivector Usage Rate(%)")),
                aicube_pct=_int(b.get("Aicube Usage Rate(%)")),
                aicpu_pct=_int(b.get("Aicpu Usage Rate(%)")),
                ctrlcpu_pct=_int(b.get("Ctrlcpu Usage Rate(%)")),
                vectorcore_pct=_int(b.get("Vectorcore Usage Rate(%)")),
                npu_util_pct=_int(b.get("NPU Utilization(%)")),
                ddr_bandwidth_pct=_int(
                    b.get("DDR Bandwidth Usage Rate(%)", "Memory Bandwidth Usage Rate(%)")
                ),
                hbm_bandwidth_pct=_int(b.get("HBM Bandwidth Usage Rate(%)")),
                dvpp_pct=dvpp,
                values=dict(b.values),
            )
        )
    return res


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
        temp_c=_float(_temp_of(b)),
        power_w=_float(_power_of(b)),
        values=dict(b.values),
    )


def parse_common(text: str) -> CommonResult:
    """`npu-smi info -t common -i N`."""
    kv = parse_kv_output(text)
    res = CommonResult()
    _head(kv, res)
    for b in kv.blocks:
        if b.chip_id is None:
            if b.values:
                res.others.append(_other(b))
            continue
        res.chips.append(
            ChipCommon(
                chip_id=b.chip_id,
                memory_usage_pct=_int(b.get("Memory Usage Rate(%)", "DDR Usage Rate(%)")),
                hbm_usage_pct=_int(b.get("HBM Usage Rate(%)")),
                aicore_pct=_int(b.get("Aicore Usage Rate(%)")),
                aicore_freq_mhz=_int(b.get("Aicore Freq(MHZ)", "Aicore Freq(MHz)")),
                aicore_cur_freq_mhz=_int(b.get("Aicore curFreq(MHZ)", "Aicore curFreq(MHz)")),
                aicore_count=_int(b.get("Aicore Count")),
                temp_c=_int(_temp_of(b)),
                power_w=_float(_power_of(b)),
                values=dict(b.values),
            )
        )
    return res


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
    kv = parse_kv_output(text)
    res = TempResult()
    _head(kv, res)
    for b in kv.blocks:
        if b.chip_id is None:
            if b.values:
                res.others.append(_other(b))
            continue
        res.chips.append(ChipReading(b.chip_id, _float(_temp_of(b)), dict(b.values)))
    return res


@dataclass
class PowerResult(_Chips):
    chips: list[ChipReading] = field(default_factory=list)  # value = watts
    others: list[BoardSensors] = field(default_factory=list)
    rated_w: float | None = None


def parse_power(text: str) -> PowerResult:
    """`npu-smi info -t power -i N`."""
    kv = parse_kv_output(text)
    res = PowerResult()
    _head(kv, res)
    for b in kv.blocks:
        rated = _float(b.get("Rated Power Dissipation(W)"))
        if rated is not None:
            res.rated_w = rated
        if b.chip_id is None:
            if b.values:
                res.others.append(_other(b))
            continue
        res.chips.append(ChipReading(b.chip_id, _float(_power_of(b)), dict(b.values)))
    return res


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
    kv = parse_kv_output(text)
    res = MemoryResult()
    _head(kv, res)
    for b in kv.blocks:
        if not b.values:
            continue
        res.chips.append(
            ChipMemory(
                chip_id=b.chip_id,
                ddr_capacity_mb=_int(
                    b.get("DDR Capacity(MB)", "Total DDR Capacity(MB)", "Memory Capacity(MB)")
                ),
                ddr_clock_mhz=_int(b.get("DDR Clock Speed(MHz)", "DDR Clock Speed(MHZ)")),
                hbm_capacity_mb=_int(b.get("HBM Capacity(MB)")),
                hbm_clock_mhz=_int(b.get("HBM Clock Speed(MHz)", "HBM Clock Speed(MHZ)")),
                hbm_temp_c=_int(b.get("HBM Temperature(C)")),
                hbm_manufacturer_id=_str(b.get("HBM Manufacturer ID")),
                values=dict(b.values),
            )
        )
    return res


@dataclass
class BoardInfo:
    """`info -t board -i N` (card level) or `... -c C` (chip level, chip_id set)."""

    npu_id: int | None = None
    chip_id: int | None = None
    product_name: str | None = None
    model: str | None = None
    manufacturer: str | None = None
    serial_number: str | None = None
    software_version: str | None = None
    firmware_version: str | None = None
    compatibility: str | None = None
    board_id: str | None = None
    pcb_id: str | None = None
    bom_id: str | None = None
    pcie_bus_info: str | None = None
    slot_id: int | None = None
    pci_vendor_id: str | None = None
    pci_device_id: str | None = None
    subsystem_vendor_id: str | None = None
    subsystem_device_id: str | None = None
    chip_count: int | None = None
    npu_name: str | None = None
    chip_type: str | None = None
    chip_name: str | None = None
    chip_version: str | None = None
    die_id: str | None = None  # 310P "Die ID"; 910 class has vdie_id / ndie_id
    vdie_id: str | None = None
    ndie_id: str | None = None
    values: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


_BOARD_FIELDS = {
    "Product Name": "product_name",
    "Model": "model",
    "Manufacturer": "manufacturer",
    "Serial Number": "serial_number",
    "Software Version": "software_version",
    "Firmware Version": "firmware_version",
    "Compatibility": "compatibility",
    "Board ID": "board_id",
    "PCB ID": "pcb_id",
    "BOM ID": "bom_id",
    "PCIe Bus Info": "pcie_bus_info",
    "PCI Vendor ID": "pci_vendor_id",
    "PCI Device ID": "pci_device_id",
    "Subsystem Vendor ID": "subsystem_vendor_id",
    "Subsystem Device ID": "subsystem_device_id",
    "NPU Name": "npu_name",
    "Chip Type": "chip_type",
    "Chip Name": "chip_name",
    "Chip Version": "chip_version",
    "Die ID": "die_id",
    "VDie ID": "vdie_id",
    "NDie ID": "ndie_id",
}


def parse_board(text: str) -> BoardInfo:
    kv = parse_kv_output(text)
    merged: dict[str, str] = dict(kv.head)
    for b in kv.blocks:
        for k, v in b.values.items():
            merged.setdefault(k, v)
    info = BoardInfo(values=merged, warnings=list(kv.warnings))
    info.npu_id = _int(merged.get("NPU ID"))
    info.chip_id = _int(merged.get("Chip ID"))
    info.chip_count = _int(merged.get("Chip Count"))
    info.slot_id = _int(merged.get("Slot ID"))
    for key, attr in _BOARD_FIELDS.items():
        setattr(info, attr, _str(merged.get(key)))
    return info


@dataclass
class HealthInfo:
    status: str | None = None  # OK, Warning, Alarm, Critical, UNKNOWN
    error_codes: list[str] = field(default_factory=list)  # hex codes as printed ("80E01801")
    error_info: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def parse_health(text: str) -> HealthInfo:
    """`npu-smi info -t health -i N [-c C]`."""
    kv = parse_kv_output(text)
    merged: dict[str, str] = dict(kv.head)
    for b in kv.blocks:
        for k, v in b.values.items():
            merged.setdefault(k, v)
    res = HealthInfo(values=merged, warnings=list(kv.warnings))
    res.status = _str(merged.get("Health Status", merged.get("Health")))
    codes = _str(merged.get("Error Code"))
    res.error_codes = codes.split() if codes else []
    info = _str(merged.get("Error Information"))
    res.error_info = [ln.strip() for ln in info.split("\n") if _str(ln)] if info else []
    if res.status is None:
        res.warnings.append("no Health Status key")
    return res


@dataclass
class ChipEcc:
    chip_id: int | None
    counts: dict[str, int | None]  # every key as printed -> count

    def total(self, memory: str = "HBM", bits: str = "Double") -> int | None:
        return self.counts.get(f"{memory} {bits} Bit Error Count")


@dataclass
class EccResult(_Chips):
    chips: list[ChipEcc] = field(default_factory=list)


def parse_ecc(text: str) -> EccResult:
    """`npu-smi info -t ecc -i N` (40-character key column)."""
    kv = parse_kv_output(text)
    res = EccResult()
    _head(kv, res)
    for b in kv.blocks:
        counts = {k: _int(v) for k, v in b.values.items() if k != "Chip ID"}
        if counts or b.chip_id is not None:
            res.chips.append(ChipEcc(b.chip_id, counts))
    return res


@dataclass
class ProcMem:
    pid: int
    name: str
    memory_mb: int


@dataclass
class ChipProcMem:
    chip_id: int | None
    processes: list[ProcMem]


@dataclass
class ProcMemResult(_Chips):
    chips: list[ChipProcMem] = field(default_factory=list)


def parse_proc_mem(text: str) -> ProcMemResult:
    """`npu-smi info -t proc-mem -i N`: per chip, `No process in device.` or process lines."""
    kv = parse_kv_output(text)
    res = ProcMemResult()
    _head(kv, res)
    for b in kv.blocks:
        procs = []
        for line in b.lines:
            m = _PROC_RE.search(line)
            if m:
                procs.append(ProcMem(int(m.group(1)), m.group(2).strip(), int(m.group(3))))
            elif "no process" not in line.lower() and "failed" not in line.lower():
                res.warnings.append(f"unrecognised proc-mem line: {line[:60]!r}")
        if procs or b.chip_id is not None:
            res.chips.append(ChipProcMem(b.chip_id, procs))
    return res


@dataclass
class NpuListEntry:
    npu_id: int
    chip_count: int | None
    product_name: str | None
    serial_number: str | None
    values: dict[str, str]


@dataclass
class NpuList:
    total_count: int | None = None  # "Total Count" (servers) or "Card Count" (310/310B)
    npus: list[NpuListEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def parse_list(text: str) -> NpuList:
    """`npu-smi info -l`."""
    kv = parse_kv_output(text)
    res = NpuList(warnings=list(kv.warnings))
    res.total_count = _int(kv.head.get("Total Count", kv.head.get("Card Count")))
    # the reader takes the first NPU ID into the head; -l repeats it per card
    blocks = list(kv.blocks)
    if "NPU ID" in kv.head:
        first = KvBlock(values={"NPU ID": kv.head["NPU ID"]})
        if "Chip Count" in kv.head:
            first.values["Chip Count"] = kv.head["Chip Count"]
        if blocks and "NPU ID" not in blocks[0].values:
            first.values.update(blocks.pop(0).values)
        blocks.insert(0, first)
    for b in blocks:
        npu_id = _int(b.values.get("NPU ID"))
        if npu_id is None:
            continue
        res.npus.append(
            NpuListEntry(
                npu_id=npu_id,
                chip_count=_int(b.values.get("Chip Count")),
                product_name=_str(b.values.get("Product Name")),
                serial_number=_str(b.values.get("Serial Number")),
                values=dict(b.values),
            )
        )
    if res.total_count is not None and res.total_count != len(res.npus):
        res.warnings.append(f"Total Count {res.total_count} but {len(res.npus)} NPU entries")
    return res


@dataclass
class ChipMapEntry:
    npu_id: int
    chip_id: int
    logic_id: int | None  # None for the MCU row ("-")
    phy_id: int | None  # A3 / 950 only
    chip_name: str
    is_mcu: bool


@dataclass
class ChipMap:
    entries: list[ChipMapEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def chips(self) -> list[ChipMapEntry]:
        return [e for e in self.entries if not e.is_mcu]


_COLS_RE = re.compile(r"\S+(?: \S+)*")


def parse_mapping(text: str) -> ChipMap:
    """`npu-smi info -m`: NPU ID / Chip ID / Chip Logic ID / [Chip Phy-ID] / Chip Name."""
    res = ChipMap()
    try:
        _read_mapping(text, res)
    except Exception as exc:  # noqa: BLE001
        res.warnings.append(f"internal parser error: {type(exc).__name__}: {exc}")
    return res


def _read_mapping(text: str, res: ChipMap) -> None:
    header: list[tuple[int, str]] | None = None
    for raw in str(text or "").replace("\r", "").split("\n"):
        line = raw.rstrip()
        if not line.strip():
            continue
        if header is None:
            if "NPU ID" in line and "Chip" in line:
                header = [(m.start(), m.group()) for m in _COLS_RE.finditer(line)]
            continue
        cols = [m.group() for m in _COLS_RE.finditer(line)]
        if len(cols) != len(header):
            # a value touching its neighbour: cut at the header's offsets instead
            bounds = [off for off, _ in header] + [len(line)]
            cols = [line[a:b].strip() for a, b in itertools.pairwise(bounds)]
        row = {name: value for (_, name), value in zip(header, cols)}
        npu_id = _int(row.get("NPU ID"))
        chip_id = _int(row.get("Chip ID"))
        if npu_id is None or chip_id is None:
            res.warnings.append(f"unreadable -m row: {line.strip()[:60]!r}")
            continue
        name = (row.get("Chip Name") or "").strip()
        logic = row.get("Chip Logic ID")
        res.entries.append(
            ChipMapEntry(
                npu_id=npu_id,
                chip_id=chip_id,
                logic_id=_int(logic),
                phy_id=_int(row.get("Chip Phy-ID")),
                chip_name=name,
                is_mcu=name.lower() == "mcu" or (logic or "").strip() == "-",
            )
        )
    if header is None:
        res.warnings.append("no `NPU ID ... Chip Name` header found")
