"""A stand-in for the `torch_npu` INT8 operators, for machines without Ascend hardware.

It enforces the documented contracts (Ascend/op-plugin docs as summarised in
design/ASCEND_INT8.md, sections 2.1-2.5 and 2.9): argument names, layouts, dtypes, shape limits and
per-chip availability, and raises the way a real op would (RuntimeError) when one is broken.
Results are computed on the CPU with the documented math, in float64 where integer products
must be exact. Tensors stay on the CPU: the quantized module is told to use its "npu" backend.

Install with `install(soc="Ascend910B3")`, which returns the module placed in
sys.modules["torch_npu"]; `uninstall()` removes it.
"""

from __future__ import annotations

import struct
import sys
import types
from typing import ClassVar

import torch

MAX_DIM = 65535


class StandinError(RuntimeError):
    """What a real op raises for invalid input (the real ones raise RuntimeError too)."""


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise StandinError(msg)


class _State:
    soc = "Ascend910B3"
    calls: ClassVar[list[str]] = []


def _is_310p() -> bool:
    return "310P" in _State.soc


def _fp19(bits32: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits32 & 0xFFFFE000))[0]


def npu_trans_quant_param(scale, offset=None, round_mode=0):
    """fp32 scale -> int64 deq word: FP19 (top 19 bits) in bits 0-31, bit 46 set."""
    _State.calls.append("npu_trans_quant_param")
    _need(scale.dtype == torch.float32, "npu_trans_quant_param: scale must be float32")
    _need(scale.dim() == 1 or (scale.dim() == 2 and scale.shape[0] == 1),
          "npu_trans_quant_param: scale must be (1,), (n,) or (1, n)")
    _need(offset is None, "stand-in: offset packing not modelled")
    bits = scale.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    if round_mode == 1:
        bits = (bits + 0x1000) & 0xFFFFFFFF
    return (bits & 0xFFFFE000) | (1 << 46)


def _decode_scale(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype == torch.int64:
        _need(bool(((scale >> 46) & 1).all()), "int64 scale must come from npu_trans_quant_param")
        low = (scale & 0xFFFFE000).to(torch.int32)
        return low.view(torch.float32).double()
    return scale.double()


def npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None,
                                 quant_scale=None, quant_offset=None, bias=None,
                                 antiquant_group_size=0, inner_precise=0, weight_dtype=None):
    _State.calls.append("npu_weight_quant_batchmatmul")
    allowed = (torch.float16,) if _is_310p() else (torch.float16, torch.bfloat16)
    _need(x.dtype in allowed, f"x dtype {x.dtype} not supported on {_State.soc}")
    _need(x.dim() == 2, "x must be (M, K)")
    _need(weight.dtype == torch.int8 and weight.dim() == 2, "weight must be int8 (K, N)")
    k, n = weight.shape
    _need(x.shape[1] == k, f"x (M, {x.shape[1]}) does not match weight (K={k}, N={n})")
    _need(1 <= k <= MAX_DIM and 1 <= n <= MAX_DIM, "K and N must be in [1, 65535]")
    _need(quant_scale is None or not _is_310p(), "quant_scale is not supported on 310P")
    _need(antiquant_scale.dtype == x.dtype, "antiquant_scale dtype must equal x dtype")
    g = antiquant_group_size
    if g:
        _need(g % 32 == 0 and 32 <= g <= k - 1, "antiquant_group_size: multiple of 32 in [32, K-1]")
        _need(tuple(antiquant_scale.shape) == ((k + g - 1) // g, n),
              f"per-group antiquant_scale must be (ceil(K/g), N), got {tuple(antiquant_scale.shape)}")
    else:
        _need(tuple(antiquant_scale.shape) in ((n,), (1, n), (1,), (1, 1)),
              f"antiquant_scale must be (N,), (1, N) or per-tensor, got "
              f"{tuple(antiquant_scale.shape)}")
    if antiquant_offset is not None:
        _need(antiquant_offset.shape == antiquant_scale.shape
              and antiquant_offset.dtype == antiquant_scale.dtype,
              "antiquant_offset must match antiquant_scale in shape and dtype")
    if bias is not None:
        want = torch.float32 if x.dtype == torch.bfloat16 else torch.float16
        _need(bias.dtype == want, f"bias must be {want} for {x.dtype} x")
        _need(tuple(bias.shape) in ((n,), (1, n)), "bias must be (N,) or (1, N)")
    w = weight.double()
    if antiquant_offset is not None:
        off = antiquant_offset.double()
        w = w + (off.repeat_interleave(g, 0)[:k] if g else off.reshape(1, -1))
    s = antiquant_scale.double()
    w = w * (s.repeat_interleave(g, 0)[:k] if g else s.reshape(1, -1))
    y = x.double() @ w
    if bias is not None:
        y = y + bias.double().reshape(1, -1)
    return y.to(x.dtype)


def npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None):
    _State.calls.append("npu_dynamic_quant")
    _need(not _is_310p(), f"npu_dynamic_quant is not supported on {_State.soc}")
    _need(x.dtype in (torch.float16, torch.bfloat16), "x must be float16 or bfloat16")
    _need(x.dim() >= 2, "x must have at least 2 dims")
    _need(dst_type in (None, torch.int8), "stand-in models int8 output only")
    xf = x.double()
    if smooth_scales is not None:
        _need(smooth_scales.shape == (x.shape[-1],), "smooth_scales must be (K,)")
        xf = xf * smooth_scales.double()
    scale = (xf.abs().amax(-1) / 127.0).clamp_min(1e-12)
    y = torch.round(xf / scale.unsqueeze(-1)).clamp(-128, 127).to(torch.int8)
    return y, scale.float()


def npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True):
    _State.calls.append("npu_quantize")
    _need(dtype in (torch.qint8, torch.quint8, torch.int32), f"unsupported dtype {dtype}")
    if not div_mode:
        _need(scales.dtype == input.dtype, "div_mode=False: scales must have the input's dtype")
        _need(zero_points is None or zero_points.dtype == input.dtype,
              "div_mode=False: zero_points must have the input's dtype")
        size = input.shape[axis]
        _need(scales.dim() == 1 and scales.shape[0] in (1, size),
              f"scales must be 1-D of size 1 or {size} (dim {axis})")
    shape = [1] * input.dim()
    shape[axis] = -1
    s = scales.double().reshape(shape)
    z = zero_points.double().reshape(shape) if zero_points is not None else 0.0
    v = input.double() * s + z if not div_mode else input.double() / s + z
    if dtype == torch.qint8:
        return torch.round(v).clamp(-128, 127).to(torch.int8)
    if dtype == torch.quint8:
        return torch.round(v).clamp(0, 255).to(torch.uint8)
    return torch.round(v).to(torch.int32)


def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
                     output_dtype=None, group_sizes=None):
    _State.calls.append("npu_quant_matmul")
    _need(x1.dtype == torch.int8 and x2.dtype == torch.int8, "x1 and x2 must be int8")
    _need(2 <= x1.dim() <= 6 and 2 <= x2.dim() <= 6, "x1/x2 must have 2-6 dims")
    _need(x1.shape[-1] <= MAX_DIM and x2.shape[-1] <= MAX_DIM, "last dims must be <= 65535")
    k, n = x2.shape[-2], x2.shape[-1]
    _need(x1.shape[-1] == k, f"x1 (..., {x1.shape[-1]}) does not match x2 ({k}, {n})")
    _need(scale.dim() == 1 and scale.shape[0] in (1, n), "scale must be (1,) or (N,)")
    soc310 = _is_310p()
    scale_ok = (torch.float32, torch.int64) if soc310 else (torch.float32, torch.int64,
                                                            torch.bfloat16)
    _need(scale.dtype in scale_ok, f"scale dtype {scale.dtype} not supported on {_State.soc}")
    out = torch.int8 if output_dtype is None else output_dtype
    if pertoken_scale is not None:
        _need(not soc310, "pertoken_scale is not supported on 310P")
        _need(pertoken_scale.dtype == torch.float32 and pertoken_scale.dim() == 1
              and pertoken_scale.shape[0] == x1.shape[-2],
              "pertoken_scale must be float32 (M,), M = x1.shape[-2]")
    if soc310:
        _need(out in (torch.int8, torch.float16), "310P output must be int8 or float16")
        _need(bias is None or bias.dtype == torch.int32, "310P bias must be int32")
    else:
        # 910B table: (int64|fp32 scale, int32|no bias, no pertoken) -> fp16/int8;
        # (fp32|bf16 scale, int32|bf16|fp32|no bias, pertoken fp32|none) -> bf16;
        # (fp32 scale, pertoken fp32) -> fp16.
        if out == torch.bfloat16:
            _need(scale.dtype in (torch.float32, torch.bfloat16), "bf16 output needs fp32/bf16 scale")
            _need(bias is None or bias.dtype in (torch.int32, torch.bfloat16, torch.float32),
                  "bf16 output: bias must be int32, bf16 or fp32")
        elif out == torch.float16 and pertoken_scale is not None:
            _need(scale.dtype == torch.float32, "fp16 output with pertoken_scale needs fp32 scale")
            _need(bias is None, "fp16 output with pertoken_scale: bias not supported")
        elif out in (torch.float16, torch.int8):
            _need(scale.dtype in (torch.int64, torch.float32), "fp16/int8 output needs int64/fp32 scale")
            _need(bias is None or bias.dtype == torch.int32, "fp16/int8 output needs an int32 bias")
        else:
            _need(out == torch.int32, f"unsupported output_dtype {out}")
    acc = x1.double() @ x2.double()
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.double()
    y = acc * _decode_scale(scale)
    if pertoken_scale is not None:
        y = y * pertoken_scale.double().unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        y = y + bias.double()
    if offset is not None:
        y = y + offset.double()
    if out == torch.int8:
        return torch.round(y).clamp(-128, 127).to(torch.int8)
    return y.to(out)


def npu_format_cast(input, acl_format, customize_dtype=None):
    _State.calls.append("npu_format_cast")
    _need(acl_format in (2, 29), "stand-in models ND (2) and FRACTAL_NZ (29)")
    return input.clone()


def install(soc: str = "Ascend910B3") -> types.ModuleType:
    mod = types.ModuleType("torch_npu")
    mod.__dict__.update({
        "npu_trans_quant_param": npu_trans_quant_param,
        "npu_weight_quant_batchmatmul": npu_weight_quant_batchmatmul,
        "npu_dynamic_quant": npu_dynamic_quant,
        "npu_quantize": npu_quantize,
        "npu_quant_matmul": npu_quant_matmul,
        "npu_format_cast": npu_format_cast,
        "__standin__": True,
    })
    mod.npu = types.SimpleNamespace(get_device_name=lambda i=0: _State.soc,
                                    is_available=lambda: True)
    _State.soc = soc
    _State.calls = []
    mod.calls = _State.calls
    sys.modules["torch_npu"] = mod
    return mod


def uninstall() -> None:
    sys.modules.pop("torch_npu", None)
