"""`QuantLinear`: the drop-in replacement for `nn.Linear` that the quantizer puts into a model;
`QuantEmbedding`: the int8 token embedding used with an int8 lm_head (opt-in, see apply.py).

It owns the int8 weight (N, K), fp32 scales, the float bias and, for static W8A8, the calibrated
per-tensor input scale. The matrix product itself is done by a backend kernel chosen from the
input's device (engine.quant.kernels), so the same module runs on CPU, CUDA and Ascend.
"""

from __future__ import annotations

import torch
from npu_console.engine.quant import qmath
from torch import nn


def _apply_keeping_fp32_scales(mod: nn.Module, fn, recurse: bool):
    """nn.Module._apply (casts, device moves) for our int8 modules: scales stay fp32 whatever
    dtype the model is cast to (a bf16 scale would add a systematic 0.4 % error per output
    channel), only their device follows; `float_dtype` follows casts even without a float
    buffer to read it from."""
    keep = {k: mod._buffers[k] for k in ("weight_scale", "input_scale")
            if mod._buffers.get(k) is not None}
    out = nn.Module._apply(mod, fn, recurse)
    for k, old in keep.items():
        moved = mod._buffers[k]
        if moved.dtype != torch.float32:
            mod._buffers[k] = old.to(device=moved.device)
    mod.float_dtype = fn(torch.empty(0, dtype=mod.float_dtype)).dtype
    return out


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
        # set by a CPU backend whose kernel needs no per-call dispatch (kernels/native.py)
        self._fast_forward = None
        self.keep_plain_weight = False  # True when a tied QuantEmbedding reads its rows

    @classmethod
    def from_linear(cls, linear: nn.Linear, method: str, group_size: int = 0,
                    input_scale: float | None = None,
                    rounded: tuple[torch.Tensor, torch.Tensor] | None = None) -> QuantLinear:
        """`rounded`: (int8 weight, scales) already computed (error-compensated rounding,
        engine.quant.gptq) instead of rounding to nearest here."""
        w = linear.weight.detach()
        mod = cls(linear.in_features, linear.out_features, method, bias=linear.bias is not None,
                  group_size=group_size, dtype=w.dtype)
        q, s = rounded if rounded is not None else qmath.quantize_weight(w, group_size)
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
        self._fast_forward = None
        return _apply_keeping_fp32_scales(self, fn, recurse)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fast_forward"] = None  # a closure over this very module; rebuilt on first use
        return state

    def release_plain_weight(self) -> None:
        """Free the plain int8 weight once a backend has its own packed copy (saves memory);
        export needs it, so this is only for serving."""
        from npu_console.engine.quant.kernels import backend_for

        backend = backend_for(self, self.weight.device)
        if backend.packs_own_copy(self) and not self.keep_plain_weight:
            backend.prepare(self, self.float_dtype)
            self.weight = torch.empty(0, dtype=torch.int8, device=self.weight.device)

    def kernel_name(self) -> str:
        """Which product runs this layer on its device ("native", "fbgemm", ...)."""
        from npu_console.engine.quant.kernels import backend_for

        backend = backend_for(self, self.weight.device)
        name = getattr(backend, "kernel_name", None)
        return name(self) if name is not None else type(backend).__name__.lower()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fast = self._fast_forward
        if fast is not None and self.backend == "auto" and x.device.type == "cpu":
            return fast(x)
        from npu_console.engine.quant.kernels import backend_for

        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        y = backend_for(self, x.device).forward(self, x2)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        g = f", group_size={self.group_size}" if self.group_size else ""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"method={self.method}{g}, bias={self.bias is not None}")


class QuantEmbedding(nn.Module):
    """Token embedding stored as int8 rows with one fp32 scale per row; a lookup dequantizes
    only the rows it reads. With a tied model it owns nothing and reads the int8 lm_head's
    weight and scales (one int8 copy of the vocabulary matrix, as the float model had one)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: torch.dtype,
                 tied_to: QuantLinear | None = None):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.float_dtype = dtype
        # a plain attribute in a tuple, not a submodule: the head is saved and moved as lm_head
        self._tied = (tied_to,) if tied_to is not None else None
        if tied_to is None:
            self.register_buffer("weight", torch.zeros(num_embeddings, embedding_dim,
                                                       dtype=torch.int8))
            self.register_buffer("weight_scale", torch.ones(num_embeddings))
        else:
            tied_to.keep_plain_weight = True

    @classmethod
    def from_embedding(cls, emb: nn.Embedding) -> QuantEmbedding:
        w = emb.weight.detach()
        mod = cls(emb.num_embeddings, emb.embedding_dim, w.dtype)
        q, s = qmath.quantize_weight(w)
        mod.weight.copy_(q)
        mod.weight_scale.copy_(s)
        return mod.to(w.device)

    @classmethod
    def tied(cls, head: QuantLinear) -> QuantEmbedding:
        return cls(head.out_features, head.in_features, head.float_dtype, tied_to=head)

    @property
    def is_tied(self) -> bool:
        return self._tied is not None

    def _tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        src = self._tied[0] if self._tied is not None else self
        return src.weight, src.weight_scale

    def _apply(self, fn, recurse=True):
        return _apply_keeping_fp32_scales(self, fn, recurse)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        q, scale = self._tables()
        rows = q[ids].to(torch.float32) * scale[ids].unsqueeze(-1)
        return rows.to(self.float_dtype)

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, int8"
                + (", tied to lm_head" if self.is_tied else ""))
