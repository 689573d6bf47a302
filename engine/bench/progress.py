"""Progress reports and result files shared by the offline and serving benchmarks."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Progress:
    """One progress report: `fraction` in 0..1 and a short line for a status bar."""

    fraction: float
    message: str
    done: int = 0
    total: int = 0
    failed: int = 0


ProgressFn = Callable[[Progress], None]


class BenchError(Exception):
    """A benchmark that cannot run; the message is one plain sentence."""


def _clean(obj: Any) -> Any:
    """JSON without NaN/inf (not valid JSON): they become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_outputs(prefix: str | Path, document: dict, tables: dict[str, list[dict]]) -> list[Path]:
    """PREFIX.json with everything, and one CSV per table: PREFIX.csv for the "" table,
    PREFIX_<name>.csv for the others."""
    prefix = Path(prefix)
    if prefix.parent and not prefix.parent.exists():
        prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    jpath = prefix.with_name(prefix.name + ".json")
    jpath.write_text(json.dumps(_clean(document), indent=2, default=str) + "\n", encoding="utf-8")
    paths.append(jpath)
    for name, rows in tables.items():
        cpath = prefix.with_name(prefix.name + (f"_{name}" if name else "") + ".csv")
        fields: list[str] = []
        for row in rows:
            fields.extend(k for k in row if k not in fields)
        with cpath.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=fields or ["empty"])
            w.writeheader()
            for row in rows:
                w.writerow({k: ("" if v is None else v) for k, v in _clean(row).items()})
        paths.append(cpath)
    return paths
