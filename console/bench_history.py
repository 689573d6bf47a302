"""The Benchmark page's model, free of Qt: the results history (console/bench_store.py's
JSON file), the record on show, and what the page displays of a record (table rows, series and
summary text). It announces its changes; the page subscribes and draws."""

from __future__ import annotations

from .bench_store import (
    BenchRecord,
    BenchStore,
    offline_record,
    serving_record,
)
from .events import Emitter

LATENCIES = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2EL", "e2el_ms"))
OFFLINE_HEADERS = ["Batch", "Output tok/s", "Decode tok/s", "TTFT ms", "TPOT ms", "Peak memory",
                   "Roofline %"]
SERVING_HEADERS = ["Latency (ms)", "mean", "p50", "p90", "p99"]


def fmt(v, spec=".1f", unit="") -> str:
    return "—" if v is None else f"{format(v, spec)}{unit}"


class BenchHistory:
    """Past runs, newest first, and the one on show. Announces on `events`
    (console.events.Emitter), on the thread that changed it: "records" with the list whenever
    the history is read or grows, "current" with the record put on show."""

    def __init__(self, store: BenchStore | None = None):
        self.store = store or BenchStore()
        self.records: list[BenchRecord] = []
        self.current: BenchRecord | None = None
        self.events = Emitter()

    def reload(self) -> list[BenchRecord]:
        self.records = self.store.load()
        self.events.emit("records", self.records)
        return self.records

    def add(self, rec: BenchRecord) -> None:
        """A finished run: kept, and put on show."""
        self.store.add(rec)
        self.reload()
        self.show(rec)

    def show(self, rec: BenchRecord) -> None:
        self.current = rec
        self.events.emit("current", rec)

    def pick(self, row: int) -> None:
        """The history's row `row` on show (a row past the end is ignored)."""
        if 0 <= row < len(self.records):
            self.show(self.records[row])


# The runs themselves, as job functions (console/jobs.py: `work(report)` on the job's thread).
# engine.bench imports (numpy, httpx, torch on first use) happen there, not on the GUI thread.

def offline_work(opts: dict, name: str):
    """A sweep over a loaded model: its BenchRecord, or None when cancelled before a batch."""
    def work(report):
        from ..engine.bench import OfflineConfig, run_offline_sweep

        res = run_offline_sweep(OfflineConfig(**opts),
                                progress=lambda p: report(p.fraction, p.message),
                                cancel=report.cancel)
        res.model["name"] = name
        return None if not res.batches and res.cancelled else offline_record(res)
    return work


def serving_work(opts: dict, slo: dict):
    """A serving run against an OpenAI endpoint: its BenchRecord, or None when cancelled."""
    def work(report):
        from ..engine.bench import SLO, ServingConfig, run_serving_benchmark

        res = run_serving_benchmark(ServingConfig(**opts, slo=SLO(**slo)),
                                    progress=lambda p: report(p.fraction, p.message),
                                    cancel=report.cancel)
        return None if not res.requests and res.cancelled else serving_record(res)
    return work


def offline_options(model_path: str | None, batch_sizes: tuple[int, ...], input_len: int,
                    output_len: int) -> dict:
    """The sweep's options (engine.bench.OfflineConfig); ValueError (one line) when the form
    cannot run yet."""
    if not model_path:
        raise ValueError("Load a model first (Models page): the sweep benchmarks a loaded "
                         "model.")
    if not batch_sizes:
        raise ValueError("Tick at least one batch size.")
    return {"model": model_path, "batch_sizes": batch_sizes, "input_len": input_len,
            "output_len": output_len, "num_threads": 1}


# the sweep's tokens/s lines: (legend, batch field, theme series colour, dashed)
OFFLINE_SERIES = (("output tok/s", "output_tokens_per_s", 0, False),
                  ("decode tok/s", "decode_tokens_per_s", 1, False),
                  ("bandwidth limit", "roofline_tokens_per_s", 3, True))


def offline_points(doc: dict) -> tuple[list[str], list[tuple], list[tuple[int, float]]]:
    """What the sweep's plots draw, batches at evenly spaced positions: the batch-size tick
    labels, each tokens/s series as (legend, colour, dashed, [(position, value)]) and the TTFT
    points. A batch without a value is left out of that line; a line without points is not
    drawn."""
    batches = doc.get("batches", [])
    series = []
    for name, key, color, dashed in OFFLINE_SERIES:
        pts = [(p, b[key]) for p, b in enumerate(batches) if b.get(key) is not None]
        if pts:
            series.append((name, color, dashed, pts))
    ttft = [(p, b["ttft_ms_mean"]) for p, b in enumerate(batches)
            if b.get("ttft_ms_mean") is not None]
    return [str(b["batch_size"]) for b in batches], series, ttft


def offline_rows(doc: dict) -> list[list[str]]:
    return [[str(b["batch_size"]), fmt(b.get("output_tokens_per_s")),
             fmt(b.get("decode_tokens_per_s")), fmt(b.get("ttft_ms_mean")),
             fmt(b.get("tpot_ms_mean"), ".2f"),
             fmt(b["peak_memory_bytes"] / 2**20 if b.get("peak_memory_bytes") else None,
                 ".0f", " MiB"),
             fmt(b["bandwidth_share"] * 100 if b.get("bandwidth_share") is not None
                 else None, ".0f", "%")] for b in doc.get("batches", [])]


def serving_bars(doc: dict) -> tuple[list[str], list[float]]:
    """(label, value) of each latency percentile the run measured, for the bar chart."""
    m = doc.get("metrics", {})
    labels, values = [], []
    for name, key in LATENCIES:
        d = m.get(key) or {}
        for stat in ("p50", "p90", "p99"):
            if d.get(stat) is not None:
                labels.append(f"{name} {stat}")
                values.append(d[stat])
    return labels, values


def serving_rows(doc: dict) -> list[list[str]]:
    m = doc.get("metrics", {})
    return [[name] + [fmt((m.get(key) or {}).get(s), ".1f") for s in ("mean", "p50", "p90", "p99")]
            for name, key in LATENCIES]


def serving_summary(doc: dict) -> str:
    m = doc.get("metrics", {})
    good = m.get("request_goodput")
    return (f"<b>{m.get('completed', 0)}</b> requests ok, {m.get('failed', 0)} failed in "
            f"{fmt(m.get('duration_s'), '.1f')} s · throughput <b>"
            f"{fmt(m.get('output_throughput'))} tok/s</b>, {fmt(m.get('request_throughput'), '.2f')}"
            f" req/s · goodput "
            + (f"<b>{good:.2f} req/s</b> ({m.get('good_requests')} met the SLO)"
               if good is not None else "off (no SLO)")
            + f" · peak concurrency {m.get('max_concurrency_seen', 0)}")


def roofline_text(doc: dict) -> str:
    """Decode rate against what the device's memory bandwidth allows for this model."""
    bw = doc.get("bandwidth")
    batches = [b for b in doc.get("batches", []) if b.get("bandwidth_share") is not None]
    if not bw or not batches:
        return "No memory-bandwidth figure for this device: the roofline share is not shown."
    b1 = batches[0]
    best = max(batches, key=lambda b: b["bandwidth_share"])
    return (f"Decode at batch {b1['batch_size']}: <b>{b1['decode_tokens_per_s']:.1f} tok/s = "
            f"{100 * b1['bandwidth_share']:.0f}%</b> of the memory-bandwidth limit "
            f"({b1['roofline_tokens_per_s']:.1f} tok/s at {bw['gbps']:.1f} GB/s, {bw['source']})"
            f"; best {100 * best['bandwidth_share']:.0f}% at batch {best['batch_size']}.")
