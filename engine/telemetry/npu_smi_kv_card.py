"""Parsers for npu-smi's key : value sub-commands, part 2: card and chip facts (`info -t board|
health|ecc|proc-mem`), the card list (`info -l`) and the chip map (`info -m`). The shared reader is
in `npu_smi_kv.py`. Nothing here raises on bad input.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from .npu_smi_kv import KvBlock, _Chips, _read_chips, parse_kv_output
from .smi_values import to_int, to_str

_PROC_RE = re.compile(
    r"Process id:\s*(\d+)\s+Process name:(.*?)\s*Process memory\(MB\):\s*(\d+)", re.IGNORECASE
)


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


def _merged(text: str) -> tuple[dict[str, str], list[str]]:
    """Card-level sub-commands print one record: the head and every block as one dict (the
    first of a repeated key wins), with the reader's warnings."""
    kv = parse_kv_output(text)
    merged: dict[str, str] = dict(kv.head)
    for b in kv.blocks:
        for k, v in b.values.items():
            merged.setdefault(k, v)
    return merged, list(kv.warnings)


def parse_board(text: str) -> BoardInfo:
    merged, warnings = _merged(text)
    info = BoardInfo(values=merged, warnings=warnings)
    info.npu_id = to_int(merged.get("NPU ID"))
    info.chip_id = to_int(merged.get("Chip ID"))
    info.chip_count = to_int(merged.get("Chip Count"))
    info.slot_id = to_int(merged.get("Slot ID"))
    for key, attr in _BOARD_FIELDS.items():
        setattr(info, attr, to_str(merged.get(key)))
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
    merged, warnings = _merged(text)
    res = HealthInfo(values=merged, warnings=warnings)
    res.status = to_str(merged.get("Health Status", merged.get("Health")))
    codes = to_str(merged.get("Error Code"))
    res.error_codes = codes.split() if codes else []
    info = to_str(merged.get("Error Information"))
    res.error_info = [ln.strip() for ln in info.split("\n") if to_str(ln)] if info else []
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
    return _read_chips(text, EccResult(), _ecc_chip)


def _ecc_chip(b: KvBlock, _res: EccResult) -> ChipEcc | None:
    counts = {k: to_int(v) for k, v in b.values.items() if k != "Chip ID"}
    return ChipEcc(b.chip_id, counts) if counts or b.chip_id is not None else None


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
    return _read_chips(text, ProcMemResult(), _proc_mem_chip)


def _proc_mem_chip(b: KvBlock, res: ProcMemResult) -> ChipProcMem | None:
    procs = []
    for line in b.lines:
        m = _PROC_RE.search(line)
        if m:
            procs.append(ProcMem(int(m.group(1)), m.group(2).strip(), int(m.group(3))))
        elif "no process" not in line.lower() and "failed" not in line.lower():
            res.warnings.append(f"unrecognised proc-mem line: {line[:60]!r}")
    return ChipProcMem(b.chip_id, procs) if procs or b.chip_id is not None else None


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
    res.total_count = to_int(kv.head.get("Total Count", kv.head.get("Card Count")))
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
        npu_id = to_int(b.values.get("NPU ID"))
        if npu_id is None:
            continue
        res.npus.append(
            NpuListEntry(
                npu_id=npu_id,
                chip_count=to_int(b.values.get("Chip Count")),
                product_name=to_str(b.values.get("Product Name")),
                serial_number=to_str(b.values.get("Serial Number")),
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
        npu_id = to_int(row.get("NPU ID"))
        chip_id = to_int(row.get("Chip ID"))
        if npu_id is None or chip_id is None:
            res.warnings.append(f"unreadable -m row: {line.strip()[:60]!r}")
            continue
        name = (row.get("Chip Name") or "").strip()
        logic = row.get("Chip Logic ID")
        res.entries.append(
            ChipMapEntry(
                npu_id=npu_id,
                chip_id=chip_id,
                logic_id=to_int(logic),
                phy_id=to_int(row.get("Chip Phy-ID")),
                chip_name=name,
                is_mcu=name.lower() == "mcu" or (logic or "").strip() == "-",
            )
        )
    if header is None:
        res.warnings.append("no `NPU ID ... Chip Name` header found")
