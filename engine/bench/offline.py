"""Offline benchmark: a batch-size sweep through the local engine.

For each batch size B, B requests of `input_len` random prompt tokens are submitted together and
decode `output_len` tokens each (ignore_eos, greedy), so every run does the same work. Reported per
B: output and total tokens/s over the wall time, TTFT and TPOT from the engine's own timings, the
steady decode rate (B / TPOT), peak memory, and that decode rate as a share of the memory-bandwidth
roofline: one decode step reads every weight once plus each sequence's KV cache, so at most
bandwidth / bytes-per-step steps run per second.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from .hardware import Bandwidth, device_bandwidth, host_info_dict
from .progress import BenchError, Progress, ProgressFn, write_outputs

QUANT_CHOICES = ("none", "w8a16", "w8a8-dynamic", "w8a8-static")


@dataclass
class OfflineConfig:
    model: str
    quant: str = "none"
    # with --quant: lm_head + embedding in int8, "auto" (engine.quant.head's rule), "on", "off"
    int8_head: str = "auto"
    # with --quant w8a8-dynamic: activation scales per block of 32 or per token (QuantizeRequest)
    act_scales: str = "auto"
    device: str = "cpu"
    dtype: str = "float32"
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    input_len: int = 128
    output_len: int = 128
    seed: int = 0
    bandwidth_gbps: float | None = None  # overrides the measured / spec-sheet figure
    num_threads: int | None = None  # torch threads of the engine; None = the engine's default
    max_batched_tokens: int | None = None  # None: the whole batch's prompts in one step
    load_as: str = "float"  # "int8": a GGUF straight into INT8 weights (load_model)
    kv_dtype: str = "auto"  # the engine's KV cache (EngineConfig.kv_dtype)

    def check(self) -> None:
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise BenchError("--batch-sizes must be positive integers, e.g. 1,2,4,8")
        if self.input_len < 1 or self.output_len < 2:
            raise BenchError("--input-len must be at least 1 and --output-len at least 2")
        if self.quant not in QUANT_CHOICES:
            raise BenchError(f"unknown --quant {self.quant!r}; choose one of "
                             f"{', '.join(QUANT_CHOICES)}")
        if self.int8_head not in ("auto", "on", "off"):
            raise BenchError(f"unknown --int8-head {self.int8_head!r}; choose auto, on or off")
        if self.int8_head == "on" and self.quant == "none":
            raise BenchError("--int8-head on quantizes the head of an int8 model: give --quant")
        if self.bandwidth_gbps is not None and not self.bandwidth_gbps > 0:
            raise BenchError("--bandwidth must be a positive number of GB/s")


@dataclass(frozen=True)
class BatchResult:
    batch_size: int
    completed: int
    input_tokens: int
    output_tokens: int
    wall_s: float
    output_tokens_per_s: float  # generated tokens / wall time (prefill included)
    total_tokens_per_s: float  # (prompt + generated) / wall time
    decode_tokens_per_s: float | None  # B / mean TPOT: the steady decode rate
    ttft_ms_mean: float | None
    ttft_ms_p90: float | None
    tpot_ms_mean: float | None
    tpot_ms_p90: float | None
    peak_memory_bytes: int | None
    memory_kind: str  # "rss" on CPU, "allocator" on accelerators
    bytes_per_step: int  # weights + KV read by one decode step of the batch
    roofline_tokens_per_s: float | None
    bandwidth_share: float | None  # decode rate / roofline (0..1)
    achieved_gbps: float | None


@dataclass
class OfflineResult:
    settings: dict
    hardware: dict
    model: dict
    bandwidth: dict | None
    batches: list[BatchResult] = field(default_factory=list)
    started_at: str = ""
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"kind": "offline", "started_at": self.started_at, "cancelled": self.cancelled,
                "settings": self.settings, "hardware": self.hardware, "model": self.model,
                "bandwidth": self.bandwidth, "batches": [asdict(b) for b in self.batches],
                "notes": self.notes}

    def write(self, prefix: str) -> list:
        rows = [{"model": self.model.get("name"), "quant": self.settings.get("quant"),
                 "dtype": self.settings.get("dtype"), "device": self.settings.get("device"),
                 "input_len": self.settings.get("input_len"),
                 "output_len": self.settings.get("output_len"), **asdict(b)}
                for b in self.batches]
        return write_outputs(prefix, self.to_dict(), {"": rows})

    def summary_text(self) -> str:
        bw = self.bandwidth
        head = (f"{self.model.get('name')} ({self.settings.get('quant')}, "
                f"{self.settings.get('dtype')} on {self.settings.get('device')}), "
                f"prompt {self.settings.get('input_len')} + {self.settings.get('output_len')} "
                f"new tokens")
        lines = [head]
        if bw:
            lines.append(f"memory bandwidth {bw['gbps']:.1f} GB/s ({bw['source']})")
        lines.append(f"{'batch':>5} {'out tok/s':>10} {'decode tok/s':>12} {'TTFT ms':>9} "
                     f"{'TPOT ms':>9} {'peak MiB':>9} {'roofline':>9}")
        for b in self.batches:
            lines.append(
                f"{b.batch_size:>5} {b.output_tokens_per_s:>10.1f} "
                f"{_fmt(b.decode_tokens_per_s, 12, 1)} {_fmt(b.ttft_ms_mean, 9, 1)} "
                f"{_fmt(b.tpot_ms_mean, 9, 2)} "
                f"{_fmt(b.peak_memory_bytes / 2**20 if b.peak_memory_bytes else None, 9, 0)} "
                f"{_fmt(_pct(b.bandwidth_share), 8, 0)}%")
        if self.cancelled:
            lines.append("(stopped early: the batch sizes above finished before the stop)")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def _pct(share: float | None) -> float | None:
    return None if share is None else share * 100


def _fmt(v: float | None, width: int, digits: int) -> str:
    return f"{'n/a':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


class _MemorySampler:
    """Peak process RSS (CPU) or allocator bytes (accelerator), sampled every 20 ms on a thread."""

    def __init__(self, device: str):
        import psutil

        self.device = device
        self.kind = "rss" if device.split(":")[0] == "cpu" else "allocator"
        self._proc = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)

    def _read(self) -> int:
        if self.kind == "rss":
            return self._proc.memory_info().rss
        from ..devices import memory_allocated

        return memory_allocated(self.device) or 0

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._read())

    def __enter__(self):
        self.peak = self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._read())


def decode_bytes_model(model: Any, dtype_bytes: int) -> tuple[int, int]:
    """(weight bytes one decode step reads, KV bytes per token of context).

    Every parameter and buffer is read once per step except an input embedding that is not tied
    to the output head: a lookup reads only the batch's rows of it.
    """
    from ..runtime.model_size import model_size

    weights = model_size(model).weight_bytes  # int8 layers already packed included
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if emb is not None and getattr(emb, "weight", None) is not None:
        tied = head is not None and getattr(head, "weight", None) is not None and \
            head.weight.data_ptr() == emb.weight.data_ptr()
        if not tied:
            weights -= emb.weight.numel() * emb.weight.element_size()
    cfg = model.config
    layers = getattr(cfg, "num_hidden_layers", 0)
    heads = getattr(cfg, "num_attention_heads", 1)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv_per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    return int(weights), int(kv_per_token)


def _quantize(loaded: Any, method: str, progress: ProgressFn | None,
              cancel: threading.Event, int8_head: str = "auto",
              notes: list[str] | None = None,
              act_scales: str = "auto") -> tuple[Any, tuple[int, int]]:
    """Quantize the loaded model in memory through engine.quant's workflow (the plain recipe
    with default options, no export; w8a8-static calibrates on the shipped calibration text)."""
    try:
        from ..quant.apply import prepare_for_serving
        from ..quant.calib import Cancelled
        from ..quant.workflow import QuantizeRequest, run_workflow
    except ImportError as exc:
        raise BenchError(f"in-memory quantization is not available in this build ({exc}); "
                         "run with --quant none") from None

    def on_event(ev) -> None:
        if progress is not None and ev.step:
            progress(Progress(0.05 + 0.05 * ev.fraction,
                              f"{ev.step} ({method}): {ev.done}/{ev.total}"))

    req = QuantizeRequest(model_dir=str(loaded.path), out_dir=None, method=method, recipe="plain",
                          device=loaded.device, dtype=loaded.dtype, int8_head=int8_head,
                          act_scales=act_scales)
    try:
        done = run_workflow(req, on_event, cancel, loaded=loaded)
        if notes is not None and done.head is not None:
            notes.append(f"lm_head and embedding: {'int8' if done.head.int8_head else 'float'} "
                         f"({done.head.reason})")
        # count the int8 weights now: serving packs them into kernel caches that are neither
        # parameters nor buffers
        dtype_bytes = next(p for p in loaded.model.parameters()
                           if p.dtype.is_floating_point).element_size()
        counted = decode_bytes_model(loaded.model, dtype_bytes)
        prepare_for_serving(loaded.model)
    except Cancelled:
        raise BenchError("cancelled while quantizing") from None
    except Exception as exc:  # noqa: BLE001 - QuantError and friends: one line for the user
        raise BenchError(f"quantization failed: {str(exc).splitlines()[0]}") from None
    loaded.quantization = method
    loaded.name = f"{loaded.name}-{method}"
    return loaded, counted


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def run_offline_sweep(cfg: OfflineConfig, progress: ProgressFn | None = None,
                      cancel: threading.Event | None = None,
                      loaded: Any = None) -> OfflineResult:
    """Load `cfg.model` (or use `loaded`), optionally quantize it, and sweep the batch sizes.

    `cancel` stops between steps: the batch in progress is cancelled and dropped, the finished
    ones are returned with cancelled=True.
    """
    from ..devices import import_torch
    from ..models import (
        LoadCancelled,
        ModelFolderError,
        ModelLoadError,
        load_model,
    )
    from ..runtime import EngineConfig, LocalEngine
    from ..runtime.threads import run_in_fresh_thread
    from ..runtime.types import EngineError, GenerationRequest, SamplingParams

    cfg.check()
    cancel = cancel or threading.Event()
    notes: list[str] = []

    def say(fraction: float, message: str) -> None:
        if progress is not None:
            progress(Progress(min(1.0, fraction), message))

    torch = import_torch()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    batch_sizes = sorted({int(b) for b in cfg.batch_sizes})
    loaded_in = loaded is not None

    def measure_bandwidth(device: Any) -> Bandwidth | None:
        say(0.1 if loaded_in else 0.0, "measuring memory bandwidth")
        try:
            return device_bandwidth(device, cfg.bandwidth_gbps)
        except Exception as exc:  # noqa: BLE001 - the sweep is still useful without a roofline
            notes.append(f"no bandwidth figure: {exc}")
            return None

    def prepare(loaded: Any):
        bandwidth: Bandwidth | None = None
        if loaded is None:
            # before the weights: the measurement's buffer (512 MiB) is returned before they
            # arrive, so the run's peak RSS is the model's and the engine's, not the bench's
            from ..devices import get_device

            try:
                bandwidth = measure_bandwidth(get_device(cfg.device).torch_device)
            except ValueError:
                pass  # a bad --device: load_model says so below
            say(0.0, f"loading {cfg.model}")
            try:
                loaded = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype, cancel=cancel,
                                    load_as=cfg.load_as)
            except LoadCancelled:
                raise BenchError("cancelled while loading the model") from None
            except (ModelFolderError, ModelLoadError) as exc:
                raise BenchError(str(exc)) from None
        dtype_bytes = torch.empty((), dtype=getattr(torch, loaded.dtype)).element_size()
        if cfg.quant != "none":
            say(0.05, f"quantizing ({cfg.quant})")
            loaded, counted = _quantize(loaded, cfg.quant, progress, cancel, cfg.int8_head,
                                        notes, cfg.act_scales)
        else:
            counted = decode_bytes_model(loaded.model, dtype_bytes)
        if bandwidth is None and loaded_in:
            bandwidth = measure_bandwidth(loaded.device)
        return loaded, counted, bandwidth

    # load, quantize and measure on a thread that ends before the engine runs: a thread that
    # keeps an OpenMP team beside the engine's slows every decode step (engine.runtime.threads)
    loaded, (weight_bytes, kv_per_token), bandwidth = run_in_fresh_thread(
        prepare, loaded, name="bench-prepare")
    if bandwidth is None:
        notes.append(f"no bandwidth figure for {loaded.device}: pass --bandwidth GBPS for the "
                     "roofline share")

    max_b = batch_sizes[-1]
    max_len = cfg.input_len + cfg.output_len + 1
    mbt = cfg.max_batched_tokens or max(256, max_b * cfg.input_len)
    engine = LocalEngine(EngineConfig(max_running=max_b, max_waiting=max(256, max_b),
                                      max_batched_tokens=mbt, max_model_len=max_len,
                                      prefix_caching=False, num_threads=cfg.num_threads,
                                      kv_dtype=cfg.kv_dtype))
    result = OfflineResult(settings=asdict(cfg) | {"batch_sizes": batch_sizes,
                                                   "max_batched_tokens": mbt},
                           hardware=host_info_dict(), model={}, bandwidth=None,
                           started_at=started_at, notes=notes)
    if bandwidth is not None:
        result.bandwidth = asdict(bandwidth)
    try:
        try:
            info = engine.add_model(loaded, name=loaded.name, default=True).result()
        except EngineError as exc:
            raise BenchError(str(exc)) from None
        if info.kv_bytes and info.max_context:  # the cache as the engine holds it (its dtype)
            kv_per_token = info.kv_bytes // (max_b * info.max_context)
        result.model = asdict(info) | {"decode_weight_bytes": weight_bytes,
                                       "kv_bytes_per_token": kv_per_token}
        vocab = getattr(loaded.model.config, "vocab_size", None) or len(loaded.tokenizer)
        special = set(getattr(loaded.tokenizer, "all_special_ids", []) or [])
        pool = [i for i in range(vocab) if i not in special]
        rng = random.Random(cfg.seed)

        def batch_requests(b: int, out_len: int) -> list[GenerationRequest]:
            params = SamplingParams(max_tokens=out_len, temperature=0.0, ignore_eos=True)
            return [GenerationRequest(prompt_token_ids=[rng.choice(pool)
                                                        for _ in range(cfg.input_len)],
                                      params=params) for _ in range(b)]

        def run_batch(reqs: list[GenerationRequest]):
            handles = []
            try:
                for r in reqs:
                    handles.append(engine.submit(r))
            except EngineError as exc:
                for h in handles:
                    h.cancel()
                raise BenchError(f"the engine refused a request: {exc}") from None
            finishes = []
            for h in handles:
                while True:
                    # checked before each wait too: a batch the engine finishes within one
                    # wait (a tiny model) is still dropped once cancel is set
                    if cancel.is_set():
                        for x in handles:
                            x.cancel()
                        return None
                    try:
                        finishes.append(h.result(timeout=0.2).finish)
                        break
                    except TimeoutError:
                        pass
            return finishes

        say(0.12, "warm-up")
        if run_batch(batch_requests(1, 4)) is None:
            result.cancelled = True
            return result
        total_work = sum(batch_sizes)
        done_work = 0
        for b in batch_sizes:
            if cancel.is_set():
                result.cancelled = True
                break
            say(0.15 + 0.85 * done_work / total_work,
                f"batch {b}: {b} x ({cfg.input_len} + {cfg.output_len}) tokens")
            reqs = batch_requests(b, cfg.output_len)
            with _MemorySampler(loaded.device) as mem:
                t0 = time.perf_counter()
                finishes = run_batch(reqs)
                wall = time.perf_counter() - t0
            if finishes is None:
                result.cancelled = True
                break
            errors = [f.error for f in finishes if f.finish_reason == "error"]
            if errors:
                raise BenchError(f"batch {b} failed: {errors[0]}")
            result.batches.append(_batch_result(b, finishes, wall, mem, weight_bytes,
                                                kv_per_token, cfg, bandwidth))
            done_work += b
        say(1.0, "done")
    finally:
        engine.shutdown()
    return result


def _batch_result(b: int, finishes: list, wall: float, mem: _MemorySampler, weight_bytes: int,
                  kv_per_token: int, cfg: OfflineConfig,
                  bandwidth: Bandwidth | None) -> BatchResult:
    out_tokens = sum(f.usage.completion_tokens for f in finishes)
    in_tokens = sum(f.usage.prompt_tokens for f in finishes)
    ttfts = [f.timings.ttft_s * 1000 for f in finishes if f.timings.ttft_s is not None]
    tpots = [f.timings.tpot_s * 1000 for f in finishes if f.timings.tpot_s is not None]
    tpot_mean = float(np.mean(tpots)) if tpots else None
    decode_rate = b / (tpot_mean / 1000) if tpot_mean else None
    # the average decode step sees half of the new tokens already in the cache
    mean_context = cfg.input_len + cfg.output_len / 2
    step_bytes = int(weight_bytes + b * mean_context * kv_per_token)
    roofline = share = achieved = None
    if bandwidth is not None:
        roofline = b * bandwidth.gbps * 1e9 / step_bytes
        if decode_rate:
            share = decode_rate / roofline
            achieved = step_bytes / (tpot_mean / 1000) / 1e9
    return BatchResult(
        batch_size=b, completed=len(finishes), input_tokens=in_tokens, output_tokens=out_tokens,
        wall_s=wall, output_tokens_per_s=out_tokens / wall,
        total_tokens_per_s=(in_tokens + out_tokens) / wall, decode_tokens_per_s=decode_rate,
        ttft_ms_mean=float(np.mean(ttfts)) if ttfts else None,
        ttft_ms_p90=_percentile(ttfts, 90), tpot_ms_mean=tpot_mean,
        tpot_ms_p90=_percentile(tpots, 90), peak_memory_bytes=mem.peak or None,
        memory_kind=mem.kind, bytes_per_step=step_bytes, roofline_tokens_per_s=roofline,
        bandwidth_share=share, achieved_gbps=achieved)
