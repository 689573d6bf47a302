"""Ascend kernels through torch_npu, called exactly as the op docs and vllm-ascend call them
(design/ASCEND_INT8.md sections 2.1-2.5, 2.9):

* W8A16: `npu_weight_quant_batchmatmul(x, w.t(), scale, offset, bias=...)` on 910B/910C/310P.
  The op ADDS the offset; our weights are symmetric so the offset is zeros. Bias must be fp32
  when x is bf16. Per-group scales go in as (K/group, N) with antiquant_group_size.
* W8A8 dynamic (910B/910C only): `npu_dynamic_quant(x)` gives int8 rows + fp32 per-token
  scales, then `npu_quant_matmul(xq, w_kn, w_scale, pertoken_scale=..., output_dtype=x.dtype)`.
* W8A8 static: `npu_quantize(x, 1/input_scale (K,), zeros (K,), torch.qint8, -1, False)`, then
  `npu_quant_matmul(xq, w_kn, deq_scale, bias=int32 quant_bias, output_dtype=x.dtype)`;
  deq_scale = input_scale * weight_scale, fp32 for bf16 output, `npu_trans_quant_param` int64
  for fp16 output (the packed FP19 word the cube unit wants).
Every op caps K and N at 65535 (lm_head stays float for that reason too).
"""

from __future__ import annotations

import sys

import torch

from .errors import QuantError

MAX_DIM = 65535


def _torch_npu():
    mod = sys.modules.get("torch_npu")
    if mod is None:
        import torch_npu as mod
    return mod


def soc_name() -> str:
    try:
        return str(_torch_npu().npu.get_device_name(0))
    except Exception:  # noqa: BLE001  device query failed: assume the common 910B and let the op decide
        return "Ascend910B"


def is_310p(name: str | None = None) -> bool:
    return "310P" in (name or soc_name())


def check_supported(method: str, dtype: torch.dtype, in_features: int, out_features: int,
                    soc: str | None = None) -> None:
    """Raise QuantError when this chip cannot run `method` for a layer of this shape."""
    soc = soc or soc_name()
    if max(in_features, out_features) > MAX_DIM:
        raise QuantError(f"layer {out_features}x{in_features} exceeds the NPU int8 matmul limit "
                         f"of {MAX_DIM}; skip it")
    if is_310p(soc):
        if dtype != torch.float16:
            raise QuantError(f"{soc} computes in float16 only; load the model with --dtype float16")
        if method == "w8a8-dynamic":
            raise QuantError(f"w8a8-dynamic needs per-token scales, which {soc} lacks; "
                             "use w8a8-static or w8a16")
    elif dtype not in (torch.float16, torch.bfloat16):
        raise QuantError(f"NPU int8 kernels take float16 or bfloat16 activations, not {dtype}")


class NpuBackend:
    def packs_own_copy(self, mod) -> bool:
        """True when forward no longer reads mod.weight once prepared."""
        return mod.method != "w8a16"

    def prepare(self, mod, dtype: torch.dtype) -> dict:
        key = ("npu", dtype)
        cached = mod._cache.get(key)
        if cached is not None:
            return cached
        npu = _torch_npu()
        check_supported(mod.method, dtype, mod.in_features, mod.out_features)
        c: dict = {}
        if mod.method == "w8a16":
            c["w"] = mod.weight  # passed as .t(): the docs' recommended per-channel layout
            if mod.group_size:
                c["scale"] = mod.weight_scale.t().contiguous().to(dtype)  # (K/g, N)
            else:
                c["scale"] = mod.weight_scale.to(dtype)
            c["offset"] = torch.zeros_like(c["scale"])
            if mod.bias is not None:
                c["bias"] = mod.bias.float() if dtype == torch.bfloat16 else mod.bias.to(dtype)
        else:
            # the (K, N) copy is dtype-independent: keep one, even when the plain weight is gone
            if "npu_w_kn" not in mod._cache:
                mod._cache["npu_w_kn"] = mod.weight.t().contiguous()
            c["w_kn"] = mod._cache["npu_w_kn"]
            k = mod.in_features
            if mod.method == "w8a8-dynamic":
                c["scale"] = mod.weight_scale.float()
                if mod.bias is not None:
                    c["bias"] = mod.bias.float()
            else:
                s_in = mod.input_scale.float()
                deq = (s_in * mod.weight_scale.float()).contiguous()
                c["inv_in"] = (1.0 / s_in).expand(k).to(dtype).contiguous()
                c["zero_in"] = torch.zeros(k, dtype=dtype, device=deq.device)
                c["deq"] = deq if dtype == torch.bfloat16 else npu.npu_trans_quant_param(deq)
                if mod.bias is not None:
                    c["qbias"] = torch.round(mod.bias.float() / deq).to(torch.int32)
        mod._cache[key] = c
        return c

    def forward(self, mod, x: torch.Tensor) -> torch.Tensor:
        npu = _torch_npu()
        c = self.prepare(mod, x.dtype)
        if mod.method == "w8a16":
            return npu.npu_weight_quant_batchmatmul(
                x, c["w"].t(), c["scale"], c["offset"], bias=c.get("bias"),
                antiquant_group_size=mod.group_size)
        if mod.method == "w8a8-dynamic":
            xq, tok_scale = npu.npu_dynamic_quant(x)
            # bias with pertoken_scale is only documented for bf16 output; add it after otherwise
            fused = x.dtype == torch.bfloat16
            y = npu.npu_quant_matmul(xq, c["w_kn"], c["scale"], pertoken_scale=tok_scale,
                                     bias=c.get("bias") if fused else None, output_dtype=x.dtype)
            if not fused and mod.bias is not None:
                y = y + mod.bias.to(y.dtype)
            return y
        xq = npu.npu_quantize(x, c["inv_in"], c["zero_in"], torch.qint8, -1, False)
        return npu.npu_quant_matmul(xq, c["w_kn"], c["deq"], bias=c.get("qbias"),
                                    output_dtype=x.dtype)
