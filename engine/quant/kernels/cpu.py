"""CPU kernels, chosen by measurement (docs/benchmarks.md, "Quantization"):

* W8A16: `aten._weight_int8pack_mm` (int8 weight, bf16 activations, per-channel scales). Its
  fp32-activation variant is ~10x slower than an fp32 GEMM, so fp32 models run this layer with
  bf16 activations (rounding well below the int8 weight error).
* W8A8: oneDNN `qlinear_pointwise` on a prepacked int8 weight, u8 activations with zero point
  128 (symmetric int8 shifted), fp32 output; per-token scales are applied to the output rows,
  which is exact because each row's scale factors out of its dot products.
  `torch._int_mm` is exact but 10-40x slower than this on CPU; fbgemm `linear_dynamic` quantizes
  activations per tensor (and with reduce_range to 7 bits), which is what made the default
  quantize_dynamic inaccurate.
* CPUs without VNNI multiply u8 x s8 pairs into a saturating int16 (vpmaddubsw): full-range
  weights overflow and give large errors. A one-off probe detects that and then packs 7-bit
  weights (|q| <= 63), which cannot overflow, for this CPU only; stored and exported weights
  stay 8-bit.
"""

from __future__ import annotations

import functools

import torch

from engine.quant import qmath


@functools.lru_cache(maxsize=1)
def int16_saturation() -> bool:
    """True when this CPU's int8 GEMM saturates pairwise u8*s8 sums (no VNNI)."""
    k, n = 64, 16
    w = torch.full((n, k), 127, dtype=torch.int8)
    packed = torch.ops.onednn.qlinear_prepack(w, None)
    ones = torch.ones(n)
    zp = torch.zeros(n, dtype=torch.long)
    for m in (1, 32):
        q = torch.full((m, k), 255, dtype=torch.uint8)  # int8 value 127 with zero point 128
        y = torch.ops.onednn.qlinear_pointwise(q, 1.0, 128, packed, ones, zp, None, 1.0, 0,
                                               torch.float32, "none", [], "")
        if not torch.allclose(y, torch.full_like(y, 127.0 * 127.0 * k)):
            return True
    return False


def _onednn_ok() -> bool:
    return hasattr(torch.ops, "onednn") and hasattr(torch.ops.onednn, "qlinear_pointwise")


class CpuBackend:
    # oneDNN keeps its own blocked copy of the weight; the plain one can then be released
    def packs_own_copy(self, mod) -> bool:
        """True when forward no longer reads mod.weight once prepared."""
        return mod.method != "w8a16"

    def prepare(self, mod, dtype: torch.dtype | None = None) -> tuple:
        key = ("cpu", mod.method)
        cached = mod._cache.get(key)
        if cached is not None:
            return cached
        if mod.method == "w8a16":
            if mod.group_size:
                cached = (None,)
            else:
                cached = (mod.weight_scale.to(torch.bfloat16),)
        else:
            q, scale = mod.weight, mod.weight_scale.float()
            if int16_saturation():
                # halve to 7 bits: |q| <= 63 keeps 2 * 255 * 63 under the int16 limit
                q = torch.round(q.float() / 2).clamp_(-63, 63).to(torch.int8)
                scale = scale * 2
            packed = torch.ops.onednn.qlinear_prepack(q.contiguous(), None)
            zp = torch.zeros(mod.out_features, dtype=torch.long)
            cached = (packed, scale.contiguous(), zp)
        mod._cache[key] = cached
        return cached

    def forward(self, mod, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 0:  # oneDNN does not accept empty inputs
            return x.new_zeros(0, mod.out_features)
        if mod.method == "w8a16":
            y = self._w8a16(mod, x)
        else:
            y = self._w8a8(mod, x)
        if mod.bias is not None:
            y = y + mod.bias.to(y.dtype)
        return y.to(x.dtype)

    def _w8a16(self, mod, x: torch.Tensor) -> torch.Tensor:
        (scale_bf16,) = self.prepare(mod)
        xb = x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16)
        if scale_bf16 is None:
            # per-group scales: no fused CPU kernel, so product per group in bf16, fp32 sum
            n, k = mod.weight.shape
            g = mod.group_size
            wg = mod.weight.view(n, k // g, g).to(torch.bfloat16)
            xg = xb.view(xb.shape[0], k // g, g)
            part = torch.einsum("mgk,ngk->mgn", xg, wg).float()
            return (part * mod.weight_scale.t().unsqueeze(0)).sum(1)
        return torch._weight_int8pack_mm(xb.contiguous(), mod.weight, scale_bf16)

    def _w8a8(self, mod, x: torch.Tensor) -> torch.Tensor:
        packed, wscale, zp = self.prepare(mod)
        xf = x.float()
        if mod.method == "w8a8-static":
            sx = float(mod.input_scale)
            q = qmath.quantize_act(xf, sx).add_(128).to(torch.uint8)
            return torch.ops.onednn.qlinear_pointwise(q, sx, 128, packed, wscale, zp, None, 1.0,
                                                      0, torch.float32, "none", [], "")
        sx = qmath.per_token_scale(xf)
        q = qmath.quantize_act(xf, sx).add_(128).to(torch.uint8)
        y = torch.ops.onednn.qlinear_pointwise(q, 1.0, 128, packed, wscale, zp, None, 1.0, 0,
                                               torch.float32, "none", [], "")
        return y.mul_(sx)
