"""Per-chip details from npu-smi's `info -t` sub-commands, for live calls and saved captures alike.

A `SubOutput` is one sub-command's text (or its failure) with the card / chip it was asked for;
`build_details` parses a batch of them with the npu_smi_kv parsers and files each value under
the chip it belongs to (`npu<npu>-<chip>`, the table's device keys), as a `ChipDetail`.
Card-level outputs (`-t board`, `-t health` without `-c`) apply to every chip of the card.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .npu_health import explain_codes, explain_status
from .npu_smi_kv import parse_kv_output, parse_usages
from .npu_smi_kv_card import parse_board, parse_ecc, parse_health
from .smi_values import to_int
from .types import ChipDetail, DeviceSnapshot

# what the live provider runs: per card, except health (per chip, `-c`)
LIVE_COMMANDS = ("usages", "board", "ecc", "health-c")
# what a capture folder may hold besides the table (file names: README of the fixtures)
CAPTURE_COMMANDS = ("usages", "board", "board-c", "health", "health-c", "ecc")


@dataclass(frozen=True)
class SubOutput:
    command: str  # one of CAPTURE_COMMANDS; "-c" = asked for one chip
    text: str | None  # what it printed (live: the last good answer), None if nothing yet
    npu_id: int | None = None  # the `-i` asked for; None: read `NPU ID` from the text
    chip_id: int | None = None  # the `-c` asked for
    source: str = ""  # "npu-smi info -t usages -i 0" or a capture file name
    error: str | None = None  # why the last call failed ("timed out after 5 s"), if it did


def argv_for(command: str, npu_id: int, chip_id: int | None = None) -> list[str]:
    """npu-smi arguments for one sub-command (`health-c` -> `info -t health -i N -c C`)."""
    argv = ["info", "-t", command.removesuffix("-c"), "-i", str(npu_id)]
    if command.endswith("-c"):
        argv += ["-c", str(0 if chip_id is None else chip_id)]
    return argv


def _pct(v: int | None) -> float | None:
    return None if v is None else float(v)


class _Acc:
    """Fields collected for the chips of one table."""

    def __init__(self, chips: Sequence[tuple[int, int]]):
        self.chips = list(chips)
        self.fields: dict[tuple[int, int], dict] = {c: {} for c in self.chips}
        self.sources: dict[tuple[int, int], list[str]] = {c: [] for c in self.chips}
        self.errors: dict[tuple[int, int], list[str]] = {c: [] for c in self.chips}
        self.warnings: list[str] = []

    def chips_of(self, npu: int) -> list[tuple[int, int]]:
        return [c for c in self.chips if c[0] == npu]

    def target(self, npu: int, chip: int | None) -> tuple[int, int] | None:
        if chip is None:
            own = self.chips_of(npu)
            return own[0] if own else None
        return (npu, chip) if (npu, chip) in self.fields else None

    def put(self, key: tuple[int, int] | None, source: str, **values) -> None:
        if key is None:
            return
        got = {k: v for k, v in values.items() if v is not None and v != ()}
        for k, v in got.items():
            self.fields[key].setdefault(k, v)  # the first answer for a chip wins
        if got and source not in self.sources[key]:
            self.sources[key].append(source)


def build_details(
    outputs: Iterable[SubOutput],
    chips: Sequence[tuple[int, int]],
    updated_at: float | None = None,
) -> tuple[dict[str, ChipDetail], list[str]]:
    """({device key: ChipDetail}, warnings) for the table's chips [(npu_id, chip_id)]."""
    acc = _Acc(chips)
    for out in outputs:
        npu = _npu_of(out, acc)
        if npu is None or not acc.chips_of(npu):
            acc.warnings.append(f"{out.source}: NPU {npu} is not in the table")
            continue
        card = out.command in ("board", "health", "usages", "ecc")
        if out.error:
            for key in acc.chips_of(npu) if card else [acc.target(npu, out.chip_id)]:
                if key is not None:
                    acc.errors[key].append(f"{out.source}: {out.error}")
        if out.text:
            _READERS[out.command](acc, out, npu)
    details = {}
    for key in acc.chips:
        fields, errors = acc.fields[key], acc.errors[key]
        if not fields and not errors:
            continue
        status = fields.get("health_status")
        details[f"npu{key[0]}-{key[1]}"] = ChipDetail(
            updated_at=updated_at,
            health_meaning=explain_status(status),
            sources=tuple(acc.sources[key]),
            errors=tuple(errors),
            **fields,
        )
    return details, acc.warnings


def _npu_of(out: SubOutput, acc: _Acc) -> int | None:
    printed = to_int(parse_kv_output(out.text).head.get("NPU ID")) if out.text else None
    npu = printed if printed is not None else out.npu_id
    if npu is None:  # a trimmed capture without `NPU ID`: the table's first card
        npu = acc.chips[0][0] if acc.chips else None
        if npu is not None:
            acc.warnings.append(f"{out.source}: no NPU ID printed, taken as NPU {npu}")
    return npu


def _read_usages(acc: _Acc, out: SubOutput, npu: int) -> None:
    for c in parse_usages(out.text).chips:
        key = acc.target(npu, c.chip_id if c.chip_id is not None else out.chip_id)
        acc.put(
            key,
            out.source,
            hbm_bandwidth_pct=_pct(c.hbm_bandwidth_pct),
            ddr_bandwidth_pct=_pct(c.ddr_bandwidth_pct),
            aicpu_pct=_pct(c.aicpu_pct),
            ctrlcpu_pct=_pct(c.ctrlcpu_pct),
            aivector_pct=_pct(c.aivector_pct),
            aicube_pct=_pct(c.aicube_pct),
            npu_util_pct=_pct(c.npu_util_pct),
        )


def _read_ecc(acc: _Acc, out: SubOutput, npu: int) -> None:
    for c in parse_ecc(out.text).chips:
        key = acc.target(npu, c.chip_id if c.chip_id is not None else out.chip_id)
        acc.put(key, out.source, ecc=tuple(c.counts.items()))


def _read_board(acc: _Acc, out: SubOutput, npu: int) -> None:
    b = parse_board(out.text)
    if out.command == "board-c":
        key = acc.target(npu, b.chip_id if b.chip_id is not None else out.chip_id)
        acc.put(key, out.source, chip_version=b.chip_version, firmware_version=b.firmware_version)
        return
    for key in acc.chips_of(npu):
        acc.put(
            key,
            out.source,
            product_name=b.product_name,
            serial_number=b.serial_number,
            firmware_version=b.firmware_version,
            software_version=b.software_version,
        )


def _read_health(acc: _Acc, out: SubOutput, npu: int) -> None:
    h = parse_health(out.text)
    keys = [acc.target(npu, out.chip_id)] if out.command == "health-c" else acc.chips_of(npu)
    for key in keys:
        acc.put(
            key,
            out.source,
            health_status=h.status,
            error_codes=tuple(h.error_codes),
            error_info=tuple(h.error_info),
        )


_READERS = {
    "usages": _read_usages,
    "ecc": _read_ecc,
    "board": _read_board,
    "board-c": _read_board,
    "health": _read_health,
    "health-c": _read_health,
}


def attach_details(
    devices: Sequence[DeviceSnapshot], details: dict[str, ChipDetail]
) -> tuple[DeviceSnapshot, ...]:
    """The devices with their `detail` filled in where one is known."""
    if not details:
        return tuple(devices)
    return tuple(
        dataclasses.replace(d, detail=details[d.key]) if d.key in details else d for d in devices
    )


def table_chips(devices: Iterable[DeviceSnapshot]) -> tuple[tuple[int, int], ...]:
    return tuple(
        (d.npu_id, d.chip_id)
        for d in devices
        if d.kind == "npu" and d.npu_id is not None and d.chip_id is not None
    )


def detail_json(detail: ChipDetail | None) -> dict | None:
    """A ChipDetail as JSON: ECC counters as an object, each error code with npu-smi's text."""
    if detail is None:
        return None
    data = dataclasses.asdict(detail)
    data["ecc"] = dict(detail.ecc)
    data["error_codes_explained"] = [
        {"code": code, "text": text}
        for code, text in explain_codes(detail.error_codes, detail.error_info)
    ]
    return data
