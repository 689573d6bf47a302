"""An int8 layer's input turned at run time: x -> x R, with R = D (H (x) Q) orthogonal (D random
signs, H Sylvester's Hadamard matrix of the width's power-of-two part, Q a small orthogonal of
its odd part; engine.quant.rotate.hadamard_factors). The layer's weight holds W R, so the
product is the float layer's; what changes is what gets rounded: an outlier channel of x is
spread over all of them, so a static activation range fits the rest of the row instead of
the outlier (QuaRot's online Hadamard before down_proj).

Done as a fast Walsh-Hadamard transform (log2 of the width in additions per value) after the
odd part's small product, never as a dense [K, K] product (which would cost as much as the
layer). cpu_decode.c's turn_row is the same on the native decode step."""

from __future__ import annotations

import torch


def apply_turn(x: torch.Tensor, signs: torch.Tensor, odd: torch.Tensor) -> torch.Tensor:
    """x R for x [..., K]: signs [K] (D's diagonal), odd [m, m] (Q). Computed in fp32."""
    k, m = x.shape[-1], odd.shape[0]
    two = k // m
    v = (x.to(torch.float32) * signs).reshape(-1, two, m)
    if m > 1:
        v = v @ odd
    n, h = v.shape[0], 1
    while h < two:  # Sylvester's H as butterflies: pairs (j, j + h) within blocks of 2h
        v = v.view(n, two // (2 * h), 2, h, m)
        a, b = v[:, :, 0], v[:, :, 1]
        v = torch.stack((a + b, a - b), dim=2)
        h *= 2
    return (v.reshape(x.shape) * two ** -0.5).to(x.dtype)


def turn_fits(k: int, m: int) -> bool:
    """Whether a turn of width k with an odd part of m is one apply_turn computes."""
    return m >= 1 and k % m == 0 and (k // m) & (k // m - 1) == 0
