"""Engine state from a server's Prometheus /metrics: vLLM, vllm-ascend, MindIE and our own names.

vLLM prefixes `vllm:` (v0 named the KV gauge gpu_cache_usage_perc, v1 kv_cache_usage_perc,
vllm-ascend has used npu_cache_usage_perc); MindIE Service uses the same names without a prefix
and calls its KV gauge npu_cache_usage_perc (see its "service monitoring metrics" API page); we
export `npu_console:`. Values are summed over label sets (one per model or engine).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

PREFIXES = ("npu_console:", "vllm:", "")

RUNNING = ("num_requests_running",)
WAITING = ("num_requests_waiting",)
KV_USAGE = ("kv_cache_usage_perc", "gpu_cache_usage_perc", "npu_cache_usage_perc")
PROMPT_TOKENS = ("prompt_tokens_total",)
GENERATION_TOKENS = ("generation_tokens_total",)
SUCCESS = ("request_success_total",)
FAILED = ("request_failed_total",)
STEPS = ("engine_steps_total",)
PREFIX_HIT_RATE = ("prefix_cache_hit_rate", "gpu_prefix_cache_hit_rate")
PREFIX_HITS = ("prefix_cache_hits_total",)
PREFIX_QUERIES = ("prefix_cache_queries_total",)
PROMPT_TPS = ("avg_prompt_throughput_toks_per_s",)
GENERATION_TPS = ("avg_generation_throughput_toks_per_s",)
# latency histograms (their _bucket samples): vLLM v1 calls the inter-token one
# inter_token_latency_seconds, vLLM v0, MindIE and we time_per_output_token_seconds
TTFT = ("time_to_first_token_seconds",)
ITL = ("inter_token_latency_seconds", "time_per_output_token_seconds")

Buckets = tuple[tuple[float, float], ...]  # (upper bound "le", cumulative count), ascending


@dataclass(frozen=True)
class MetricsSnapshot:
    """What one scrape said; None where the server does not export the value."""

    time: float
    running: float | None
    waiting: float | None
    kv_usage: float | None  # 0..1
    kv_total_tokens: int | None
    prompt_tokens: float | None  # counters
    generation_tokens: float | None
    finished: float | None
    failed: float | None
    steps: float | None
    prefix_hit_rate: float | None
    prefix_hits: float | None
    prefix_queries: float | None
    prompt_tps: float | None  # gauges some servers export themselves
    generation_tps: float | None
    flavour: str  # "npu_console", "vllm", "mindie" or "unknown"
    ttft_buckets: Buckets = ()  # () when the server exports no such histogram
    itl_buckets: Buckets = ()


_WANTED = frozenset(p + n for p in PREFIXES for group in (
    RUNNING, WAITING, KV_USAGE, PROMPT_TOKENS, GENERATION_TOKENS, SUCCESS, FAILED, STEPS,
    PREFIX_HIT_RATE, PREFIX_HITS, PREFIX_QUERIES, PROMPT_TPS, GENERATION_TPS) for n in group) | \
    frozenset(p + n + "_bucket" for p in PREFIXES for n in TTFT + ITL)


def _relevant(text: str) -> str:
    """Only the sample lines read here: a server's /metrics runs to hundreds of lines
    (histograms, device gauges) and the fleet view scrapes every host each second, so the
    parser sees a few lines instead (the sample names are literal, comments are not needed)."""
    keep = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in _WANTED or name.endswith("cache_config_info"):
            keep.append(line)
    return "\n".join(keep) + "\n"


def _samples(text: str) -> tuple[dict[str, float], list[tuple[str, dict]],
                                  dict[str, dict[float, float]]]:
    """Sums per sample name, the labelled info samples, and each histogram's buckets (name ->
    le -> count, summed over the other labels: one per model)."""
    sums: dict[str, float] = {}
    labelled: list[tuple[str, dict]] = []
    buckets: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(_relevant(text)):
        for s in family.samples:
            if s.name.endswith("_bucket"):
                le = float(s.labels.get("le", "nan"))
                if not math.isnan(le):  # a bucket without its bound is not one
                    per = buckets.setdefault(s.name[:-len("_bucket")], {})
                    per[le] = per.get(le, 0.0) + float(s.value)
                continue
            sums[s.name] = sums.get(s.name, 0.0) + float(s.value)
            if s.name.endswith("cache_config_info"):
                labelled.append((s.name, dict(s.labels)))
    return sums, labelled, buckets


def _pick_buckets(buckets: dict[str, dict[float, float]], names: tuple[str, ...]) -> Buckets:
    for prefix in PREFIXES:
        for n in names:
            per = buckets.get(prefix + n)
            if per:
                return tuple(sorted(per.items()))
    return ()


def window_quantiles(new: Buckets, old: Buckets,
                     qs: tuple[float, ...] = (0.5, 0.99)) -> tuple[float | None, ...]:
    """Quantiles of what was observed between two scrapes of a histogram (as Prometheus's
    histogram_quantile over an increase): linear within the bucket the rank falls in, the
    highest finite bound when it falls in +Inf. None for each when nothing was observed (or
    the bucket layouts differ); a counter that went back (a restarted server) counts from 0."""
    none = tuple(None for _ in qs)
    if not new:
        return none
    before = dict(old)
    if old and ([le for le, _ in old] != [le for le, _ in new]
                or any(n < before[le] for le, n in new)):
        before = {}
    counts = [(le, n - before.get(le, 0.0)) for le, n in new]
    total = counts[-1][1]
    if total <= 0:
        return none
    finite = [le for le, _ in counts if le != float("inf")]
    out = []
    for q in qs:
        rank = q * total
        lo_bound, lo_count = 0.0, 0.0
        for le, n in counts:
            if n >= rank:
                if le == float("inf"):
                    out.append(finite[-1] if finite else None)
                elif n == lo_count:
                    out.append(le)
                else:
                    out.append(lo_bound + (le - lo_bound) * (rank - lo_count) / (n - lo_count))
                break
            lo_bound, lo_count = le, n
        else:
            out.append(None)
    return tuple(out)


def _pick(sums: dict[str, float], names: tuple[str, ...]) -> float | None:
    for prefix in PREFIXES:
        for n in names:
            v = sums.get(prefix + n)
            if v is not None:
                return v
    return None


def _kv_total(labelled: list[tuple[str, dict]]) -> int | None:
    # vLLM: vllm:cache_config_info{block_size="16", num_gpu_blocks="2048", ...} 1.0
    for _, labels in labelled:
        try:
            blocks = labels.get("num_gpu_blocks") or labels.get("num_npu_blocks")
            if blocks and labels.get("block_size") and blocks != "None":
                return int(blocks) * int(labels["block_size"])
        except ValueError:
            continue
    return None


def parse_metrics(text: str, now: float) -> MetricsSnapshot:
    sums, labelled, buckets = _samples(text)
    names = " ".join(sums)
    flavour = ("npu_console" if "npu_console:" in names else "vllm" if "vllm:" in names
               else "mindie" if "num_requests_running" in sums else "unknown")
    kv = _pick(sums, KV_USAGE)
    if kv is not None and kv > 1.0:  # some exporters give percent, not a fraction
        kv = kv / 100.0
    return MetricsSnapshot(
        time=now, running=_pick(sums, RUNNING), waiting=_pick(sums, WAITING), kv_usage=kv,
        kv_total_tokens=_kv_total(labelled), prompt_tokens=_pick(sums, PROMPT_TOKENS),
        generation_tokens=_pick(sums, GENERATION_TOKENS), finished=_pick(sums, SUCCESS),
        failed=_pick(sums, FAILED), steps=_pick(sums, STEPS),
        prefix_hit_rate=_pick(sums, PREFIX_HIT_RATE), prefix_hits=_pick(sums, PREFIX_HITS),
        prefix_queries=_pick(sums, PREFIX_QUERIES), prompt_tps=_pick(sums, PROMPT_TPS),
        generation_tps=_pick(sums, GENERATION_TPS), flavour=flavour,
        ttft_buckets=_pick_buckets(buckets, TTFT), itl_buckets=_pick_buckets(buckets, ITL))


def rate(new: float | None, old: float | None, dt: float) -> float | None:
    if new is None or old is None or dt <= 0:
        return None
    return max(0.0, (new - old) / dt)  # a counter that went back means the server restarted


@dataclass(frozen=True)
class EngineFigures:
    """The engine numbers two successive scrapes give (rates from the counters where the server
    exports no throughput gauge); None where the server does not say."""

    running: float | None
    waiting: float | None
    kv_used_tokens: int
    kv_total_tokens: int  # 0 when unknown; 10000 when only the fraction is known
    prompt_tps: float
    generation_tps: float
    prefix_hit_rate: float
    steps: int
    finished: float | None
    failed: float | None


def figures(snap: MetricsSnapshot, prev: MetricsSnapshot | None) -> EngineFigures:
    kv_used = kv_total = 0
    if snap.kv_total_tokens:
        kv_total = snap.kv_total_tokens
        kv_used = round((snap.kv_usage or 0.0) * kv_total)
    elif snap.kv_usage is not None:
        # only a fraction is known: report it on a 0..10000 scale so used / total is right
        kv_total, kv_used = 10000, round(snap.kv_usage * 10000)
    dt = snap.time - prev.time if prev is not None else 0.0
    prompt_tps = (snap.prompt_tps if snap.prompt_tps is not None else
                  rate(snap.prompt_tokens, prev.prompt_tokens if prev else None, dt)) or 0.0
    gen_tps = (snap.generation_tps if snap.generation_tps is not None else
               rate(snap.generation_tokens, prev.generation_tokens if prev else None, dt)) or 0.0
    prefix = 0.0
    if snap.prefix_hit_rate is not None:
        prefix = snap.prefix_hit_rate
    elif snap.prefix_hits is not None and snap.prefix_queries:
        prefix = snap.prefix_hits / snap.prefix_queries
    return EngineFigures(running=snap.running, waiting=snap.waiting, kv_used_tokens=kv_used,
                         kv_total_tokens=kv_total, prompt_tps=prompt_tps,
                         generation_tps=gen_tps, prefix_hit_rate=prefix,
                         steps=int(snap.steps or 0), finished=snap.finished, failed=snap.failed)


LATENCY_KEYS = ("engine:ttft_p50_ms", "engine:ttft_p99_ms", "engine:itl_p50_ms",
                "engine:itl_p99_ms")


class LatencyWindow:
    """TTFT / ITL p50 and p99 over the last `window_s` of a server's scrapes (the console's own
    engine panel uses the same 30 s window), from its latency histograms."""

    def __init__(self, window_s: float = 30.0):
        self.window_s = window_s
        self._scrapes: deque[MetricsSnapshot] = deque()

    def add(self, snap: MetricsSnapshot) -> dict[str, float | None]:
        """LATENCY_KEYS -> milliseconds (None: nothing observed in the window, or no
        histogram); the first scrape has no window yet."""
        self._scrapes.append(snap)
        # the base is the newest scrape at least window_s old (or the oldest one there is)
        while len(self._scrapes) > 2 and self._scrapes[1].time <= snap.time - self.window_s:
            self._scrapes.popleft()
        if len(self._scrapes) < 2:
            return dict.fromkeys(LATENCY_KEYS)
        base = self._scrapes[0]
        values = (window_quantiles(snap.ttft_buckets, base.ttft_buckets)
                  + window_quantiles(snap.itl_buckets, base.itl_buckets))
        return {k: None if v is None else 1000.0 * v
                for k, v in zip(LATENCY_KEYS, values, strict=True)}
