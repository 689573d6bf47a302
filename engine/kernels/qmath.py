"""Symmetric int8 quantization arithmetic shared by every backend and exporter."""

from __future__ import annotations

import torch

QMAX = 127  # symmetric: -127..127, so that negation never overflows and zero is exact
_TINY = 1e-8

# fp16's largest finite value, and its smallest normal one: below it the spacing is fixed at
# 2^-24, so a scale there keeps less than fp16's 11 bits of itself
HALF_MAX, HALF_NORMAL = 65504.0, 2.0 ** -14


def fits_half(scale: torch.Tensor) -> bool:
    """Whether fp16 holds these weight scales ((N,) or (N, K / group)) to 2^-10 of each output
    channel's largest: every channel's largest finite, and normal or, for a channel of zero
    weights (the floor of 1e-8 below), under 2^-24. A group smaller than its channel's largest
    may fall below the normal range: it then moves by at most 2^-24, 2^-10 of that largest, as
    it would in a GGUF's Q8_0."""
    if not scale.numel():
        return True
    top = scale.detach().float().abs()
    top = top.amax(-1) if top.dim() > 1 else top
    return bool(((top <= HALF_MAX) & ((top >= HALF_NORMAL) | (top < 2.0 ** -24))).all())


def half_holds(scale: torch.Tensor) -> bool:
    """Whether fp16 copies serve these scales: they are fp16 values already (a GGUF's Q8_0,
    weight_scales' where they fit; in any range: nothing changes), or fits_half."""
    s = scale.detach().float()
    return bool(torch.equal(s.half().float(), s)) or fits_half(s)


def weight_scales(amax: torch.Tensor) -> torch.Tensor:
    """fp32 scales for weights whose largest magnitudes (per channel or group) are `amax`:
    amax / 127, raised to the next fp16 value where the layer's scales fit_half, as a GGUF's
    Q8_0 keeps them. The CPU kernels' packed layout stores fp16 scales (kernels/packed.py), so
    the weights then serve with exactly the scales they were rounded with (exports, the
    reference backend and the packed copy agree), at most 2^-10 coarser; raised, never
    lowered, so no weight leaves -127..127."""
    scale = (amax.float() / QMAX).clamp_min(_TINY)
    if not fits_half(scale):
        return scale
    half = scale.half()
    bits = half.view(torch.int16)  # positive fp16: the next value up is the next bit pattern
    bits += (half.float() < scale).to(torch.int16)
    return half.float()


def quantize_weight(weight: torch.Tensor, group_size: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float -> int8 (N, K) and fp32 scales (weight_scales): (N,) per channel or
    (N, K/group) per group."""
    n, k = weight.shape
    if group_size:
        w = weight.detach().float()
        if k % group_size:
            raise ValueError(f"in_features {k} is not a multiple of group size {group_size}")
        wg = w.view(n, k // group_size, group_size)
        scale = weight_scales(wg.abs().amax(-1))
        q = torch.round(wg / scale[..., None]).clamp_(-QMAX, QMAX).to(torch.int8).view(n, k)
        return q, scale
    # per row, so rows can go in blocks: a 151936-row vocabulary matrix would otherwise hold
    # three float32 temporaries of its full size at once (1.6 GB for Qwen2.5-0.5B's)
    amax = torch.empty(n, dtype=torch.float32, device=weight.device)
    q = torch.empty(n, k, dtype=torch.int8, device=weight.device)
    block = max(1, (16 << 20) // max(k, 1))
    for r in range(0, n, block):
        amax[r:r + block] = weight.detach()[r:r + block].float().abs().amax(-1)
    scale = weight_scales(amax)
    for r in range(0, n, block):
        wr = weight.detach()[r:r + block].float()
        q[r:r + block] = torch.round(wr / scale[r:r + block, None]).clamp_(-QMAX, QMAX)
    return q, scale


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    if scale.dim() == 2 and scale.shape[1] != 1:
        n, k = q.shape
        groups = scale.shape[1]
        return (q.float().view(n, groups, k // groups) * scale[..., None]).view(n, k)
    return q.float() * scale.reshape(-1, 1)


def per_token_scale(x: torch.Tensor) -> torch.Tensor:
    """Per-row symmetric scale, (..., 1) fp32."""
    return (x.detach().float().abs().amax(-1, keepdim=True) / QMAX).clamp_min(_TINY)


ACT_BLOCK = 32  # activation values per scale when W8A8 quantizes activations in blocks


def block_quantize_act(x: torch.Tensor, block: int = ACT_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) -> int8 values (as float, (M, K)) and fp32 scales (M, ceil(K / block)): each
    block of `block` values of a row with its own per_token_scale, the rule the native
    kernels apply (cpu_gemm.c blockint8_rows; a last partial block scales what it has)."""
    m, k = x.shape
    nb = -(-k // block)
    xp = torch.nn.functional.pad(x.detach().float(), (0, nb * block - k)).view(m, nb, block)
    s = per_token_scale(xp)  # (m, nb, 1): zero padding never raises a block's max
    q = quantize_act(xp, s).view(m, nb * block)[:, :k]
    return q, s.view(m, nb)


def block_dequantize_act(q: torch.Tensor, s: torch.Tensor, block: int = ACT_BLOCK) -> torch.Tensor:
    return q * s.repeat_interleave(block, dim=1)[:, :q.shape[1]]


def quantize_act(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """Round-half-even and saturate, as int8 values carried in a float tensor."""
    return torch.round(x.float() / scale).clamp_(-QMAX, QMAX)
