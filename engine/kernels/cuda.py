"""CUDA kernels: `torch._int_mm` (int8 x int8 -> int32 on tensor cores) for W8A8; W8A16 keeps
int8 storage and converts inside the GEMM call, with scales applied to the output.

Not runnable on the development machines (no GPU); the math mirrors the reference backend.
`_int_mm` on CUDA needs M > 16 and K, N multiples of 8, so short inputs are zero-padded.
"""

from __future__ import annotations

import torch

from . import qmath


class CudaBackend:
    def packs_own_copy(self, mod) -> bool:
        """True when forward no longer reads mod.weight once prepared."""
        return mod.method != "w8a16" and not (mod.in_features % 8 or mod.out_features % 8)

    def prepare(self, mod, dtype: torch.dtype | None = None) -> dict:
        c = mod._cache.get("cuda")
        if c is None:
            c = {"w_kn": mod.weight.t().contiguous(), "scale": mod.weight_scale.float()}
            mod._cache["cuda"] = c
        return c

    def forward(self, mod, x: torch.Tensor) -> torch.Tensor:
        if mod.method == "w8a16" or mod.in_features % 8 or mod.out_features % 8:
            w = qmath.dequantize_weight(mod.weight, mod.weight_scale).to(x.dtype)
            y = x @ w.t()
        else:
            c = self.prepare(mod)
            sx = (mod.input_scale.float() if mod.method == "w8a8-static"
                  else qmath.per_token_scale(x))
            xq = qmath.quantize_act(x, sx).to(torch.int8)
            m = xq.shape[0]
            if m <= 16:
                xq = torch.cat([xq, xq.new_zeros(17 - m, xq.shape[1])])
            acc = torch._int_mm(xq, c["w_kn"])[:m]
            y = (acc.float() * sx * c["scale"]).to(x.dtype)
        if mod.bias is not None:
            y = y + mod.bias.to(y.dtype)
        return y
