"""Replace a model's nn.Linear layers with QuantLinear, in place."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from .calib import ActStats, Cancelled, Progress
from .config import QuantConfig, QuantError, select_layers
from .qlinear import QuantLinear


@dataclass
class QuantInfo:
    """What was done to a model; stored on it as `model.npu_quant` and in every export."""

    method: str
    quantized: list[str]
    skipped: list[str]
    smoothed: list[str] = field(default_factory=list)  # producers folded by SmoothQuant
    config: dict = field(default_factory=dict)
    # int8 head: {"head": "lm_head", "embedding": "model.embed_tokens", "tied": bool}
    int8_head: dict | None = None
    # per-group W8A16: layer -> why it has one scale per output channel instead
    group_fallback: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"method": self.method, "quantized": self.quantized, "skipped": self.skipped,
                "smoothed": self.smoothed, "config": self.config, "int8_head": self.int8_head,
                "group_fallback": self.group_fallback}


def set_module(model: Any, name: str, new: torch.nn.Module) -> None:
    parent_name, _, leaf = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, leaf, new)


def quantize_model(model: Any, config: QuantConfig, stats: dict[str, ActStats] | None = None,
                   progress: Progress | None = None,
                   cancel: threading.Event | None = None, recipe: Any = None) -> QuantInfo:
    """Quantize the selected layers (SmoothQuant first when configured). `stats` must come from
    calibration when config.needs_calibration. A searched `recipe` (engine.quant.recipe)
    replaces the global SmoothQuant alpha with its per-input alphas, clips static input
    ranges and keeps its `keep_float` layers float; its stats are the sink-free ones."""
    from ..models.experts import unroll_experts
    from .smooth import smooth_model

    unroll_experts(model)  # routed experts' 3-D tables become nn.Linear layers to quantize
    sel = select_layers(model, config)
    candidates = set(sel.quantize)  # smoothing covers layers kept float too (exact in float)
    if recipe is not None and recipe.keep_float:
        sel = type(sel)([n for n in sel.quantize if n not in recipe.keep_float],
                        sel.skipped + [n for n in sel.quantize if n in recipe.keep_float])
    if (config.needs_calibration or recipe is not None) and not stats:
        raise QuantError(f"{config.method} with these options needs calibration statistics")
    if config.method == "w8a8-static":
        # a routed expert that no calibration token chose has no input range: it stays float
        # (every other layer without data is an error below)
        unrouted = [n for n in sel.quantize if n not in stats and _is_expert(model, n)]
        sel = type(sel)([n for n in sel.quantize if n not in unrouted], sel.skipped + unrouted)
    if getattr(model, "npu_quant", None) is not None:
        raise QuantError("the model is already quantized")
    # a layer whose input size is not a multiple of the group (SmolLM2's 576 at group 128, the
    # demo model's down_proj 688) gets one scale per output channel, the same int8 layer
    # without groups, rather than refusing the whole model; the result lists each one
    fallback = {n: (f"in_features {model.get_submodule(n).in_features} is not a multiple of "
                    f"group size {config.group_size}: one scale per output channel")
                for n in sel.quantize
                if config.group_size and model.get_submodule(n).in_features % config.group_size}
    smoothed = []
    factors: dict = {}
    if recipe is not None:
        smoothed = [g.producer for g in smooth_model(model, stats, recipe.alphas,
                                                     candidates, record=factors)]
    elif config.smoothquant is not None:
        groups = smooth_model(model, stats, config.smoothquant, set(sel.quantize))
        if not groups:
            raise QuantError("SmoothQuant found no norm/linear pairs to fold into in this model "
                             "architecture; run without --smoothquant")
        smoothed = [g.producer for g in groups]
    total = len(sel.quantize)
    for i, name in enumerate(sel.quantize):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        lin = model.get_submodule(name)
        input_scale = None
        if config.method == "w8a8-static":
            if name not in stats:
                raise QuantError(f"no calibration data reached {name}")
            clip = recipe.clips.get(name, 1.0) if recipe is not None else 1.0
            input_scale = max(clip * stats[name].tensor_absmax, 1e-8) / 127.0
        group = 0 if name in fallback else config.group_size
        rounded = (recipe.rounded_weight(name, lin.weight, factors)
                   if recipe is not None and not group else None)
        qlin = QuantLinear.from_linear(lin, config.method, group, input_scale, rounded)
        if config.act_blocks:
            qlin.act_rows = "block"
        set_module(model, name, qlin)
        if progress:
            progress("quantize", i + 1, total)
    head = quantize_head(model) if config.int8_head else None
    info = QuantInfo(method=config.method, quantized=sel.quantize, skipped=sel.skipped,
                     smoothed=smoothed, config=config.to_dict(), int8_head=head,
                     group_fallback=fallback)
    model.npu_quant = info
    return info


def _is_expert(model: Any, name: str) -> bool:
    from ..models.experts import ExpertMLP

    return isinstance(model.get_submodule(name.rpartition(".")[0]), ExpertMLP)


def _module_name(model: Any, module: Any) -> str:
    return next(n for n, m in model.named_modules() if m is module)


# The int8 head's scales: one per 32 columns of each row, as llama.cpp's Q8_0 keeps its
# token table. Chosen on the dev text (assets/calib/heldout_en.txt, no evaluation text read):
# the head alone, per row against per 32, cost Gemma 3 270M +0.588 % against +0.000 % and
# SmolLM2-135M +0.025 % against +0.000 % (docs/quantization.md, "The int8 head per 32").
HEAD_GROUP = 32


def quantize_head(model: Any, group: int = HEAD_GROUP) -> dict:
    """lm_head -> int8 weight-only QuantLinear (per-row scales: exactly per output token, or
    per `group` columns of each row), the input embedding -> QuantEmbedding (sharing the
    head's int8 table when the model ties them). Weight-only for the head whatever the method:
    the logits are the most sensitive product."""
    from .head import embedding_scale, head_is_tied, unsupported
    from .qlinear import QuantEmbedding

    why = unsupported(model)
    if why:
        raise QuantError(f"--int8-head is not possible for this model: {why}")
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    scale = embedding_scale(emb)
    tied = head_is_tied(model)
    head_name, emb_name = _module_name(model, head), _module_name(model, emb)
    group = group if group and head.in_features % group == 0 else 0
    qhead = QuantLinear.from_linear(head, "w8a16", group)
    if not group:
        qhead.act_rows = "token"  # its input is the final norm's: int16 rows per token suffice
    set_module(model, head_name, qhead)
    set_module(model, emb_name, QuantEmbedding.tied(qhead, scale) if tied
               else QuantEmbedding.from_embedding(emb, scale, group))
    return {"head": head_name, "embedding": emb_name, "tied": tied, "group": group}


def quant_modules(model: Any) -> dict[str, QuantLinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}


def prepare_for_serving(model: Any) -> None:
    """Pack weights for the model's device and free plain int8 copies a kernel no longer reads
    (exports must be written before this), then hand the freed pages back to the system: the
    fp32 scales a packed copy replaced are 4 bytes per group of the whole model."""
    from ..runtime.process_memory import give_back_freed_memory

    for m in quant_modules(model).values():
        m.release_plain_weight()
    give_back_freed_memory()
