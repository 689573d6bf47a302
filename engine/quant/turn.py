"""Static W8A8's down_proj inputs turned at run time (QuaRot's online Hadamard, "R4").

A gated MLP's down_proj reads act(gate(x)) * up(x), whose outlier channels (code's
punctuation and layout, the sink token) ran past static W8A8's calibrated ranges by up to
4.4x on SmolLM2 ("Rows clipped at the range", docs/quantization.md). No offline rotation
reaches that input, as the product before it is not linear. Turned by an orthogonal R at run
time (engine.kernels.turn), with down_proj's weight holding W R, the float model computes the
same function and a channel's outlier is spread over all of them.

The recipe turns the float model first (turn_down_inputs), so calibration, the range search
and the sensitivity ranking all see the turned inputs; up_proj -> down_proj smoothing is left
out (engine.quant.smooth.find_groups: R sits between them). At the end (settle) each int8
down_proj takes the turn as its own (Int8Linear.set_input_turn, saved in the native format)
and a down_proj kept float gets its weight turned back. Only the native format carries a turn:
compressed-tensors and msModelSlim have no op for it (engine.quant.io refuses it)."""

from __future__ import annotations

import types
from typing import Any

import torch

from ..kernels.turn import apply_turn
from .config import QuantError

SEED = 0  # chosen on dev data only (tests/bench/static_r4_dev.py)
_SIGNS, _ODD = "down_turn_signs", "down_turn_odd"


def check_mode(mode: str, method: str, fmt: str, recipe: str) -> None:
    """`--turn-down` as asked, refused before any work where it cannot be done."""
    if mode not in ("auto", "on", "off"):
        raise QuantError(f"unknown --turn-down {mode!r}; choose auto, on or off")
    if mode == "on" and (method != "w8a8-static" or fmt != "native" or recipe != "auto"):
        raise QuantError("--turn-down on is for w8a8-static with the auto recipe in the native "
                         "format (no other format's readers turn a layer's input)")


def wanted(mode: str, method: str, fmt: str, recipe: str) -> bool:
    """Whether a run turns: asked for, or (auto) static W8A8's searched recipe in the native
    format, the one that carries the turn."""
    return method == "w8a8-static" and (
        mode == "on" or (mode == "auto" and fmt == "native" and recipe == "auto"))


def turnable(mod: Any) -> bool:
    """A gated MLP with separate float gate, up and down projections (not Phi-3's fused
    gate_up_proj; routed experts' MLPs are turned where they have this shape too)."""
    return (hasattr(mod, "act_fn") and all(
        type(getattr(mod, p, None)) is torch.nn.Linear for p in ("gate_proj", "up_proj",
                                                                  "down_proj")))


def is_turned(mlp: Any) -> bool:
    return getattr(mlp, _SIGNS, None) is not None


def _turned_forward(self, x):
    return self.down_proj(apply_turn(self.act_fn(self.gate_proj(x)) * self.up_proj(x),
                                     getattr(self, _SIGNS), getattr(self, _ODD)))


@torch.no_grad()
def turn_down_inputs(model: Any, seed: int = SEED) -> int:
    """Turn every turnable MLP's down_proj input; the float model's function is unchanged.
    Returns how many were turned."""
    from .rotate import hadamard_factors, hadamard_from_factors

    count = 0
    for mod in list(model.modules()):
        if not turnable(mod) or is_turned(mod):
            continue
        down = mod.down_proj
        signs, odd = hadamard_factors(down.in_features, seed)
        r = hadamard_from_factors(signs, odd)
        down.weight.copy_((down.weight.double() @ r).to(down.weight.dtype))
        mod.register_buffer(_SIGNS, signs.float(), persistent=False)
        mod.register_buffer(_ODD, odd.float(), persistent=False)
        mod.forward = types.MethodType(_turned_forward, mod)
        count += 1
    return count


@torch.no_grad()
def settle(model: Any) -> int:
    """Hand each turned MLP's turn to its int8 down_proj, or turn a float one's weight back,
    and give the MLP its own forward again. Returns how many int8 layers keep a turn."""
    from ..kernels.int8_linear import Int8Linear
    from .rotate import hadamard_from_factors

    kept = 0
    for mod in list(model.modules()):
        if not is_turned(mod):
            continue
        signs, odd = getattr(mod, _SIGNS), getattr(mod, _ODD)
        down = mod.down_proj
        if isinstance(down, Int8Linear):
            down.set_input_turn(signs, odd)
            kept += 1
        else:  # kept float: W R R^T = W
            r = hadamard_from_factors(signs, odd)
            down.weight.copy_((down.weight.double() @ r.t()).to(down.weight.dtype))
        del mod._buffers[_SIGNS], mod._buffers[_ODD]
        del mod.forward  # the instance's, so the class's forward is the one again
    return kept
