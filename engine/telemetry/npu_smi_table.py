"""Parser for the `npu-smi info` table (device part + process table) and its error outputs.

The table exists in at least eight widths (80 to 116 columns) and several cell arrangements
(310 four-chip cards, 300I Duo, A3 dies, the 950 `NPU ID | Name` layout), so nothing here relies
on fixed offsets: rows are split on `|`, the column-header rows name the fields of each cell,
and the values of a cell are matched to those names in order (or by position when a value is
missing). Values printed `NA` or `-` become None. Damaged input gives a partial result plus
warnings, never an exception.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from .smi_values import to_float, to_int, to_str

_VERSION = r"\d+\.\d+(?:\.[A-Za-z0-9]+)*"
_TOOL_VERSION_RE = re.compile(r"npu-smi\s+(" + _VERSION + ")")
_DRIVER_VERSION_RE = re.compile(r"Version:\s*(" + _VERSION + ")")
_RET_RE = re.compile(r"\bret(?:\s+is|\s*=)\s*(-?\d+)", re.IGNORECASE)
_NO_PROC_RE = re.compile(r"No running processes found in NPU\s+(\d+)", re.IGNORECASE)
# a value token: "used / total" pairs (the used part may touch the slash) or one word
_TOKEN_RE = re.compile(r"[^\s/|]+\s*/\s*[^\s/|]+|\S+")
# header labels are separated by two or more spaces ("NPU Util(%)" has one inside)
_LABEL_RE = re.compile(r"\S+(?: \S+)*")


@dataclass(frozen=True)
class NpuSmiError:
    code: int
    message: str


@dataclass(frozen=True)
class NpuChip:
    npu_id: int
    chip_id: int
    device_id: int | None
    name: str
    health: str | None
    power_w: float | None
    temp_c: int | None
    hugepages_used: int | None
    hugepages_total: int | None
    bus_id: str | None
    aicore_pct: int | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    hbm_used_mb: int | None
    hbm_total_mb: int | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class NpuProcess:
    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mb: int | None
    container_pid: int | None = None

    def to_json(self) -> dict[str, Any]:
        # the JSON has always been without container_pid (smi --json, /v1/telemetry)
        out = dataclasses.asdict(self)
        del out["container_pid"]
        return out


@dataclass(frozen=True)
class NpuSmiInfo:
    tool_version: str | None = None
    driver_version: str | None = None
    chips: tuple[NpuChip, ...] = ()
    processes: tuple[NpuProcess, ...] = ()
    error: NpuSmiError | None = None
    warnings: tuple[str, ...] = ()
    width: int | None = None  # characters per table line, identifies the layout
    idle_npus: tuple[int, ...] = ()  # NPUs printed as "No running processes found"

    def to_json(self) -> dict[str, Any]:
        return {
            "tool_version": self.tool_version,
            "driver_version": self.driver_version,
            "chips": [c.to_json() for c in self.chips],
            "processes": [p.to_json() for p in self.processes],
            "error": (
                None
                if self.error is None
                else {"code": self.error.code, "message": self.error.message}
            ),
        }


# ----------------------------------------------------------------------------- value helpers


def _to_pair(text: str | None) -> tuple[int | None, int | None]:
    if text is None or "/" not in text:
        return None, None
    used, _, total = text.partition("/")
    return to_int(used), to_int(total)


# ----------------------------------------------------------------------------- row structure


def _cells(line: str) -> list[tuple[int, str]]:
    """Split a `|` row into (offset, text) cells; a missing closing bar (cut capture) is fine."""
    parts = line.split("|")
    if len(parts) < 2:
        return []
    if parts[-1] == "":
        parts.pop()  # closing bar
    out = []
    offset = len(parts[0]) + 1
    for text in parts[1:]:
        out.append((offset, text))
        offset += len(text) + 1
    return out


def _labels(offset: int, text: str) -> list[tuple[int, str]]:
    return [(offset + m.start(), m.group()) for m in _LABEL_RE.finditer(text)]


def _tokens(offset: int, text: str) -> list[tuple[int, str]]:
    return [(offset + m.start(), m.group()) for m in _TOKEN_RE.finditer(text)]


# a header label's field: the first row whose prefixes it starts with ("npu util" before "npu")
_CHIP_FIELDS = (
    (("npu util", "aicore", "ai core", "util"), "aicore"),
    (("npu",), "npu_id"),
    (("name",), "name"),
    (("chip",), "chip_id"),
    (("device", "phy", "logic"), "device_id"),
    (("health",), "health"),
    (("bus",), "bus_id"),
    (("power",), "power"),
    (("temp",), "temp"),
    (("hugepage",), "hugepages"),
    (("memory",), "memory"),
    (("hbm",), "hbm"),
)
_PROCESS_FIELDS = (
    (("process id",), "pid"),
    (("process name",), "name"),
    (("process memory",), "memory"),
    (("npu",), "npu_id"),
    (("chip",), "chip_id"),
)


def _lookup(label: str, table) -> str | None:
    low = label.lower()
    return next((field for prefixes, field in table if low.startswith(prefixes)), None)


def _field_of(label: str) -> str | None:
    return _lookup(label, _CHIP_FIELDS)


def _process_field_of(label: str) -> str | None:
    return "container_pid" if "container" in label.lower() else _lookup(label, _PROCESS_FIELDS)


# Header of one cell: the field names it holds, with their offsets.
_Header = list[list[tuple[int, str | None]]]


def _header_from_row(line: str, field_of) -> _Header:
    return [[(off, field_of(lab)) for off, lab in _labels(o, t)] for o, t in _cells(line)]


def _assign(header_cell: list[tuple[int, str | None]], offset: int, text: str) -> dict:
    """Match a cell's values to its header names: in order when the counts agree, else each
    value goes to the name printed nearest above it (a value left blank shifts nothing)."""
    out: dict[str, str] = {}
    words = _TOKEN_RE.findall(text)
    n = len(header_cell)
    if not n or not words:
        return out
    if len(words) == n:
        for (_, name), tok in zip(header_cell, words):
            if name:
                out[name] = tok
        return out
    if len(words) > n:
        # extra words: the last name takes the rest (a name with a space in it)
        for (_, name), tok in zip(header_cell[:-1], words):
            if name:
                out[name] = tok
        last = header_cell[-1][1]
        if last:
            out[last] = " ".join(words[n - 1 :])
        return out
    for off, tok in _tokens(offset, text):
        best = min(header_cell, key=lambda h: abs(h[0] - off))
        if best[1] and best[1] not in out:
            out[best[1]] = tok
    return out


def _row_values(header: _Header, line: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for i, (off, text) in enumerate(_cells(line)):
        if i >= len(header):
            break
        values.update(_assign(header[i], off, text))
    return values


def _default_device_header(line: str, row: int) -> _Header:
    """Used when a fragment has no column-header rows: the standard 3-cell arrangement,
    sized by how many values each cell of this row carries."""
    cells = _cells(line)
    header: _Header = []
    for i, (off, text) in enumerate(cells):
        toks = _tokens(off, text)
        if i == 0:
            names = ["npu_id", "name"] if row == 1 else ["chip_id", "device_id"]
        elif i == 1:
            names = ["health"] if row == 1 else ["bus_id"]
        elif i == 2:
            names = ["power", "temp", "hugepages"] if row == 1 else ["aicore", "memory", "hbm"]
        else:
            names = []
        header.append([(off, n) for (off, _), n in zip(toks, names)])
    return header


# ----------------------------------------------------------------------------- the parser


def _parse_error(lines: list[str]) -> NpuSmiError | None:
    for line in lines:
        m = _RET_RE.search(line)
        if m:
            return NpuSmiError(code=int(m.group(1)), message=line.strip())
    return None


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse one `npu-smi info` output. Never raises: unknown input gives warnings."""
    try:
        return _parse(text)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not take the poller down
        return NpuSmiInfo(warnings=(f"internal parser error: {type(exc).__name__}: {exc}",))


def _parse(text: str) -> NpuSmiInfo:
    if not isinstance(text, str):
        text = str(text or "")
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    warnings: list[str] = []
    tool_version = driver_version = None
    width = None
    chips: list[NpuChip] = []
    processes: list[NpuProcess] = []
    idle: list[int] = []
    other: list[str] = []

    dev_header: list[_Header] = []  # [row-1 header, row-2 header]
    proc_header: _Header | None = None
    section = "device"
    pending: list[str] = []  # the data rows of the chip being read
    expecting_header2 = False

    def flush_chip() -> None:
        if not pending:
            return
        rows = pending[:2]
        if len(pending) > 2:
            warnings.append(f"{len(pending)} rows between rules where 2 were expected")
        values: dict[str, str] = {}
        for n, row in enumerate(rows, start=1):
            header = dev_header[n - 1] if len(dev_header) >= n else None
            if header is None:
                header = _default_device_header(row, n)
                if not any(w.startswith("no column header") for w in warnings):
                    warnings.append("no column header: assumed the standard 3-cell layout")
            values.update(_row_values(header, row))
        pending.clear()
        if len(rows) < 2:
            warnings.append("chip row cut short: second row missing")
        npu_id = to_int(values.get("npu_id"))
        if npu_id is None:
            warnings.append(f"chip row without an NPU id skipped: {rows[0].strip()[:60]!r}")
            return
        chip_raw = values.get("chip_id")
        chip_id = to_int(chip_raw)
        if chip_id is None:
            # the 950 layout has no chip row: one chip per NPU
            chip_id = 0
        hp_used, hp_total = _to_pair(values.get("hugepages"))
        mem_used, mem_total = _to_pair(values.get("memory"))
        hbm_used, hbm_total = _to_pair(values.get("hbm"))
        chips.append(
            NpuChip(
                npu_id=npu_id,
                chip_id=chip_id,
                device_id=to_int(values.get("device_id")),
                name=(values.get("name") or "").strip(),
                health=to_str(values.get("health")),
                power_w=to_float(values.get("power")),
                temp_c=to_int(values.get("temp")),
                hugepages_used=hp_used,
                hugepages_total=hp_total,
                bus_id=to_str(values.get("bus_id")),
                aicore_pct=to_int(values.get("aicore")),
                memory_used_mb=mem_used,
                memory_total_mb=mem_total,
                hbm_used_mb=hbm_used,
                hbm_total_mb=hbm_total,
            )
        )

    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("+"):
            if width is None and set(stripped) <= set("+-=") and stripped.endswith("+"):
                width = len(stripped)
            expecting_header2 = False
            if section == "device":
                flush_chip()
            continue
        if not stripped.startswith("|"):
            if stripped.upper().startswith("[WARNING]") or stripped.upper().startswith("WARNING"):
                warnings.append(stripped)
            else:
                other.append(stripped)
            continue
        row = line[line.index("|") :]
        low = row.lower()
        if "npu-smi" in low and "version" in low:
            m = _TOOL_VERSION_RE.search(row)
            tool_version = m.group(1) if m else None
            m = _DRIVER_VERSION_RE.search(row)
            driver_version = m.group(1) if m else None
            continue
        if "process id" in low or "process name" in low:
            flush_chip()
            section = "process"
            proc_header = _header_from_row(row, _process_field_of)
            continue
        if section == "device":
            cell_texts = (
                [t.strip().lower() for _, t in _cells(row)]
                if "health" in low or (expecting_header2 and "bus" in low)
                else ()
            )
            if "health" in cell_texts:
                flush_chip()
                dev_header[:] = [_header_from_row(row, _field_of)]
                expecting_header2 = True
                continue
            if expecting_header2 and any(t.startswith("bus") for t in cell_texts):
                dev_header.append(_header_from_row(row, _field_of))
                expecting_header2 = False
                continue
            expecting_header2 = False
            if len(pending) >= 2:
                flush_chip()
            pending.append(row)
            continue
        # process table
        m = _NO_PROC_RE.search(row)
        if m:
            idle.append(int(m.group(1)))
            continue
        proc = _parse_process_row(row, proc_header, warnings)
        if proc is not None:
            processes.append(proc)

    if section == "device":
        flush_chip()

    error = None
    if not chips and not processes and not idle:
        error = _parse_error(other)
        if error is None and tool_version is None:
            if other:
                warnings.append(f"no npu-smi table found; first line: {other[0][:80]!r}")
            else:
                warnings.append("no npu-smi table found (empty output)")
    elif other:
        warnings.append(f"{len(other)} unrecognised line(s), first: {other[0][:80]!r}")

    return NpuSmiInfo(
        tool_version=tool_version,
        driver_version=driver_version,
        chips=tuple(chips),
        processes=tuple(processes),
        error=error,
        warnings=tuple(warnings),
        width=width,
        idle_npus=tuple(idle),
    )


def _parse_process_row(row: str, header: _Header | None, warnings: list[str]) -> NpuProcess | None:
    cells = _cells(row)
    if header is None:
        warnings.append("process row without a process-table header skipped")
        return None
    values: dict[str, str] = {}
    for i, (off, text) in enumerate(cells):
        if i >= len(header):
            break
        names = [n for _, n in header[i]]
        if len(names) == 1 and names[0] is not None:
            # a one-field cell is taken whole: process names can be empty or contain spaces
            values[names[0]] = text.strip()
        else:
            values.update(_assign(header[i], off, text))
    npu_id = to_int(values.get("npu_id"))
    pid = to_int(values.get("pid"))
    if npu_id is None or pid is None:
        warnings.append(f"unreadable process row skipped: {row.strip()[:60]!r}")
        return None
    chip_id = to_int(values.get("chip_id"))
    return NpuProcess(
        npu_id=npu_id,
        chip_id=0 if chip_id is None else chip_id,
        pid=pid,
        name=values.get("name", "").strip(),
        memory_mb=to_int(values.get("memory")),
        container_pid=to_int(values.get("container_pid")),
    )


__all__ = ["NpuChip", "NpuProcess", "NpuSmiError", "NpuSmiInfo", "parse_npu_smi_info"]
