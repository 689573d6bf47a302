"""Decode steps of Llama-shaped models on CPU in one native call (npc_decode_layers in
engine/kernels/cpu_decode.c): norms, q/k/v, rotary, KV write, attention, o, MLP and
residuals of every layer, with the products on our fp32 / W8A16 (per-channel or per-group
scales) / W8A8 kernels.

Why: in a batch-1 decode step of the Qwen2.5-0.5B shape the work around the products (~45
PyTorch ops per layer and ~170 Python-to-kernel crossings) cost 15-20 ms on the 2-core test
machine: a fifth of an fp32 step, over a third of an int8 one; the native step takes 70 ms
instead of 90 in fp32, 27 instead of 42 with int8 layers and head (docs/benchmarks.md). BatchedRunner
uses this for steps made only of decode rows; prefill chunks, and models or devices it does not
cover, keep the PyTorch path, which stays the reference the tests compare it against.

`plan_for(runner)` returns a DecodePlan, or None with the reason. The plan holds pointers to the
model's tensors, taken once (as the runner looks its modules up once): weights updated in place
stay visible, but replacing a module or parameter after the runner is built is not supported.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import torch

F32, W8A16, W8A8, W8A8_BLOCK = 0, 1, 2, 3
MAX_ROWS = 64  # decode rows per step; more (rare) go to the PyTorch path


class _Linear(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("per_token", ctypes.c_int32),
                ("static_scale", ctypes.c_float), ("group", ctypes.c_int32),
                ("w", ctypes.c_void_p), ("scale", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("n", ctypes.c_int64), ("k", ctypes.c_int64), ("wsum", ctypes.c_void_p)]


class _Layer(ctypes.Structure):
    _fields_ = [(n, _Linear) for n in ("q", "k", "v", "o", "gate", "up", "down")] + [
        (n, ctypes.c_void_p) for n in ("in_norm", "post_norm", "q_norm", "k_norm", "kc", "vc")]


class _Model(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in
                ("hidden", "heads", "kv_heads", "head_dim", "inter", "max_len")] + [
        ("eps", ctypes.c_float), ("qk_eps", ctypes.c_float), ("scaling", ctypes.c_float),
        ("n_layers", ctypes.c_int32)]


class Unsupported(Exception):
    """The model (or one of its parts) is outside what the native step covers."""


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _fp32_cpu(t: torch.Tensor | None, what: str, shape: tuple | None = None) -> torch.Tensor | None:
    if t is None:
        return None
    if t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous():
        raise Unsupported(f"{what} is not a contiguous float32 CPU tensor")
    if shape is not None and tuple(t.shape) != shape:
        raise Unsupported(f"{what} has shape {tuple(t.shape)}, expected {shape}")
    return t


def _linear(mod: Any, n: int, k: int, keep: list) -> _Linear:
    """The descriptor of one projection: a plain fp32 nn.Linear, or an int8 layer (the kernels'
    Int8Linear, which engine.quant's QuantLinear is) whose plain int8 weight is kept."""
    from ..kernels import native
    from ..kernels.int8_linear import Int8Linear

    name = type(mod).__name__
    if (getattr(mod, "out_features", None), getattr(mod, "in_features", None)) != (n, k):
        raise Unsupported(f"{name} is {getattr(mod, 'out_features', '?')} x "
                          f"{getattr(mod, 'in_features', '?')}, expected {n} x {k}")
    bias = _fp32_cpu(getattr(mod, "bias", None), f"{name} bias", (n,))
    if type(mod) is torch.nn.Linear:
        w = _fp32_cpu(mod.weight, "a linear weight", (n, k))
        keep += [w, bias]
        return _Linear(F32, 0, 0.0, 0, _ptr(w), None, _ptr(bias), n, k)
    if not isinstance(mod, Int8Linear):
        raise Unsupported(f"{name} layers have no native kernel")
    group = mod.group_size
    if group and (mod.method != "w8a16" or not native.group_supported(k, group)):
        raise Unsupported(f"{mod.method} with int8 scales per group of {group} inputs has no "
                          "native kernel")
    if mod.backend != "auto":  # a test or a user pinned this layer's kernel: honour it
        raise Unsupported(f"an int8 layer is pinned to the {mod.backend!r} backend")
    w = mod.weight
    if w.dtype != torch.int8 or w.device.type != "cpu" or tuple(w.shape) != (n, k) \
            or not w.is_contiguous():
        raise Unsupported("an int8 layer's plain weight is not kept (packed for another kernel)")
    scale = _fp32_cpu(mod.weight_scale, "an int8 layer's scales",
                      (n, k // group) if group else (n,))
    keep += [w, scale, bias]
    if mod.method == "w8a16":
        return _Linear(W8A16, 0, 0.0, group, _ptr(w), _ptr(scale), _ptr(bias), n, k)
    if mod.method == "w8a8-dynamic" and mod.act_rows == "block":
        return _Linear(W8A8_BLOCK, 0, 0.0, 0, _ptr(w), _ptr(scale), _ptr(bias), n, k)
    static = mod.method == "w8a8-static"
    wsum = native.weight_sums(w)
    keep.append(wsum)
    return _Linear(W8A8, 0 if static else 1, float(mod.input_scale.item()) if static else 0.0,
                   0, _ptr(w), _ptr(scale), _ptr(bias), n, k, _ptr(wsum))


def _norm(mod: Any, size: int, keep: list) -> tuple[int, float]:
    """(weight pointer, eps) of a Llama-style RMSNorm (x * rsqrt(mean(x^2) + eps) * weight)."""
    name = type(mod).__name__
    if not name.endswith("RMSNorm") or not hasattr(mod, "variance_epsilon"):
        raise Unsupported(f"norm {name} is not a Llama-style RMSNorm")
    w = _fp32_cpu(mod.weight, f"{name} weight", (size,))
    keep.append(w)
    return _ptr(w), float(mod.variance_epsilon)


def _is_silu(act: Any) -> bool:
    return type(act).__name__ in ("SiLU", "SiLUActivation")


@dataclass
class DecodePlan:
    model: _Model
    layers: Any  # ctypes array of _Layer
    keep: list  # the tensors the descriptors point into, kept alive with them
    fn: Any
    norm: tuple[int, float]  # the final norm's (weight pointer, eps)
    norm_fn: Any

    def run(self, h: torch.Tensor, slots: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor,
            sin: torch.Tensor) -> None:
        """Every layer of a decode step, in place on h [M, hidden] (fp32, contiguous); slots
        and pos: int64 [M], each row's KV slot and position."""
        m = h.shape[0]
        slots_t = slots.to(torch.int64).contiguous()
        pos_t = pos.to(torch.int64).contiguous()
        cos = cos.contiguous()
        sin = sin.contiguous()
        if self.fn(ctypes.byref(self.model), self.layers, h.data_ptr(), m, slots_t.data_ptr(),
                   pos_t.data_ptr(), cos.data_ptr(), sin.data_ptr(), torch.get_num_threads()):
            raise MemoryError(f"decode step scratch for {m} rows")

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        """The model's final RMSNorm of h [M, hidden] (fp32, contiguous), as a new tensor."""
        out = torch.empty_like(h)
        self.norm_fn(h.data_ptr(), self.norm[0], self.norm[1], out.data_ptr(), h.shape[0],
                     h.shape[1])
        return out


def plan_for(runner: Any) -> tuple[DecodePlan | None, str]:
    """The native decode plan of a BatchedRunner, or (None, why not)."""
    from ..kernels import native

    if runner.device.type != "cpu":
        return None, "not on CPU"
    if runner.dtype != torch.float32:
        return None, f"float parts in {str(runner.dtype).removeprefix('torch.')}, not float32"
    if runner.kv.k.dtype != torch.float32:
        return None, "KV cache is not float32"
    lib = native.library()
    if lib is None:
        return None, "native kernels unavailable"
    try:
        return _build(runner, lib), ""
    except Unsupported as exc:
        return None, str(exc)


def _build(runner: Any, lib: Any) -> DecodePlan:
    cfg = runner.model.config
    hidden = cfg.hidden_size
    nh, kvh, hd = runner.num_heads, runner.num_kv_heads, runner.head_dim
    if hd % 2 or nh % kvh:
        raise Unsupported("head layout not supported")
    if getattr(cfg, "partial_rotary_factor", 1.0) not in (None, 1.0):
        raise Unsupported("partial rotary embedding")
    keep: list = [runner.kv.k, runner.kv.v]
    layers = (_Layer * len(runner.layers))()
    inter = None
    eps = qk_eps = None
    for li, layer in enumerate(runner.layers):
        a, mlp = layer.self_attn, layer.mlp
        if not _is_silu(getattr(mlp, "act_fn", None)):
            raise Unsupported("MLP activation is not SiLU")
        gate = getattr(mlp, "gate_proj", None)
        if gate is None:
            raise Unsupported("MLP is not gated")
        inter = inter or gate.out_features
        d = layers[li]
        d.q = _linear(a.q_proj, nh * hd, hidden, keep)
        d.k = _linear(a.k_proj, kvh * hd, hidden, keep)
        d.v = _linear(a.v_proj, kvh * hd, hidden, keep)
        d.o = _linear(a.o_proj, hidden, nh * hd, keep)
        d.gate = _linear(gate, inter, hidden, keep)
        d.up = _linear(mlp.up_proj, inter, hidden, keep)
        d.down = _linear(mlp.down_proj, hidden, inter, keep)
        d.in_norm, e1 = _norm(layer.input_layernorm, hidden, keep)
        d.post_norm, e2 = _norm(layer.post_attention_layernorm, hidden, keep)
        if e1 != e2 or (eps is not None and e1 != eps):
            raise Unsupported("layers use different norm eps")
        eps = e1
        if runner.has_qk_norm:
            d.q_norm, e3 = _norm(a.q_norm, hd, keep)
            d.k_norm, e4 = _norm(a.k_norm, hd, keep)
            if e3 != e4 or (qk_eps is not None and e3 != qk_eps):
                raise Unsupported("q/k norms use different eps")
            qk_eps = e3
        d.kc = runner.kv.k[li].data_ptr()
        d.vc = runner.kv.v[li].data_ptr()
    model = _Model(hidden, nh, kvh, hd, inter, runner.max_len, eps, qk_eps or 0.0,
                   float(runner.scaling), len(runner.layers))
    norm = _norm(runner.inner.norm, hidden, keep)
    return DecodePlan(model, layers, keep, lib.npc_decode_layers, norm, lib.npc_rmsnorm)
