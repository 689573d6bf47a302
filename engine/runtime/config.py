"""Engine settings: budgets the scheduler enforces and how big the KV cache is."""

from __future__ import annotations

import os
from dataclasses import dataclass

# what --kv-dtype takes: "auto" is float32 on CPU and the model's dtype on accelerators
KV_DTYPES = ("auto", "float32", "float16", "bfloat16")


@dataclass
class EngineConfig:
    max_running: int = 16  # sequences decoding at once (= KV slots per model)
    max_waiting: int = 256  # bounded queue; beyond it submit raises QueueFullError
    # tokens one step may process (decode tokens + prefill chunks); a long prompt is split into
    # chunks of at most this so that running streams keep receiving a token every step
    max_batched_tokens: int = 256
    # KV rows per slot; None = the model's context where its KV cache fits in a share of the
    # free memory, else as much as fits (engine.runtime.context_budget); `max_context_cap`
    # (None = no fixed cap) keeps the old fixed ceiling for tests and benchmarks
    max_model_len: int | None = None
    max_context_cap: int | None = None
    kv_dtype: str = "auto"  # "auto" (float16 on CPU with the native kernels, else float32; the
    # model dtype on accelerators; kv_cache.resolve_dtype) or one of KV_DTYPES
    # CPU decode work: "auto" (the native kernels when they build: fp32 products,
    # engine.runtime.cpu_linear, and whole decode steps, engine.runtime.native_decode) or
    # "torch" (PyTorch's ops and BLAS throughout)
    linear_kernels: str = "auto"
    prefix_caching: bool = True
    min_prefix_tokens: int = 4  # shorter shared prefixes are not worth a copy
    num_threads: int | None = None  # torch intra-op threads; None = see resolve_threads
    gui_in_process: bool = False  # leave a core to the GUI thread when True
    metrics_capacity: int = 4096  # points per ring-buffer series
    # an engine with nothing to do for this long ends its thread (and that thread's OpenMP
    # team, engine.runtime.threads); the next request starts a new one. 0 = keep it
    idle_thread_s: float = 5.0
    # how chat replies are split into reasoning and answer (engine.runtime.reasoning):
    # "auto" (from each model's chat template), "deepseek_r1", "qwen3" or "none"
    reasoning_parser: str = "auto"

    def resolve_threads(self) -> int:
        if self.num_threads:
            return max(1, int(self.num_threads))
        cores = os.cpu_count() or 1
        return max(1, cores - 1) if self.gui_in_process else cores
