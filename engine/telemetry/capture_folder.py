"""A folder of saved npu-smi captures: `info` tables plus `info -t` sub-command outputs.

File names follow the fixtures corpus: `[<prefix>_]<command>[_<n>].txt` (or `.log`), e.g.
`910a_info_1.txt`, `910a_usages_1.txt`, `910a_health-c_1.txt`, or plainly `info.txt`,
`usages.txt`. `<command>` is `info` for a table, or one of `usages`, `board`, `board-c`,
`health`, `health-c`, `ecc` (`-c`: the output of one chip). Other files (`info-l`, `info-m`,
`topo`, `watch`, notes) are ignored. A sub-command capture applies to the tables with the same
prefix (one machine, or one product family in a corpus), to the card it prints as `NPU ID`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .npu_details import CAPTURE_COMMANDS, SubOutput

_COMMANDS = "|".join(sorted((re.escape(c) for c in ("info", *CAPTURE_COMMANDS)), key=len,
                            reverse=True))
_NAME_RE = re.compile(rf"^(?:(?P<prefix>.*?)_)?(?P<cmd>{_COMMANDS})(?:_(?P<n>\d+))?\.(?:txt|log)$")


@dataclass(frozen=True)
class CaptureFile:
    path: Path
    prefix: str
    command: str
    n: int


def classify(path: str | os.PathLike) -> CaptureFile | None:
    """The capture a file name stands for, or None for a file that is not one."""
    p = Path(path)
    m = _NAME_RE.match(p.name)
    if m is None:
        return None
    return CaptureFile(p, m.group("prefix") or "", m.group("cmd"), int(m.group("n") or 0))


@dataclass(frozen=True)
class CaptureFolder:
    path: Path
    tables: tuple[CaptureFile, ...]
    subcommands: tuple[CaptureFile, ...]

    def subcommands_for(self, table: CaptureFile) -> tuple[CaptureFile, ...]:
        return tuple(s for s in self.subcommands if s.prefix == table.prefix)

    def outputs_for(self, table: CaptureFile) -> tuple[list[SubOutput], list[str]]:
        """The sub-command captures of one table as SubOutputs (unreadable files: a warning)."""
        outputs, warnings = [], []
        for s in self.subcommands_for(table):
            try:
                text = s.path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                warnings.append(f"cannot read {s.path.name}: {exc.strerror or exc}")
                continue
            outputs.append(SubOutput(s.command, text, source=s.path.name))
        return outputs, warnings


def scan_folder(folder: str | os.PathLike) -> CaptureFolder:
    """Tables and sub-command captures in a folder (not recursive), in name order."""
    root = Path(folder)
    found = sorted(
        (c for c in (classify(p) for p in root.iterdir() if p.is_file()) if c is not None),
        key=lambda c: (c.prefix, c.command, c.n, c.path.name),
    )
    tables = tuple(c for c in found if c.command == "info")
    subs = tuple(c for c in found if c.command != "info")
    return CaptureFolder(root, tables, subs)


def folder_json(folder: str | os.PathLike) -> dict:
    """`npu-console smi --input DIR --json`: each table capture as `NpuSmiInfo.to_json()`, its
    chips with a `detail` object (or null) from the same-prefix sub-command captures."""
    from .npu_details import build_details, detail_json
    from .npu_smi_table import parse_npu_smi_info

    found = scan_folder(folder)
    captures = []
    for table in found.tables:
        try:
            text = table.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            captures.append({"file": table.path.name, "chips": [], "subcommand_files": [],
                             "warnings": [f"cannot read: {exc.strerror or exc}"]})
            continue
        info = parse_npu_smi_info(text)
        outputs, warnings = found.outputs_for(table)
        chips = [(c.npu_id, c.chip_id) for c in info.chips]
        details, more = build_details(outputs, chips)
        data = {"file": table.path.name, **info.to_json()}
        for chip in data["chips"]:
            chip["detail"] = detail_json(details.get(f"npu{chip['npu_id']}-{chip['chip_id']}"))
        data["subcommand_files"] = [o.source for o in outputs]
        data["warnings"] = list(info.warnings) + warnings + more
        captures.append(data)
    return {"folder": str(found.path), "captures": captures}
