"""`QuantLinear`: the drop-in replacement for `nn.Linear` that the quantizer puts into a model.

It owns the int8 weight (N, K), fp32 scales, the float bias and, for static W8A8, the calibrated
per-tensor input scale. The matrix product itself is done by a backend kernel chosen from the
input's device (engine.quant.kernels), so the same module runs on CPU, CUDA and Ascend.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.quant import qmath


class QuantLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, method: str, *, bias: bool,
                 group_size: int = 0, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.method = method
        self.group_size = group_size
        # "auto" picks the kernel from the input's device; tests force "npu" to drive the
        # torch_npu stand-in with CPU tensors, and "reference" is the exact integer oracle.
        self.backend = "auto"
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8))
        scale_shape = (out_features, in_features // group_size) if group_size else (out_features,)
        self.register_buffer("weight_scale", torch.ones(scale_shape, dtype=torch.float32))
        if method == "w8a8-static":
            self.register_buffer("input_scale", torch.ones(1, dtype=torch.float32))
        else:
            self.input_scale = None
        if bias:
            self.register_buffer("bias", torch.zeros(out_features, dtype=dtype))
        else:
            self.bias = None
        self.float_dtype = dtype
        self._cache: dict = {}  # backend-specific packed weights, rebuilt on demand

    @classmethod
    def from_linear(cls, linear: nn.Linear, method: str, group_size: int = 0,
                    input_scale: float | None = None) -> QuantLinear:
        w = linear.weight.detach()
        mod = cls(linear.in_features, linear.out_features, method, bias=linear.bias is not None,
                  group_size=group_size, dtype=w.dtype)
        q, s = qmath.quantize_weight(w, group_size)
        mod.weight.copy_(q)
        mod.weight_scale.copy_(s)
        if linear.bias is not None:
            mod.bias.copy_(linear.bias.detach())
        if method == "w8a8-static":
            if input_scale is None:
                raise ValueError("w8a8-static needs a calibrated input scale")
            mod.input_scale.fill_(float(input_scale))
        return mod.to(w.device)

    def dequantized_weight(self) -> torch.Tensor:
        return qmath.dequantize_weight(self.weight, self.weight_scale)

    def _apply(self, fn, recurse=True):
        if self.weight.numel() == 0:
            # packed for serving: the packed copy is all that is left, keep it (moving such a
            # model to another device type needs a reload)
            return super()._apply(fn, recurse)
        self._cache.clear()  # packed copies belong to the old device/dtype
        # Scales stay fp32 whatever dtype the model is cast to: a bf16 scale would add a
        # systematic 0.4% error per output channel. Only their device follows.
        keep = {k: self._buffers[k] for k in ("weight_scale", "input_scale")
                if self._buffers.get(k) is not None}
        out = super()._apply(fn, recurse)
        for k, old in keep.items():
            moved = self._buffers[k]
            if moved.dtype != torch.float32:
                self._buffers[k] = old.to(device=moved.device)
        # follow casts (model.to(bfloat16)) even without a bias to read the dtype from
        self.float_dtype = fn(torch.empty(0, dtype=self.float_dtype)).dtype
        return out

    def release_plain_weight(self) -> None:
        """Free the plain int8 weight once a backend has its own packed copy (saves memory);
        export needs it, so this is only for serving."""
        from engine.quant.kernels import backend_for

        backend = backend_for(self, self.weight.device)
        if backend.packs_own_copy(self):
            backend.prepare(self, self.float_dtype)
            self.weight = torch.empty(0, dtype=torch.int8, device=self.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from engine.quant.kernels import backend_for

        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        y = backend_for(self, x.device).forward(self, x2)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        g = f", group_size={self.group_size}" if self.group_size else ""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"method={self.method}{g}, bias={self.bias is not None}")
