"""Memory estimates before loading: weights by dtype, KV cache per token at a chosen context."""

from __future__ import annotations

from dataclasses import dataclass

from .folder import ModelFolderReport

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}
# Activations, allocator slack and the runtime itself: a margin, not a measurement.
OVERHEAD_FRACTION = 0.10
OVERHEAD_MIN = 256 * 2**20
GGUF_INT8 = "gguf-int8"  # quantization of a GGUF loaded straight into INT8 (--load-as int8)


@dataclass(frozen=True)
class MemoryEstimate:
    weight_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int
    overhead_bytes: int

    @property
    def kv_bytes(self) -> int:
        return self.kv_bytes_per_token * self.kv_tokens

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.overhead_bytes


def kv_bytes_per_token(report: ModelFolderReport, dtype: str) -> int:
    """K and V for every layer: 2 * layers * kv_heads * head_dim * element size."""
    if not (report.num_layers and report.num_kv_heads and report.head_dim):
        return 0
    return 2 * report.num_layers * report.num_kv_heads * report.head_dim * DTYPE_BYTES[dtype]


def planned_kv_dtype(dtype: str, torch_device) -> str:
    """The dtype the engine will give the KV cache ("auto": engine.runtime.kv_cache)."""
    import torch

    from ..runtime.kv_cache import resolve_dtype

    kv = resolve_dtype("auto", getattr(torch, dtype), torch_device, planning=True)
    return str(kv).removeprefix("torch.")


def estimate_memory(report: ModelFolderReport, dtype: str = "float32", context: int | None = None,
                    max_seqs: int = 1, quantization: str | None = None,
                    kv_dtype: str | None = None) -> MemoryEstimate:
    """Estimate what loading needs: weights in `dtype` (linear layers in int8 when quantized)
    plus a KV cache in `kv_dtype` (default: `dtype`) for `max_seqs` sequences of `context`
    tokens."""
    params = report.num_parameters or 0
    elem = DTYPE_BYTES[dtype]
    if quantization == GGUF_INT8 and report.int8_bytes is not None:
        # from the GGUF's tensor table (engine.models.gguf._int8_plan): int8 matrices with
        # their scales per 32, the rest in the float dtype; the CPU kernels' packed copy keeps
        # the linear layers' scales in fp16, half their fp32 bytes
        from ..kernels.packed import serves_half_scales  # torch: only for this plan

        weights = report.int8_bytes + report.int8_float_elems * elem
        if serves_half_scales():
            weights -= 2 * report.int8_half_scales
    elif quantization:
        # Embeddings (and a tied lm_head) stay in float; the linear layers take one byte a weight
        # plus a float scale per output channel (negligible).
        embed = (report.vocab_size or 0) * (report.hidden_size or 0)
        weights = embed * elem + max(params - embed, 0)
    else:
        weights = params * elem
    ctx = context or report.max_context or 2048
    overhead = max(OVERHEAD_MIN, int(weights * OVERHEAD_FRACTION))
    return MemoryEstimate(weights, kv_bytes_per_token(report, kv_dtype or dtype), ctx * max_seqs,
                          overhead)


def fits_message(estimate: MemoryEstimate, free_bytes: int, device_label: str) -> str | None:
    """None when it fits; else a plain sentence with both numbers."""
    if estimate.total_bytes <= free_bytes:
        return None
    return (f"not enough memory: needs about {format_bytes(estimate.total_bytes)} "
            f"(weights {format_bytes(estimate.weight_bytes)}, KV cache {format_bytes(estimate.kv_bytes)}), "
            f"{format_bytes(free_bytes)} free on {device_label}; try a smaller dtype, INT8, or a "
            "shorter context")


def plan_text(estimate: MemoryEstimate, free_bytes: int, device_label: str, form: str,
              context: int, max_seqs: int, kv_dtype: str | None = None) -> str:
    """One line: the weights in `form`, the KV cache for context x batch, and the headroom."""
    left = free_bytes - estimate.total_bytes
    verdict = (f"headroom {format_bytes(left)}" if left >= 0
               else f"short by {format_bytes(-left)}")
    return (f"{form}: weights {format_bytes(estimate.weight_bytes)} + KV cache "
            f"{format_bytes(estimate.kv_bytes)} ({context} tokens x {max_seqs}"
            f"{f', {kv_dtype}' if kv_dtype else ''}) + overhead "
            f"{format_bytes(estimate.overhead_bytes)} = {format_bytes(estimate.total_bytes)} "
            f"of {format_bytes(free_bytes)} available on {device_label}: {verdict}")


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
