"""fp32 linear layers for decode-sized batches on CPU, through the native kernel (npc_f32 in
engine/kernels/cpu_gemm.c) instead of the BLAS behind `F.linear`.

Why: a decode step multiplies a few rows (one per running sequence) by every weight. On the
2-core AVX2 test machine MKL's sgemm runs such products far below the memory's speed: a pass
over the 24 layers of the Qwen2.5-0.5B shape costs it 2.2-2.8x more at 2-8 rows than at one,
where the bytes read are the same; the native kernel is 1.5x faster than MKL at one row,
2.2-3.7x at 2-32 and stays ahead up to ~80 rows (tests/bench/bench_decode_kernels.py,
tests/bench/bench_gemm.py, docs/benchmarks.md). Above that - prefill chunks - the BLAS is the
better-tuned kernel and keeps the work.

The model is not touched: the runner asks `linear_fn(module)` once per layer and calls what it
gets. Quantized layers, bf16 / fp16 models, accelerators and small weights that stay in cache
(where the ctypes call costs more than it saves) keep the module's own forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

# rows up to which the native kernel runs a product: any weight at or below SMALL_BATCH_ROWS,
# weights of at least BIG_WEIGHT elements (they stream from memory) up to MAX_ROWS
SMALL_BATCH_ROWS = 16
MAX_ROWS = 64
MIN_WEIGHT = 256 * 256  # smaller layers: torch's call is cheaper than a ctypes crossing
BIG_WEIGHT = 1 << 20

Linear = Callable[[torch.Tensor], torch.Tensor]


def native_f32_available() -> bool:
    from ..kernels import native
    return native.available()


def applies(mod: object) -> bool:
    """Whether `mod` is a plain fp32 CPU nn.Linear the native kernel can run."""
    if type(mod) is not torch.nn.Linear:
        return False
    w = mod.weight
    if w.device.type != "cpu" or w.dtype != torch.float32 or not w.is_contiguous():
        return False
    b = mod.bias
    if b is not None and (b.dtype != torch.float32 or not b.is_contiguous()):
        return False
    return w.numel() >= MIN_WEIGHT


def linear_fn(mod: torch.nn.Module, enabled: bool) -> Linear:
    """`mod` itself, or a function computing the same product with the native kernel for
    decode-sized inputs (any leading shape, last dim = in_features)."""
    if not enabled or not applies(mod):
        return mod
    from ..kernels import native

    fn = native.library().npc_f32
    n, k = mod.out_features, mod.in_features
    max_rows = MAX_ROWS if mod.weight.numel() >= BIG_WEIGHT else SMALL_BATCH_ROWS
    get_threads = torch.get_num_threads
    f32 = torch.float32

    def forward(x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, k)
        m = x2.shape[0]
        # the parameters are read at call time, so a load_state_dict in place stays visible,
        # and a weight someone re-laid out since (another runner's transposed head) goes to
        # torch rather than being read in the wrong order
        w, bias = mod.weight, mod.bias
        if m > max_rows or m == 0 or x2.dtype != f32 or not w.is_contiguous():
            return F.linear(x, w, bias)
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        y = torch.empty(m, n, dtype=f32)
        fn(x2.data_ptr(), w.data_ptr(), 0 if bias is None else bias.data_ptr(), y.data_ptr(),
           m, n, k, get_threads())
        return y.view(*x.shape[:-1], n)

    return forward


def mlp_fn(mlp: torch.nn.Module, enabled: bool) -> Linear:
    """A Llama-style gated MLP (down(act(gate(x)) * up(x))) with its three products on
    `linear_fn`, or the module itself when any part does not qualify."""
    parts = [getattr(mlp, a, None) for a in ("gate_proj", "up_proj", "down_proj")]
    act = getattr(mlp, "act_fn", None)
    if not enabled or act is None or not all(p is not None and applies(p) for p in parts):
        return mlp
    gate, up, down = (linear_fn(p, True) for p in parts)

    def forward(x: torch.Tensor) -> torch.Tensor:
        return down(act(gate(x)) * up(x))

    return forward
