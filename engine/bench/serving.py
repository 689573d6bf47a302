"""Serving benchmark: a load generator for any OpenAI-compatible endpoint (ours, vLLM,
vllm-ascend, MindIE's OpenAI route).

Requests stream from /v1/completions (or /v1/chat/completions) with usage in the last chunk, so
output lengths are the server's own counts. They leave either all at once behind a concurrency
limit, or at seeded Poisson / gamma arrival times (see arrivals.py). Metrics follow vLLM's
definitions (see stats.py). `ignore_eos` is sent so every answer has the asked length; a server
that rejects the field is detected by the probe request and the run goes on without it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import httpx

from ..remote.sse import (
    chunk_reasoning,
    chunk_text,
    error_message,
    reasoning_tokens,
    sse_events,
)
from ..remote.urls import normalize_base_url
from .arrivals import send_offsets
from .progress import BenchError, Progress, ProgressFn, write_outputs
from .prompts import (
    BenchPrompt,
    DatasetError,
    load_dataset,
    random_token_prompts,
    random_word_prompts,
    random_word_text,
)
from .stats import SLO, RequestRecord, ServingMetrics, compute_metrics

PROBE_WORDS = 64


@dataclass
class ServingConfig:
    base_url: str
    model: str | None = None  # None: the first model the server lists
    api_key: str | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    num_prompts: int = 100
    concurrency: int | None = None  # most requests in flight; None = no limit
    rate: float | None = None  # requests/s; None = all at once
    burstiness: float = 1.0
    input_len: int = 128
    output_len: int = 128
    dataset: str | None = None  # .txt or .jsonl file instead of random prompts
    tokenizer: str | None = None  # local tokenizer folder for exact random prompt lengths
    seed: int = 0
    slo: SLO = field(default_factory=SLO)
    ignore_eos: bool = True
    temperature: float = 0.0
    timeout_s: float = 600.0

    def check(self) -> None:
        if self.num_prompts < 1:
            raise BenchError(f"--num-prompts must be at least 1, got {self.num_prompts}")
        if self.concurrency is not None and self.concurrency < 1:
            raise BenchError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.rate is not None and not self.rate > 0:
            raise BenchError(f"--rate must be positive, got {self.rate}")
        if self.burstiness <= 0:
            raise BenchError(f"--burstiness must be positive, got {self.burstiness}")
        if self.input_len < 1 or self.output_len < 1:
            raise BenchError("--input-len and --output-len must be at least 1")
        if not self.base_url.startswith(("http://", "https://")):
            raise BenchError(f"--base-url must start with http:// or https://, got "
                             f"{self.base_url!r}")


@dataclass
class ServingResult:
    settings: dict
    hardware: dict
    server: dict  # what /v1/models said about the model (empty if it said nothing)
    metrics: ServingMetrics
    requests: list[RequestRecord]
    started_at: str
    cancelled: bool
    notes: list[str]

    def to_dict(self) -> dict:
        return {"kind": "serving", "started_at": self.started_at, "cancelled": self.cancelled,
                "settings": self.settings, "hardware": self.hardware, "server": self.server,
                "metrics": asdict(self.metrics), "notes": self.notes,
                "requests": [asdict(r) | {"tpot_s": r.tpot_s} for r in self.requests]}

    def summary_row(self) -> dict:
        m = self.metrics
        row = {"started_at": self.started_at, "model": self.settings.get("model"),
               "base_url": self.settings.get("base_url"),
               "concurrency": self.settings.get("concurrency"),
               "rate": self.settings.get("rate"), "num_prompts": self.settings.get("num_prompts"),
               "completed": m.completed, "failed": m.failed, "duration_s": m.duration_s,
               "request_throughput": m.request_throughput,
               "output_throughput": m.output_throughput,
               "total_token_throughput": m.total_token_throughput,
               "request_goodput": m.request_goodput}
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "first_answer_ms"):
            d = getattr(m, name)
            for stat in ("mean", "p50", "p90", "p99"):
                row[f"{stat}_{name}"] = getattr(d, stat)
        return row

    def write(self, prefix: str) -> list:
        rows = []
        for r in self.requests:
            rows.append({"index": r.index, "success": r.success, "request_id": r.request_id,
                         "start_s": r.start_s, "prompt_tokens": r.prompt_len,
                         "output_tokens": r.output_tokens, "ttft_ms": _ms(r.ttft_s),
                         "first_answer_ms": _ms(r.first_answer_s),
                         "reasoning_tokens": r.reasoning_tokens,
                         "tpot_ms": _ms(r.tpot_s), "e2el_ms": _ms(r.e2el_s),
                         "finish_reason": r.finish_reason, "error": r.error})
        return write_outputs(prefix, self.to_dict(), {"": [self.summary_row()],
                                                      "requests": rows})

    def summary_text(self) -> str:
        m = self.metrics
        lines = [
            "============ Serving benchmark ============",
            f"{'Model:':<36}{self.settings.get('model')}",
            f"{'Successful requests:':<36}{m.completed}",
            f"{'Failed requests:':<36}{m.failed}",
            f"{'Benchmark duration (s):':<36}{m.duration_s:.2f}",
            f"{'Total input tokens:':<36}{m.total_input_tokens}",
            f"{'Total generated tokens:':<36}{m.total_output_tokens}",
            f"{'Request throughput (req/s):':<36}{m.request_throughput:.2f}",
            f"{'Output token throughput (tok/s):':<36}{m.output_throughput:.2f}",
            f"{'Total token throughput (tok/s):':<36}{m.total_token_throughput:.2f}",
            f"{'Peak concurrent requests:':<36}{m.max_concurrency_seen}",
        ]
        if m.request_goodput is not None:
            lines.append(f"{'Request goodput (req/s):':<36}{m.request_goodput:.2f}"
                         f"  ({m.good_requests} met the SLOs)")
        for title, name in (("Time to first token", "ttft_ms"),
                            ("Time per output token (excl. 1st)", "tpot_ms"),
                            ("Inter-token latency", "itl_ms"), ("End-to-end latency", "e2el_ms"),
                            ("Time to first answer token (after reasoning)", "first_answer_ms")):
            d = getattr(m, name)
            if name == "first_answer_ms" and d.count == 0:
                continue  # the server sent no reasoning_content
            lines.append(f"---- {title} (ms) ----")
            if d.count == 0:
                lines.append("  n/a")
                continue
            lines.append(f"  mean {d.mean:9.2f}   p50 {d.p50:9.2f}   p90 {d.p90:9.2f}   "
                         f"p99 {d.p99:9.2f}")
        if self.cancelled:
            lines.append("(stopped early: these are the requests finished before the stop)")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1000.0


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def build_payload(cfg: ServingConfig, model: str, text: str, max_tokens: int,
                  ignore_eos: bool) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens,
                            "temperature": cfg.temperature, "stream": True,
                            "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    if cfg.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
        body["max_completion_tokens"] = max_tokens
        return "/v1/chat/completions", body
    body["prompt"] = text
    return "/v1/completions", body


async def stream_request(client: httpx.AsyncClient, path: str, body: dict, index: int,
                         prompt_len: int, t_start: float) -> RequestRecord:
    """Send one streaming request and time it; never raises for HTTP or server failures."""
    st = time.perf_counter()
    rec = RequestRecord(index=index, success=False, prompt_len=prompt_len, output_tokens=0,
                        start_s=st - t_start)
    last = end = None
    chunks = 0
    saw_reasoning = False
    try:
        async with client.stream("POST", path, json=body) as resp:
            if resp.status_code != 200:
                content = await resp.aread()
                try:
                    parsed = resp.json() if content else None
                except ValueError:
                    parsed = content.decode("utf-8", "replace")
                msg, _, _ = error_message(parsed, resp.status_code)
                rec.error = f"HTTP {resp.status_code}: {msg}"
                return rec
            async for ev in sse_events(resp):
                now = time.perf_counter()
                if "error" in ev and not ev.get("choices"):
                    rec.error = error_message(ev)[0]
                    continue
                if rec.request_id is None and ev.get("id"):
                    rec.request_id = ev["id"]
                text, finish, _ = chunk_text(ev)
                reasoning = chunk_reasoning(ev)
                if text or reasoning:
                    if rec.ttft_s is None:
                        rec.ttft_s = now - st
                    else:
                        rec.itl_s.append(now - last)
                    last = now
                    chunks += 1
                    saw_reasoning = saw_reasoning or bool(reasoning)
                    if text and rec.first_answer_s is None:
                        rec.first_answer_s = now - st
                if finish is not None:
                    rec.finish_reason = finish
                    end = now
                usage = ev.get("usage")
                if usage:
                    rec.usage_reported = True
                    rec.output_tokens = int(usage.get("completion_tokens") or 0)
                    rec.reasoning_tokens = reasoning_tokens(usage)
                    if usage.get("prompt_tokens"):
                        rec.prompt_len = int(usage["prompt_tokens"])
                if isinstance(ev.get("timings"), dict):
                    rec.server_timings = ev["timings"]
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}".splitlines()[0] or type(exc).__name__
        return rec
    if not saw_reasoning:
        rec.first_answer_s = None  # the same as TTFT: only reasoning replies report it
    if not rec.usage_reported:
        rec.output_tokens = chunks  # one chunk per token is how OpenAI-style servers stream
    if rec.ttft_s is None and rec.error is None:
        rec.error = "the server sent no generated text"
    if rec.finish_reason == "error" and rec.error is None:
        rec.error = "the server reported a generation error"
    stop = max(t for t in (last, end) if t is not None) if (last or end) else None
    rec.e2el_s = (stop - st) if stop is not None else None
    rec.success = rec.error is None
    return rec


async def _resolve_model(client: httpx.AsyncClient, cfg: ServingConfig) -> tuple[str, dict]:
    try:
        r = await client.get("/v1/models", timeout=15.0)
    except httpx.HTTPError as exc:
        raise BenchError(f"cannot reach {cfg.base_url}: {type(exc).__name__}: {exc}") from None
    if r.status_code in (401, 403):
        raise BenchError(f"{cfg.base_url} refused the API key (HTTP {r.status_code}); "
                         f"pass the right one with --api-key")
    cards = []
    if r.status_code == 200:
        try:
            cards = [c for c in r.json().get("data", []) if isinstance(c, dict)]
        except (ValueError, AttributeError):
            cards = []
    ids = [str(c.get("id")) for c in cards]
    if cfg.model is None:
        if not ids:
            raise BenchError(f"{cfg.base_url}/v1/models lists no model: name one with --model")
        return ids[0], cards[0]
    if ids and cfg.model not in ids:
        raise BenchError(f"model {cfg.model!r} is not served at {cfg.base_url} "
                         f"(served: {', '.join(ids)})")
    return cfg.model, next((c for c in cards if c.get("id") == cfg.model), {})


async def _probe(client: httpx.AsyncClient, cfg: ServingConfig, model: str,
                 notes: list[str], text: str | None = None) -> tuple[bool, float | None]:
    """One short request before the run: checks the endpoint, whether `ignore_eos` is accepted,
    and (for random-word prompts, text None) how many tokens the server counts per word.
    Returns (ignore_eos, tokens per word or None)."""
    import random

    calibrate = text is None
    if text is None:
        text = random_word_text(random.Random(cfg.seed + 7919), PROBE_WORDS)
    ignore = cfg.ignore_eos
    for _attempt in range(2):
        path, body = build_payload(cfg, model, text, 2, ignore)
        rec = await stream_request(client, path, body, -1, 0, time.perf_counter())
        if rec.success:
            break
        if ignore and rec.error and "ignore_eos" in rec.error:
            notes.append("the server rejected ignore_eos: answers may end before --output-len")
            ignore = False
            continue
        raise BenchError(f"the probe request to {cfg.base_url}{path} failed: {rec.error}")
    else:
        raise BenchError(f"the probe request to {cfg.base_url} failed: {rec.error}")
    if not rec.usage_reported:
        notes.append("the server sent no usage: output lengths are counted in stream chunks")
        return ignore, None
    return ignore, (rec.prompt_len / PROBE_WORDS if calibrate else None)


def _make_prompts(cfg: ServingConfig, tokens_per_word: float | None,
                  notes: list[str]) -> list[BenchPrompt]:
    n = cfg.num_prompts
    if cfg.dataset:
        try:
            return load_dataset(cfg.dataset, n, cfg.output_len, cfg.seed)
        except DatasetError as exc:
            raise BenchError(str(exc)) from None
    if cfg.tokenizer:
        try:
            from ..models.loader import load_tokenizer

            tok = load_tokenizer(Path(cfg.tokenizer))
        except Exception as exc:  # noqa: BLE001 - any loader failure is a user error here
            raise BenchError(f"cannot load a tokenizer from {cfg.tokenizer}: "
                             f"{str(exc).splitlines()[0]}") from None
        return random_token_prompts(tok, n, cfg.input_len, cfg.output_len, cfg.seed)
    if tokens_per_word is None:
        notes.append("prompt lengths are estimated (one token a word): pass --tokenizer for "
                     "exact lengths")
    return random_word_prompts(n, cfg.input_len, cfg.output_len, cfg.seed,
                               tokens_per_word or 1.0)


async def arun_serving_benchmark(cfg: ServingConfig, progress: ProgressFn | None = None,
                                 cancel: threading.Event | None = None) -> ServingResult:
    """Run the benchmark on the current event loop. Setting `cancel` (from any thread) stops
    it: requests in flight are dropped and the result holds the ones that finished
    (cancelled=True). `progress` is called on this loop's thread after every request; a GUI
    hands it over to its own thread."""
    from .hardware import host_info_dict

    cfg.check()
    cancel = cancel or threading.Event()
    notes: list[str] = []
    base = normalize_base_url(cfg.base_url)
    limit = cfg.concurrency or cfg.num_prompts
    timeout = httpx.Timeout(cfg.timeout_s, connect=10.0)
    limits = httpx.Limits(max_connections=limit + 4, max_keepalive_connections=limit + 4)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    async with httpx.AsyncClient(base_url=base, headers=_headers(cfg.api_key), timeout=timeout,
                                 limits=limits) as client:
        model, card = await _resolve_model(client, cfg)
        if cfg.dataset or cfg.tokenizer:  # lengths known without asking the server
            prompts = _make_prompts(cfg, None, notes)
            ignore_eos, tokens_per_word = await _probe(client, cfg, model, notes,
                                                       prompts[0].text)
        else:
            ignore_eos, tokens_per_word = await _probe(client, cfg, model, notes)
            prompts = _make_prompts(cfg, tokens_per_word, notes)
        offsets = send_offsets(len(prompts), cfg.rate, cfg.burstiness, cfg.seed)
        sem = asyncio.Semaphore(cfg.concurrency) if cfg.concurrency else None
        records: list[RequestRecord | None] = [None] * len(prompts)
        counts = {"done": 0, "failed": 0}
        t_start = time.perf_counter()

        async def one(i: int, p: BenchPrompt) -> None:
            delay = t_start + offsets[i] - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            path, body = build_payload(cfg, model, p.text, p.output_len, ignore_eos)
            if sem is None:
                rec = await stream_request(client, path, body, i, p.prompt_len, t_start)
            else:
                async with sem:
                    rec = await stream_request(client, path, body, i, p.prompt_len, t_start)
            records[i] = rec
            counts["done"] += 1
            counts["failed"] += 0 if rec.success else 1
            if progress is not None:
                total = len(prompts)
                progress(Progress(counts["done"] / total,
                                  f"{counts['done']}/{total} requests "
                                  f"({counts['failed']} failed)",
                                  counts["done"], total, counts["failed"]))

        tasks = [asyncio.ensure_future(one(i, p)) for i, p in enumerate(prompts)]
        pending = set(tasks)
        cancelled = False
        try:
            while pending:
                _, pending = await asyncio.wait(pending, timeout=0.1)
                if cancel.is_set() and pending:
                    cancelled = True
                    break
        finally:
            duration = time.perf_counter() - t_start
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()
    finished = [r for r in records if r is not None]
    settings = asdict(cfg) | {"model": model, "base_url": base, "ignore_eos_sent": ignore_eos,
                              "tokens_per_word": tokens_per_word}
    settings.pop("api_key", None)
    return ServingResult(settings=settings, hardware={"client": host_info_dict()}, server=card,
                         metrics=compute_metrics(finished, duration, cfg.slo), requests=finished,
                         started_at=started_at, cancelled=cancelled, notes=notes)


def run_serving_benchmark(cfg: ServingConfig, progress: ProgressFn | None = None,
                          cancel: threading.Event | None = None) -> ServingResult:
    """Blocking form for threads without a running event loop (CLI, GUI worker thread)."""
    return asyncio.run(arun_serving_benchmark(cfg, progress, cancel))
