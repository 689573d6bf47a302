"""A searched W8A8 recipe: per-input SmoothQuant strength, static input ranges with clipping,
and the layers kept float, all decided on calibration activations (engine.quant.capture),
then applied by engine.quant.apply.quantize_model."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .calib import Cancelled, Progress
from .capture import InputCapture, as_stats
from .search import (
    ALPHAS,
    CLIPS,
    STATIC_ALPHAS,
    STATIC_CLIPS,
    InputChoice,
    search_input,
)
from .smooth import _norm_is_foldable, find_groups


@dataclass
class Recipe:
    method: str
    alphas: dict[str, float] = field(default_factory=dict)  # smoothing producer -> alpha
    clips: dict[str, float] = field(default_factory=dict)  # quantized layer -> range clip
    choices: dict[str, InputChoice] = field(default_factory=dict)  # input key -> search result
    keep_float: dict[str, str] = field(default_factory=dict)  # layer -> why it stayed float
    calibration: str = ""
    # error-compensating rounding: input key -> Gram matrix, layer -> input key / producer
    grams: dict[str, Any] = field(default_factory=dict)
    key_of: dict[str, str] = field(default_factory=dict)
    consumers: dict[str, tuple[str, ...]] = field(default_factory=dict)  # input key -> layers
    _prepared: dict = field(default_factory=dict, repr=False)  # the last input's factor
    producer_of: dict[str, str] = field(default_factory=dict)
    damp: float | None = None  # GPTQ damping (engine.quant.gptq.damping): None, the method's

    def __post_init__(self) -> None:
        if self.damp is None:
            from .gptq import damping

            self.damp = damping(self.method)

    def rounded_weight(self, name: str, weight: Any, factors: dict) -> Any:
        """(int8, scales) by engine.quant.gptq for a layer whose input Gram matrix was
        captured, on the weight as smoothing left it; None: round to nearest."""
        from .gptq import prepare, round_weight, smoothed_gram

        key = self.key_of.get(name)
        gram = self.grams.get(key) if key is not None else None
        if gram is None:
            return None
        if key not in self._prepared:  # q/k/v and gate/up share one factorisation
            s = factors.get(self.producer_of.get(key, ""))
            self._prepared = {key: prepare(smoothed_gram(gram, s), self.damp)}
        return round_weight(weight, prepared=self._prepared[key])

    def to_dict(self) -> dict:
        return {"alphas": self.alphas, "clips": self.clips, "keep_float": self.keep_float,
                "calibration": self.calibration}


def producers(model: Any, keys: dict[str, tuple[str, ...]],
              gqa: bool = True) -> dict[str, str]:
    """Capture key -> the module smoothing folds into, where it can fold."""
    mods = dict(model.named_modules())
    out = {}
    for g in find_groups(model, gqa=gqa):
        if g.kind == "norm" and not _norm_is_foldable(mods[g.producer]):
            continue
        for key, cons in keys.items():
            if set(cons) <= set(g.consumers):
                out[key] = g.producer
    return out


def search(model: Any, method: str, caps: dict[str, InputCapture], smooth: bool = True,
           alphas: tuple[float, ...] | None = None, progress: Progress | None = None,
           cancel: threading.Event | None = None, gqa: bool = False,
           act_blocks: bool = False) -> Recipe:
    """Choose alpha (and, static, the clip) for every captured input. `gqa`: also try
    v_proj -> o_proj smoothing under grouped-query attention (engine.quant.smooth);
    `act_blocks`: score dynamic activations per block of 32, as they will run."""
    keys = {k: c.consumers for k, c in caps.items()}
    prods = producers(model, keys, gqa=gqa) if smooth else {}
    ties = {g.producer: g.tie for g in find_groups(model, gqa=True)}
    static = method == "w8a8-static"
    alphas = alphas or (STATIC_ALPHAS if static else ALPHAS)
    clips = STATIC_CLIPS if static else CLIPS
    rec = Recipe(method)
    link(rec, model, caps)
    for i, (key, cap) in enumerate(caps.items()):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        weights = [model.get_submodule(n).weight for n in cap.consumers]
        ch = search_input(cap.x(), cap.sinks(), weights, cap.absmax_body,
                          "w8a8-dynamic-blocks" if act_blocks else method,
                          key in prods, alphas=alphas, clips=clips, tie=ties.get(prods.get(key)))
        rec.choices[key] = ch
        if ch.alpha is not None:
            rec.alphas[prods[key]] = ch.alpha
        for n in cap.consumers:
            rec.clips[n] = ch.clip
        if progress:
            progress("search", i + 1, len(caps))
    return rec


def link(rec: Recipe, model: Any, caps: dict[str, InputCapture], grams: bool = False) -> None:
    """Record which layers read which captured input (and their Gram matrices)."""
    rec.producer_of = producers(model, {k: c.consumers for k, c in caps.items()})
    for key, cap in caps.items():
        rec.consumers[key] = cap.consumers
        for n in cap.consumers:
            rec.key_of[n] = key
        if grams and cap.gram is not None:
            rec.grams[key] = cap.gram


def body_stats(caps: dict[str, InputCapture]):
    return as_stats(caps, body_only=True)
