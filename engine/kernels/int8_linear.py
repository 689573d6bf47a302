"""`Int8Linear`: an int8 linear layer as the kernels read it, the one piece of an INT8 model
that the quantizer, the kernels and the runtime all touch.

It owns the int8 weight (N, K, row-major), fp32 scales ((N,) per channel or (N, K/group) per
group; fp16 values where they fit, qmath.weight_scales, which the CPU kernels' packed copy keeps
in fp16), the float bias and, for static W8A8, the calibrated per-tensor input scale. The product
is done by a backend chosen from the input's device (engine.kernels), so the same module runs
on CPU, CUDA and Ascend. engine.quant.qlinear.QuantLinear builds on it (rounding a float layer
into it); the runtime's native decode step reads this layout directly, so it needs this module
and never engine.quant.
"""

from __future__ import annotations

import torch
from torch import nn

from . import backend_for
from .turn import apply_turn, turn_fits


def apply_keeping_fp32_scales(mod: nn.Module, fn, recurse: bool):
    """nn.Module._apply (casts, device moves) for int8 modules: scales stay fp32 whatever
    dtype the model is cast to (a bf16 scale would add a systematic 0.4 % error per output
    channel), only their device follows; `float_dtype` follows casts even without a float
    buffer to read it from."""
    keep = {k: mod._buffers[k] for k in ("weight_scale", "input_scale", "turn_signs", "turn_odd")
            if mod._buffers.get(k) is not None}
    out = nn.Module._apply(mod, fn, recurse)
    for k, old in keep.items():
        moved = mod._buffers[k]
        if moved.dtype != torch.float32:
            mod._buffers[k] = old.to(device=moved.device)
    mod.float_dtype = fn(torch.empty(0, dtype=mod.float_dtype)).dtype
    return out


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor, id_dims: int) -> torch.Tensor:
    """fp32 rows from int8 rows q (*ids, K) and their scales: (*ids) per row, or (*ids, K / g)
    per group of g inputs (a GGUF's Q8_0 table: 32); id_dims = len(ids)."""
    rows = q.to(torch.float32)
    if scale.dim() > id_dims:
        return (rows.unflatten(-1, (scale.shape[-1], -1)) * scale.unsqueeze(-1)).flatten(-2)
    return rows * scale.unsqueeze(-1)


class Int8Linear(nn.Module):
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
        # the CPU kernels' packed copy of the weight (kernels.packed.PackedW8A16, VNNI builds),
        # which serving keeps in place of the plain weight and scales
        self.packed = None
        # set by a CPU backend whose kernel needs no per-call dispatch (kernels/native.py)
        self._fast_forward = None
        self.keep_plain_weight = False  # True when a tied QuantEmbedding reads its rows
        # How activations are quantized. W8A16 on the native CPU kernels: "block" (16-bit
        # block floating point, for layer inputs with outlier channels) or "token" (int16 with
        # one scale per row: the int8 lm_head, whose input is the final norm's output;
        # cpu_gemm.c npc_w8a16_tok). w8a8-dynamic: "token" (one int8 scale per row, what the
        # NPU, CUDA and fbgemm kernels and the exports do) or "block" (one per 32 values, as
        # llama.cpp's Q8_0: the reference and the native CPU kernels; an outlier channel then
        # coarsens only its block). Static W8A8 has its one calibrated scale.
        self.act_rows = "block" if method == "w8a16" else "token"
        # the input turned before it is quantized (kernels/turn.py; set_input_turn): the
        # weight then holds W R. None: not turned (buffers of None are not saved)
        self.register_buffer("turn_signs", None)
        self.register_buffer("turn_odd", None)

    def set_input_turn(self, signs: torch.Tensor, odd: torch.Tensor) -> None:
        """Turn every input by R = D (H (x) Q) (signs: D's diagonal [K], odd: Q [m, m]) before
        the product; the weight must already hold W R."""
        k, m = self.in_features, odd.shape[0]
        if tuple(signs.shape) != (k,) or tuple(odd.shape) != (m, m) or not turn_fits(k, m):
            raise ValueError(f"a turn of {tuple(signs.shape)} signs and a {tuple(odd.shape)} "
                             f"odd part does not fit {k} inputs")
        dev = self.weight.device
        self.turn_signs = signs.to(device=dev, dtype=torch.float32).contiguous()
        self.turn_odd = odd.to(device=dev, dtype=torch.float32).contiguous()
        self._fast_forward = None

    def _apply(self, fn, recurse=True):
        if self.weight.numel() == 0:
            # packed for serving: the packed copy is all that is left, keep it (moving such a
            # model to another device type needs a reload)
            return super()._apply(fn, recurse)
        self._cache.clear()  # packed copies belong to the old device/dtype
        self.packed = None
        self._fast_forward = None
        return apply_keeping_fp32_scales(self, fn, recurse)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fast_forward"] = None  # a closure over this very module; rebuilt on first use
        return state

    def release_plain_weight(self) -> None:
        """Free the plain int8 weight once a backend has its own packed copy (saves memory);
        export needs it, so this is only for serving."""
        backend = backend_for(self, self.weight.device)
        if not backend.packs_own_copy(self):
            return
        getattr(backend, "pack_for_serving", backend.prepare)(self, self.float_dtype)
        # a tied embedding reads rows of the weight: kept, unless the packed copy has them
        if not self.keep_plain_weight or self.packed is not None:
            self.weight = torch.empty(0, dtype=torch.int8, device=self.weight.device)
        if self.packed is not None:
            # its scales are in the packed copy too, as fp16 (kernels/packed.py)
            self.weight_scale = torch.empty(0, dtype=torch.float32,
                                            device=self.weight_scale.device)

    def weight_rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(int8 rows, their scales) of output channels `ids`: what a tied embedding looks
        up, from the plain weight or, once serving released it, from the packed copy."""
        if self.weight.numel():
            return self.weight[ids], self.weight_scale[ids]
        q, scale = self._packed_copy().rows(ids)
        return q, scale if self.group_size else scale.squeeze(-1)

    def float_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """fp32 rows (*ids.shape, K) of the dequantized weight: a tied embedding's lookup. From
        the packed copy in one native call where serving released the plain weight."""
        if not self.weight.numel() and self.packed is not None and ids.device.type == "cpu":
            return self.packed.dequant_rows(ids)
        q, scale = self.weight_rows(ids)
        return dequantize_rows(q, scale, ids.dim())

    def plain_scale(self) -> torch.Tensor:
        """The fp32 weight scales ((N,) or (N, K / group)), rebuilt like plain_weight."""
        if self.weight_scale.numel():
            return self.weight_scale
        scale = self._packed_copy().unpack_scale()
        return scale if self.group_size else scale.view(-1)

    def _packed_copy(self):
        if self.packed is None:
            raise RuntimeError("this int8 layer's weight was released for serving and its "
                               "packed copy cannot be read back")
        return self.packed

    def plain_weight(self) -> torch.Tensor:
        """The int8 (N, K) weight. Where serving released it, rebuilt from the CPU kernels'
        packed copy (VNNI builds), so the reference backend and dequantization still read it;
        a copy another backend packed cannot be read back."""
        if self.weight.numel() or not (self.in_features and self.out_features):
            return self.weight
        return self._packed_copy().unpack()

    def kernel_name(self) -> str:
        """Which product runs this layer on its device ("native", "fbgemm", ...)."""
        backend = backend_for(self, self.weight.device)
        name = getattr(backend, "kernel_name", None)
        return name(self) if name is not None else type(backend).__name__.lower()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.turn_signs is not None:
            x = apply_turn(x, self.turn_signs, self.turn_odd)
        fast = self._fast_forward
        if fast is not None and self.backend == "auto" and x.device.type == "cpu":
            return fast(x)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        y = backend_for(self, x.device).forward(self, x2)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        g = f", group_size={self.group_size}" if self.group_size else ""
        t = ", input turned" if self.turn_signs is not None else ""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"method={self.method}{g}, bias={self.bias is not None}{t}")
