"""Benchmark results history (JSON under the state dir) and exports; no Qt here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..engine.atomic_files import atomic_write_json, check_runs_history, load_json
from ..engine.typed_records import check_fields

HISTORY_LIMIT = 50


@dataclass
class BenchRecord:
    kind: str  # "offline" or "serving"
    created: str
    title: str  # one line for the history table
    document: dict  # the engine result's to_dict()
    rows: list[dict]  # the CSV table

    def to_dict(self) -> dict:
        return {"kind": self.kind, "created": self.created, "title": self.title,
                "document": self.document, "rows": self.rows}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def offline_record(result) -> BenchRecord:
    from dataclasses import asdict

    rows = [{"model": result.model.get("name"), "input_len": result.settings.get("input_len"),
             "output_len": result.settings.get("output_len"), **asdict(b)}
            for b in result.batches]
    best = max((b.output_tokens_per_s for b in result.batches), default=0.0)
    title = (f"{result.model.get('name')} · batch "
             f"{','.join(str(b.batch_size) for b in result.batches) or '—'} · "
             f"best {best:.1f} tok/s" + (" · stopped" if result.cancelled else ""))
    return BenchRecord("offline", now(), title, result.to_dict(), rows)


def serving_record(result) -> BenchRecord:
    m = result.metrics
    s = result.settings
    load = f"c={s.get('concurrency')}" if s.get("concurrency") else (
        f"{s.get('rate')} req/s" if s.get("rate") else "all at once")
    title = (f"{s.get('model')} @ {s.get('base_url')} · {load} · "
             f"{m.output_throughput:.1f} tok/s" + (" · stopped" if result.cancelled else ""))
    doc = result.to_dict()
    return BenchRecord("serving", now(), title, doc, [result.summary_row()])


def _record(d) -> BenchRecord:
    if not isinstance(d, dict):
        raise TypeError("a run is not an object")
    rec = check_fields(BenchRecord(**d))
    if not all(isinstance(row, dict) for row in rec.rows):
        raise TypeError("a run's rows are not objects")
    return rec


def _check(data) -> None:
    """The whole file or nothing: one bad run sets the file aside (kept, reported)."""
    check_runs_history(data)
    for d in data.get("runs", []):
        _record(d)


class BenchStore:
    def __init__(self, path: str | Path | None = None):
        if path is None:
            from ..engine.paths import state_dir

            path = state_dir() / "bench_runs.json"
        self.path = Path(path)

    def load(self) -> list[BenchRecord]:
        # a damaged history is kept aside as bench_runs.json.corrupt-<time> and reported
        data = load_json(self.path, {}, check=_check)
        return [_record(d) for d in data.get("runs", [])]

    def add(self, rec: BenchRecord) -> list[BenchRecord]:
        runs = ([rec] + self.load())[:HISTORY_LIMIT]
        atomic_write_json(self.path, {"runs": [r.to_dict() for r in runs]}, default=str)
        return runs


def export_csv(rec: BenchRecord, path: str | Path) -> Path:
    import csv

    path = Path(path)
    fields: list[str] = []
    for row in rec.rows:
        fields.extend(k for k in row if k not in fields)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields or ["empty"])
        w.writeheader()
        for row in rec.rows:
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return path


def export_json(rec: BenchRecord, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(rec.document, indent=2, default=str) + "\n", encoding="utf-8")
    return path
