"""Preallocated slot KV cache: one tensor per K and V, written in place, never reallocated."""

from __future__ import annotations

import torch


def resolve_dtype(kv_dtype: str, model_dtype: torch.dtype, device,
                  planning: bool = False) -> torch.dtype:
    """"auto": the model's dtype on accelerators. On CPU, float16 when the float parts are
    float32 and the native kernels are built: there the cache only stores (the native decode
    step and the PyTorch attention read its rows into fp32 and compute in fp32), so a step's
    attention reads half the bytes and the cache takes half the memory; float32 otherwise
    (CPU matmuls in bf16/fp16 are several times slower than in fp32 at attention's shapes).
    A prompt's first chunk attends to its own fp32 keys, so the first token rounds nothing.
    `planning`: a memory plan before loading, which must not compile the kernels."""
    if kv_dtype != "auto":
        return getattr(torch, kv_dtype)
    if torch.device(device).type != "cpu":
        return model_dtype
    if model_dtype == torch.float32:
        from ..kernels import native

        if native.buildable() if planning else native.available():
            return torch.float16
    return torch.float32


class KVCache:
    """K and V as [layers, slots, kv_heads, max_len, head_dim].

    A slot's rows [0, n) hold the keys/values of its sequence's first n tokens; positions are
    per sequence, so sequences of any length share one tensor without padding or concatenation.
    """

    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, max_len: int,
                 head_dim: int, dtype: torch.dtype, device: str | torch.device):
        shape = (num_layers, num_slots, num_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.num_slots = num_slots
        self.max_len = max_len

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int,
                        dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    def copy_rows(self, src: int, dst: int, n: int) -> None:
        """Prefix reuse from a busy slot: copy its first n rows into another slot."""
        self.k[:, dst, :, :n].copy_(self.k[:, src, :, :n])
        self.v[:, dst, :, :n].copy_(self.v[:, src, :, :n])
