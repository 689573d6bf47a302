"""How many tokens each KV slot holds: the model's own context when memory allows.

The KV cache is preallocated (engine.runtime.kv_cache): slots x context x bytes per token. A
chat model that advertises 8K positions gets all of them when that fits in a share of the
memory free at load time; a model advertising 128K gets as much as fits, in steps of 256
tokens, and at least the old fixed default (2,048, or the model's context if smaller) when
that fits in most of the free memory. When it does not (a 7B model's fp32 cache for 8
sequences is 16 GiB), the slots get what fits there; when not even 256 tokens a slot fit, the
load is refused with the numbers instead of the process being killed for memory later.
An explicit `max_model_len` or `max_context_cap` in EngineConfig still wins.
"""

from __future__ import annotations

from typing import Any

import torch

# share of the memory free at load time that one model's KV cache may take
KV_MEMORY_FRACTION = 0.4
# share it may take at most, to reach the floor (the cache is written in full at allocation)
KV_MEMORY_LIMIT = 0.8
FLOOR = 2048
STEP = 256


def kv_bytes_per_token(model_config: Any, dtype: torch.dtype) -> int:
    """K and V of one token across every layer, from the model's config."""
    cfg = getattr(model_config, "text_config", None) or model_config
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 0) or 0
    heads = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", 0) or 0
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 0) or 0
    head_dim = getattr(cfg, "head_dim", None) or (hidden // heads if heads else 0)
    return 2 * layers * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def free_bytes(device: Any) -> int | None:
    """Memory free for the KV cache on `device` (host RAM for the CPU); None if unknown."""
    try:
        from ..devices import get_device

        return int(get_device(str(device)).free_memory)
    except Exception:  # noqa: BLE001 - unknown free memory falls back to the floor
        return None


def choose_max_len(model_ctx: int | None, *, slots: int, per_token: int, free: int | None,
                   max_model_len: int | None = None, cap: int | None = None) -> int:
    """Tokens per slot (see the module docstring)."""
    ctx = model_ctx or FLOOR
    if max_model_len:
        return min(max_model_len, ctx)
    if cap:
        return min(ctx, cap)
    floor = min(ctx, FLOOR)
    if not free or per_token <= 0:
        return floor
    fits = int(free * KV_MEMORY_FRACTION) // max(1, slots * per_token)
    if fits >= ctx:
        return ctx
    if fits >= floor:
        return fits // STEP * STEP
    limit = int(free * KV_MEMORY_LIMIT) // max(1, slots * per_token)
    if limit >= floor:
        return floor
    if limit >= STEP:
        return limit // STEP * STEP
    gib = 2**30
    raise MemoryError(
        f"not enough memory for the KV cache: {slots} sequences x {STEP} tokens need "
        f"{slots * STEP * per_token / gib:.2f} GiB, {free / gib:.2f} GiB free; lower "
        "--max-running, use a float16 cache (--kv-dtype float16) or free memory")
