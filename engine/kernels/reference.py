"""Exact integer oracle: the math every backend must reproduce (float64 holds int8 dot
products exactly), used by tests and as the last-resort path for per-group W8A8-less cases."""

from __future__ import annotations

import torch

from . import qmath


class ReferenceBackend:
    def packs_own_copy(self, mod) -> bool:
        """True when forward no longer reads mod.weight once prepared."""
        return False

    def prepare(self, mod, dtype=None) -> None:  # nothing to pack
        return None

    def forward(self, mod, x: torch.Tensor) -> torch.Tensor:
        w = mod.plain_weight()
        if mod.method == "w8a16":
            y = x.double() @ qmath.dequantize_weight(w, mod.plain_scale()).double().t()
        elif mod.method == "w8a8-dynamic" and mod.act_rows == "block":
            # int8 activations per block of 32: each block's int32 sum times its scale
            q, s = qmath.block_quantize_act(x)
            xd = qmath.block_dequantize_act(q.double(), s.double())
            y = (xd @ w.double().t()) * mod.plain_scale().double()
        else:
            sx = (mod.input_scale.double() if mod.method == "w8a8-static"
                  else qmath.per_token_scale(x).double())
            xq = qmath.quantize_act(x.double(), sx).double()
            acc = xq @ w.double().t()
            y = acc * sx * mod.plain_scale().double()
        if mod.bias is not None:
            y = y + mod.bias.double()
        return y.to(x.dtype)
