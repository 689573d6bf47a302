"""Per-layer sensitivity: how much quality each layer loses when it alone is quantized, and the
smallest skip list that keeps the fully quantized model within a perplexity budget."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .apply import set_module
from .calib import ActStats, Cancelled, Progress
from .config import QuantConfig, select_layers
from .evaluate import perplexity
from .qlinear import QuantLinear


@dataclass(frozen=True)
class LayerSensitivity:
    name: str
    kl: float  # mean KL(float || only-this-layer-quantized) of next-token distributions


@dataclass(frozen=True)
class SkipRecommendation:
    skip: list[str]
    float_ppl: float
    quant_ppl: float
    budget_pct: float
    met: bool  # False when even the longest skip list tried missed the budget

    @property
    def delta_pct(self) -> float:
        return 100.0 * (self.quant_ppl / self.float_ppl - 1.0)


class _Swapper:
    """Holds a smoothed float copy of the model plus a QuantLinear for every candidate layer,
    and switches layers between the two without copying the model again."""

    def __init__(self, model: Any, config: QuantConfig, stats: dict[str, ActStats] | None):
        from .smooth import smooth_model

        self.model = copy.deepcopy(model)
        self.names = select_layers(self.model, config).quantize
        if config.smoothquant is not None:
            stats = {k: ActStats(v.absmax.clone()) for k, v in (stats or {}).items()}
            smooth_model(self.model, stats, config.smoothquant, set(self.names))
        self.float = {n: self.model.get_submodule(n) for n in self.names}
        self.quant = {}
        for n in self.names:
            s = None
            if config.method == "w8a8-static":
                s = max(stats[n].tensor_absmax, 1e-8) / 127.0
            self.quant[n] = QuantLinear.from_linear(self.float[n], config.method,
                                                    config.group_size, s)

    def set(self, quantized: set[str]) -> None:
        for n in self.names:
            set_module(self.model, n, self.quant[n] if n in quantized else self.float[n])


@torch.inference_mode()
def layer_sensitivity(model: Any, config: QuantConfig, samples: list[torch.Tensor],
                      stats: dict[str, ActStats] | None = None,
                      progress: Progress | None = None,
                      cancel: threading.Event | None = None) -> list[LayerSensitivity]:
    """KL per layer, most sensitive first."""
    sw = _Swapper(model, config, stats)
    sw.set(set())
    dev = next(sw.model.parameters()).device
    ref = [F.log_softmax(sw.model(input_ids=s.to(dev), use_cache=False).logits.float(), -1)
           for s in samples]
    out = []
    for i, name in enumerate(sw.names):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        sw.set({name})
        total, count = 0.0, 0
        for s, lp in zip(samples, ref):
            lq = F.log_softmax(sw.model(input_ids=s.to(dev), use_cache=False).logits.float(), -1)
            total += (lp.exp() * (lp - lq)).sum().item()
            count += s.shape[-1]
        out.append(LayerSensitivity(name, total / count))
        if progress:
            progress("sensitivity", i + 1, len(sw.names))
    return sorted(out, key=lambda r: r.kl, reverse=True)


@torch.inference_mode()
def recommend_skip(model: Any, config: QuantConfig, ranking: list[LayerSensitivity],
                   eval_ids: torch.Tensor, budget_pct: float = 1.0,
                   stats: dict[str, ActStats] | None = None, max_skip: int | None = None,
                   window: int | None = None, progress: Progress | None = None,
                   cancel: threading.Event | None = None) -> SkipRecommendation:
    """Skip the most sensitive layers one by one until the quantized perplexity is within
    `budget_pct` percent of float (greedy along the sensitivity ranking)."""
    sw = _Swapper(model, config, stats)
    sw.set(set())
    base = perplexity(sw.model, eval_ids, window=window).perplexity
    order = [r.name for r in ranking if r.name in sw.quant]
    limit = len(order) if max_skip is None else min(max_skip, len(order))
    ppl = base
    for k in range(limit + 1):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        skip = order[:k]
        sw.set(set(sw.names) - set(skip))
        ppl = perplexity(sw.model, eval_ids, window=window).perplexity
        if progress:
            progress("recommend", k + 1, limit + 1)
        if ppl <= base * (1 + budget_pct / 100.0):
            return SkipRecommendation(skip, base, ppl, budget_pct, True)
    return SkipRecommendation(order[:limit], base, ppl, budget_pct, False)
