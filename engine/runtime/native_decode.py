"""Decode steps of Llama-shaped models on CPU in one native call (npc_decode_layers in
engine/kernels/cpu_decode.c): norms, q/k/v, rotary, KV write, attention, o, MLP and
residuals of every layer, with the products on our fp32 / W8A16 (per-channel or per-group
scales) / W8A8 kernels. The family module says where its parts are (`native_parts`): fused
projections (Phi-3's qkv_proj and gate_up_proj) are handed over as row ranges of one weight,
Gemma's (1 + w) norms as w + 1, its sandwich norms, GeGLU, windows, soft-caps and per-kind
rotary tables as the kernel's switches.

Why: in a batch-1 decode step of the Qwen2.5-0.5B shape the work around the products (~45
PyTorch ops per layer and ~170 Python-to-kernel crossings) cost 15-20 ms on the 2-core test
machine: a fifth of an fp32 step, over a third of an int8 one; the native step takes 70 ms
instead of 90 in fp32, 27 instead of 42 with int8 layers and head (docs/benchmarks.md). BatchedRunner
uses this for steps made only of decode rows; prefill chunks, and models or devices it does not
cover, keep the PyTorch path, which stays the reference the tests compare it against.

`plan_for(runner)` returns a DecodePlan, or None with the reason. The plan holds pointers to the
model's tensors, taken once (as the runner looks its modules up once): weights updated in place
stay visible (except Gemma's norm weights, copied as 1 + w), but replacing a module or
parameter after the runner is built is not supported.
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
                ("n", ctypes.c_int64), ("k", ctypes.c_int64), ("wsum", ctypes.c_void_p),
                ("packed", ctypes.c_int32)]


class _Layer(ctypes.Structure):
    _fields_ = [(n, _Linear) for n in ("q", "k", "v", "o", "gate", "up", "down")] + [
        (n, ctypes.c_void_p) for n in ("in_norm", "post_norm", "q_norm", "k_norm", "kc", "vc",
                                       "attn_out_norm", "mlp_out_norm")] + [
        ("window", ctypes.c_int64), ("rope", ctypes.c_int64),
        ("turn_signs", ctypes.c_void_p), ("turn_odd", ctypes.c_void_p), ("turn_m", ctypes.c_int64)]

TURN_MAX_M = 256  # cpu_decode.c NPC_TURN_MAX_M


class _Model(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in
                ("hidden", "heads", "kv_heads", "head_dim", "inter", "max_len")] + [
        ("eps", ctypes.c_float), ("qk_eps", ctypes.c_float), ("scaling", ctypes.c_float),
        ("n_layers", ctypes.c_int32), ("rot_dim", ctypes.c_int64), ("softcap", ctypes.c_float),
        ("act", ctypes.c_int32), ("kv_half", ctypes.c_int32)]


SILU, GELU_TANH = 0, 1
# the MLP gate activations the kernel has, by the module class transformers builds
ACTIVATIONS = {"SiLU": SILU, "SiLUActivation": SILU, "GELUTanh": GELU_TANH,
               "PytorchGELUTanh": GELU_TANH}


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


def _linear(mod: Any, n: int, k: int, keep: list, row0: int | None = None) -> _Linear:
    """The descriptor of one projection: a plain fp32 nn.Linear, or an int8 layer (the kernels'
    Int8Linear, which engine.quant's QuantLinear is) whose plain int8 weight is kept. `row0`:
    the projection is rows [row0, row0 + n) of a fused module (its weight, scales, bias and
    weight sums are row-major, so a slice is an offset); None: the whole module."""
    from ..kernels import native
    from ..kernels.int8_linear import Int8Linear
    from ..kernels.packed import PACK_CHANNELS

    name = type(mod).__name__
    rows = getattr(mod, "out_features", None)
    if rows is None or getattr(mod, "in_features", None) != k \
            or (rows != n if row0 is None else row0 + n > rows):
        raise Unsupported(f"{name} is {rows or '?'} x {getattr(mod, 'in_features', '?')}, "
                          f"expected {n} x {k}" + (f" from row {row0}" if row0 else ""))
    row0 = row0 or 0
    bias = _fp32_cpu(getattr(mod, "bias", None), f"{name} bias", (rows,))
    if type(mod) is torch.nn.Linear:
        w = _fp32_cpu(mod.weight, "a linear weight", (rows, k))
        keep += [w, bias]
        return _Linear(F32, 0, 0.0, 0, _at(w, row0), None, _at(bias, row0), n, k)
    if not isinstance(mod, Int8Linear):
        raise Unsupported(f"{name} layers have no native kernel")
    group = mod.group_size
    if group and (mod.method != "w8a16" or not native.group_supported(k, group)):
        raise Unsupported(f"{mod.method} with int8 scales per group of {group} inputs has no "
                          "native kernel")
    if mod.backend != "auto":  # a test or a user pinned this layer's kernel: honour it
        raise Unsupported(f"an int8 layer is pinned to the {mod.backend!r} backend")
    packed = getattr(mod, "packed", None)  # the block products on VNNI (kernels/packed.py)
    if packed is not None:
        if row0 % PACK_CHANNELS:
            raise Unsupported(f"a packed int8 projection starts at row {row0}, not at a strip "
                              f"of {PACK_CHANNELS}")
        keep += [packed, bias]
        w_at, s_at = packed.strip_offsets(row0)
        kind = W8A16 if mod.method == "w8a16" else W8A8_BLOCK
        return _Linear(kind, 0, 0.0, packed.group, w_at, s_at, _at(bias, row0), n, k, None, 1)
    w = mod.weight
    if w.dtype != torch.int8 or w.device.type != "cpu" or tuple(w.shape) != (rows, k) \
            or not w.is_contiguous():
        raise Unsupported("an int8 layer's plain weight is not kept (packed for another kernel)")
    scale = _fp32_cpu(mod.weight_scale, "an int8 layer's scales",
                      (rows, k // group) if group else (rows,))
    keep += [w, scale, bias]
    parts = (_at(w, row0), _at(scale, row0), _at(bias, row0))
    if mod.method == "w8a16":
        return _Linear(W8A16, 0, 0.0, group, *parts, n, k)
    if mod.method == "w8a8-dynamic" and mod.act_rows == "block":
        return _Linear(W8A8_BLOCK, 0, 0.0, 0, *parts, n, k)
    static = mod.method == "w8a8-static"
    wsum = native.weight_sums(w)
    keep.append(wsum)
    return _Linear(W8A8, 0 if static else 1, float(mod.input_scale.item()) if static else 0.0,
                   0, *parts, n, k, _at(wsum, row0))


def _turn(d: _Layer, mod: Any, field: str, row0: int | None, keep: list) -> None:
    """A turned input (engine.kernels.turn): the kernel turns down's input rows only."""
    from ..kernels.turn import turn_fits

    k, m = mod.in_features, mod.turn_odd.shape[0]
    if field != "down" or row0:
        raise Unsupported(f"a turned input on {field} (the native step turns down's only)")
    if m > TURN_MAX_M or not turn_fits(k, m):
        raise Unsupported(f"a turn of {k} inputs with an odd part of {m}")
    signs = _fp32_cpu(mod.turn_signs, "a turn's signs", (k,))
    odd = _fp32_cpu(mod.turn_odd, "a turn's odd part", (m, m))
    keep += [signs, odd]
    d.turn_signs, d.turn_odd, d.turn_m = signs.data_ptr(), odd.data_ptr(), m


def _at(t: torch.Tensor | None, row: int) -> int | None:
    """The address of row `row` of a row-major tensor (its first dimension)."""
    if t is None:
        return None
    return t.data_ptr() + row * (t[0].numel() if t.dim() > 1 else 1) * t.element_size()


def _norm(mod: Any, size: int, keep: list, offset: float = 0.0) -> tuple[int, float]:
    """(weight pointer, eps) of an RMSNorm (x * rsqrt(mean(x^2) + eps) * (offset + weight));
    Gemma's norms scale by (1 + w), handed over as a copy of 1 + w."""
    name = type(mod).__name__
    eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", None))
    if not name.endswith("RMSNorm") or eps is None:
        raise Unsupported(f"norm {name} is not an RMSNorm")
    w = _fp32_cpu(mod.weight, f"{name} weight", (size,))
    if offset:
        w = (w + offset).contiguous()
    keep.append(w)
    return _ptr(w), float(eps)


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
        and pos: int64 [M], each row's KV slot and position; cos / sin: [tables, M, rot_dim],
        the family's rotary tables (DecoderFamily.rotary_tables) in its order."""
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
    if runner.kv.k.dtype not in (torch.float32, torch.float16):
        kv = str(runner.kv.k.dtype).removeprefix("torch.")
        return None, f"KV cache in {kv}, not float32 or float16"
    lib = native.library()
    if lib is None:
        return None, "native kernels unavailable"
    try:
        return _build(runner, lib), ""
    except Unsupported as exc:
        return None, str(exc)


def _layer_norms(d: _Layer, parts: Any, layer: Any, hidden: int, hd: int, keep: list,
                 offset: float, qk_norm: bool) -> tuple[float, float | None]:
    """Fill a layer descriptor's norms; returns their eps and the q/k norms' (one each: the
    kernel takes one of each for the whole model)."""
    found = {"in_norm": parts.in_norm, "post_norm": parts.post_norm,
             "attn_out_norm": parts.attn_out_norm, "mlp_out_norm": parts.mlp_out_norm}
    eps = set()
    for field, mod in found.items():
        if mod is not None:
            ptr, e = _norm(mod, hidden, keep, offset)
            setattr(d, field, ptr)
            eps.add(e)
    qk_eps = None
    if qk_norm:
        d.q_norm, e3 = _norm(layer.self_attn.q_norm, hd, keep, offset)
        d.k_norm, e4 = _norm(layer.self_attn.k_norm, hd, keep, offset)
        if e3 != e4:
            raise Unsupported("q/k norms use different eps")
        qk_eps = e3
    if len(eps) != 1:
        raise Unsupported("a layer's norms use different eps")
    return eps.pop(), qk_eps


def _build(runner: Any, lib: Any) -> DecodePlan:
    fam = runner.family
    cfg = runner.model.config
    hidden = cfg.hidden_size
    nh, kvh, hd = runner.num_heads, runner.num_kv_heads, runner.head_dim
    if hd % 2 or nh % kvh:
        raise Unsupported("head layout not supported")
    with torch.inference_mode():
        probe = fam.rotary_tables(torch.zeros(1, 1, hidden, dtype=runner.dtype),
                                  torch.zeros(1, dtype=torch.long))
    rot_dim = probe[0][0].shape[-1]
    if rot_dim % 2 or rot_dim > hd:
        raise Unsupported(f"rotary over {rot_dim} of {hd} values per head")
    offset = fam.norm_offset
    keep: list = [runner.kv.k, runner.kv.v]
    layers = (_Layer * len(runner.layers))()
    inter = act = None
    eps = qk_eps = None
    for li, layer in enumerate(runner.layers):
        parts = fam.native_parts(layer)
        kind = ACTIVATIONS.get(type(parts.act).__name__)
        if kind is None or (act is not None and kind != act):
            raise Unsupported(f"MLP activation {type(parts.act).__name__} has no native kernel")
        act = kind
        gate = parts.gate[0]
        if gate is None:
            raise Unsupported("MLP is not gated")
        inter = inter or parts.down[0].in_features
        d = layers[li]
        for field, (mod, row0), (n, k) in (
                ("q", parts.q, (nh * hd, hidden)), ("k", parts.k, (kvh * hd, hidden)),
                ("v", parts.v, (kvh * hd, hidden)), ("o", parts.o, (hidden, nh * hd)),
                ("gate", parts.gate, (inter, hidden)), ("up", parts.up, (inter, hidden)),
                ("down", parts.down, (hidden, inter))):
            setattr(d, field, _linear(mod, n, k, keep, row0))
            if getattr(mod, "turn_signs", None) is not None:
                _turn(d, mod, field, row0, keep)
        e, qe = _layer_norms(d, parts, layer, hidden, hd, keep, offset, runner.has_qk_norm)
        if (eps is not None and e != eps) or (qk_eps is not None and qe != qk_eps):
            raise Unsupported("layers use different norm eps")
        eps, qk_eps = e, qe
        d.kc = runner.kv.k[li].data_ptr()
        d.vc = runner.kv.v[li].data_ptr()
        d.window = fam.windows[li] or 0
        d.rope = fam.rope_table_of[li]
    model = _Model(hidden, nh, kvh, hd, inter, runner.max_len, eps, qk_eps or 0.0,
                   float(runner.scaling), len(runner.layers), rot_dim,
                   float(fam.attn_softcap or 0.0), act, int(runner.kv.k.dtype == torch.float16))
    norm = _norm(runner.inner.norm, hidden, keep, offset)
    return DecodePlan(model, layers, keep, lib.npc_decode_layers, norm, lib.npc_rmsnorm)
