"""What to quantize and how: methods, presets, skip patterns, layer selection."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

from ..kernels.errors import QuantError

METHODS = ("w8a16", "w8a8-dynamic", "w8a8-static")
PRESETS = ("all", "attention", "no-down-proj")
FORMATS = ("native", "compressed-tensors", "msmodelslim")

# Never quantized by the layer selection: the NPU matmul ops cap N and K at 65535 (vocabularies
# are larger), the logits are where int8 error is most visible, and embeddings are lookups, not
# matmuls. `QuantConfig.int8_head` opts the head and the embedding in as int8 weight-only, for
# CPU and CUDA serving where memory matters more (a tied 151936-row vocabulary is 27 % of
# Qwen2.5-0.5B).
ALWAYS_FLOAT = ("lm_head", "embed_tokens", "embed_out", "wte", "output")

_ATTENTION_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class QuantConfig:
    """A quantization recipe.

    skip: fnmatch patterns (`*.down_proj`, `model.layers.0.*`) or regexes written `re:PATTERN`,
    matched against full module names; each must match at least one candidate layer.
    group_size: W8A16 only; 0 = one scale per output channel.
    smoothquant: migration strength alpha in [0, 1], or None (off). Only used by w8a8-*.
    int8_head: also store lm_head (int8 weight-only, per-row scales, float activations) and the
    token embedding in int8; written only in the native format.
    """

    method: str = "w8a8-dynamic"
    preset: str = "all"
    skip: tuple[str, ...] = ()
    group_size: int = 0
    smoothquant: float | None = None
    calib_samples: int = 64
    calib_seq_len: int = 256
    int8_head: bool = False
    # w8a8-dynamic: activations quantized per block of 32 values (qmath.ACT_BLOCK) instead of
    # per token, where the kernels can (the reference and the native CPU kernels; NPU, CUDA
    # and the exported formats stay per token). The weights are the same either way.
    act_blocks: bool = False
    # the residual stream and the value heads turned by seeded orthogonal matrices before
    # anything is measured (engine.quant.rotate): the same float function, outliers spread
    rotate: bool = False
    # w8a8-static: each gated MLP's down_proj input turned at run time by a Hadamard-based
    # orthogonal (engine.quant.turn); the native format carries it
    turn_down: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise QuantError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.preset not in PRESETS:
            raise QuantError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        if self.smoothquant is not None and not 0.0 <= self.smoothquant <= 1.0:
            raise QuantError(f"--smoothquant alpha must be in [0, 1], got {self.smoothquant}")
        if self.smoothquant is not None and self.method == "w8a16":
            raise QuantError("SmoothQuant only helps activation quantization; use it with w8a8-*")
        if self.group_size and self.method != "w8a16":
            raise QuantError("per-group weight scales are only supported for w8a16")
        if self.group_size < 0 or (self.group_size and self.group_size % 32):
            raise QuantError(f"group size must be a positive multiple of 32, got {self.group_size}")
        if self.act_blocks and self.method != "w8a8-dynamic":
            raise QuantError("activation blocks are for w8a8-dynamic (w8a16 keeps 16-bit "
                             "activations, static W8A8 one calibrated scale)")
        if self.turn_down and self.method != "w8a8-static":
            raise QuantError("turning down_proj's inputs is for w8a8-static (the other methods "
                             "take activation scales at run time)")
        if self.calib_samples < 1 or self.calib_seq_len < 2:
            raise QuantError("calibration needs at least 1 sample of at least 2 tokens")
        for pattern in self.skip:
            if pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except re.error as exc:
                    raise QuantError(f"bad skip regex {pattern[3:]!r}: {exc}") from None

    @property
    def needs_calibration(self) -> bool:
        return self.method == "w8a8-static" or self.smoothquant is not None

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "preset": self.preset, "skip": list(self.skip),
                "group_size": self.group_size, "smoothquant": self.smoothquant,
                "calib_samples": self.calib_samples, "calib_seq_len": self.calib_seq_len,
                "int8_head": self.int8_head, "act_blocks": self.act_blocks,
                "rotate": self.rotate, "turn_down": self.turn_down}


def _is_always_float(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return leaf in ALWAYS_FLOAT


def linear_names(model: Any) -> list[str]:
    """Every nn.Linear in the model that may be quantized (the always-float ones excluded)."""
    import torch

    return [name for name, mod in model.named_modules()
            if isinstance(mod, torch.nn.Linear) and not _is_always_float(name)]


def _in_preset(name: str, preset: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    if preset == "attention":
        return leaf in _ATTENTION_NAMES
    if preset == "no-down-proj":
        return leaf != "down_proj"
    return True


def pattern_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.search(pattern[3:], name) is not None
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name.rsplit(".", 1)[-1],
                                                                     pattern)


@dataclass(frozen=True)
class LayerSelection:
    quantize: list[str]
    skipped: list[str] = field(default_factory=list)  # by preset or pattern


def select_layers(model: Any, config: QuantConfig) -> LayerSelection:
    """Apply preset and skip patterns; a pattern that matches nothing is an error (likely typo)."""
    candidates = linear_names(model)
    if not candidates:
        raise QuantError("the model has no linear layers that can be quantized")
    for pattern in config.skip:
        if not any(pattern_matches(pattern, n) for n in candidates):
            raise QuantError(f"skip pattern {pattern!r} matches no layer "
                             f"(layers look like {candidates[0]!r})")
    chosen, skipped = [], []
    for name in candidates:
        if _in_preset(name, config.preset) and not any(pattern_matches(p, name)
                                                        for p in config.skip):
            chosen.append(name)
        else:
            skipped.append(name)
    if not chosen:
        raise QuantError("preset and skip patterns leave no layer to quantize")
    return LayerSelection(quantize=chosen, skipped=skipped)
