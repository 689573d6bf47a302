"""Automatic mixed precision: which linear layers stay float.

Layers are ranked by the output error the recipe search measured for their input (error on
ordinary tokens plus error on attention-sink tokens). By default the layers above
AUTO_THRESHOLD stay float, most sensitive first, as long as at least MIN_INT8_FRACTION of the
linear weights stay int8. With a perplexity budget, the model is measured instead: the most
sensitive layers go back to float, in ranking order, until the measured loss is inside the
budget (or the int8 floor is reached, and the result says so).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .calib import Cancelled, Progress

# relative output error above which a layer stays float by default; static W8A8 (one range
# per tensor) loses more per unit of layer error than per-token dynamic, measured on SmolLM2
AUTO_THRESHOLD = {"w8a8-dynamic": 0.01, "w8a8-static": 0.002}
MIN_INT8_FRACTION = 0.85  # of linear weights (lm_head / embeddings are not linear layers here)


def layer_params(model: Any, names: list[str]) -> dict[str, int]:
    return {n: model.get_submodule(n).weight.numel() for n in names}


def int8_fraction(params: dict[str, int], quantized: list[str]) -> float:
    total = sum(params.values())
    return sum(params[n] for n in quantized if n in params) / total if total else 0.0


def ranking(recipe: Any) -> list[tuple[str, float]]:
    """(layer, score) most sensitive first; layers sharing an input share its score."""
    rows = []
    for key, ch in recipe.choices.items():
        for name in recipe.consumers.get(key, (key,)):
            rows.append((name, ch.error + ch.sink_error))
    return sorted(rows, key=lambda r: r[1], reverse=True)


def _reason(score: float, rank: int, why: str) -> str:
    return f"{why}: rank {rank + 1}, output error {score:.2%} on calibration data"


def auto_keep_float(recipe: Any, params: dict[str, int], threshold: float | None = None,
                    min_int8: float = MIN_INT8_FRACTION) -> dict[str, str]:
    if threshold is None:
        threshold = AUTO_THRESHOLD.get(recipe.method, 0.01)
    keep: dict[str, str] = {}
    total = sum(params.values())
    floated = 0
    for rank, (name, score) in enumerate(ranking(recipe)):
        if score <= threshold or name not in params:
            break
        if (total - floated - params[name]) / total < min_int8:
            continue  # a smaller layer further down may still fit
        keep[name] = _reason(score, rank, "error above the automatic threshold")
        floated += params[name]
    return keep


@dataclass
class BudgetResult:
    keep_float: dict[str, str]
    float_ppl: float
    quant_ppl: float
    budget_pct: float
    met: bool
    int8_fraction: float
    evaluations: int
    why: str = ""  # when not met: why not
    tried: list[tuple[int, float]] = field(default_factory=list)  # (layers float, change %)

    @property
    def delta_pct(self) -> float:
        return 100.0 * (self.quant_ppl / self.float_ppl - 1.0)

    def to_dict(self) -> dict:
        return {"budget_pct": self.budget_pct, "met": self.met, "float_perplexity": self.float_ppl,
                "quant_perplexity": self.quant_ppl, "perplexity_change_pct": self.delta_pct,
                "int8_weight_fraction": self.int8_fraction, "evaluations": self.evaluations,
                "kept_float": self.keep_float, "why": self.why, "tried": self.tried}


def fit_budget(quantized: Any, smoothed_float: Any, recipe: Any, params: dict[str, int],
               measure: Callable[[Any], float], float_ppl: float, budget_pct: float,
               min_int8: float = MIN_INT8_FRACTION, progress: Progress | None = None,
               cancel: threading.Event | None = None,
               whole_model: dict[str, float] | None = None) -> BudgetResult:
    """`quantized`: the model with every candidate int8; `smoothed_float`: the same model in
    float after the same smoothing (so swapping a layer back is exact). Swaps the most
    sensitive layers to float (doubling, then bisecting) until measure() is within budget.
    Leaves `quantized` with the chosen layers float. `whole_model`: engine.quant.fisher scores;
    given, layers go float by them per weight (as keep_most_sensitive ranks), not by their own
    output error."""
    from .apply import set_module

    if whole_model:
        order = sorted((n for n in whole_model if n in params),
                       key=lambda n: whole_model[n] / params[n], reverse=True)
        scores = whole_model
    else:
        order = [n for n, _ in ranking(recipe) if n in params]
        scores = dict(ranking(recipe))
    qmods = {n: quantized.get_submodule(n) for n in order}
    total = sum(params.values())
    limit = 0  # the most layers that can go float above the int8 floor
    floated = 0
    for n in order:
        if (total - floated - params[n]) / total < min_int8:
            break
        floated += params[n]
        limit += 1
    bar = float_ppl * (1 + budget_pct / 100.0)
    tried: list[tuple[int, float]] = []

    def place(k: int) -> None:
        for i, n in enumerate(order):
            set_module(quantized, n, smoothed_float.get_submodule(n) if i < k else qmods[n])

    def at(k: int) -> float:
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        place(k)
        ppl = measure(quantized)
        tried.append((k, 100.0 * (ppl / float_ppl - 1.0)))
        if progress:
            progress("budget", len(tried), len(tried) + 1)
        return ppl

    results = {0: at(0)}
    k = 0
    while results[k] > bar and k < limit:
        k = min(limit, max(1, 2 * k))
        results[k] = at(k)
    met = results[k] <= bar
    if met and k > 1:
        lo, hi = k // 2, k  # lo fails (or was measured to), hi meets
        while hi - lo > 1:
            mid = (lo + hi) // 2
            results[mid] = at(mid)
            lo, hi = (lo, mid) if results[mid] <= bar else (mid, hi)
        k = hi
    if not met:  # the nearest it came: perplexity is not monotonic in the float layers
        k = min(results, key=results.get)
    place(k)
    why_float = f"kept float to meet the {budget_pct:g} % budget"
    keep = {n: (f"{why_float}: rank {i + 1} per weight, int8 alone adds an estimated "
                f"{scores[n]:.2e} nats/token to the calibration loss") if whole_model
            else _reason(scores[n], i, why_float) for i, n in enumerate(order[:k])}
    frac = int8_fraction(params, order[k:])
    why = "" if met else (
        f"the best of {len(tried)} tries keeps the {k} most sensitive layers float "
        f"({frac:.1%} of linear weights int8, the floor is {min_int8:.0%}) and is still "
        f"{100 * (results[k] / float_ppl - 1):+.2f} %; a larger budget or a lower int8 floor "
        "would be needed")
    return BudgetResult(keep, float_ppl, results[k], budget_pct, met, frac, len(tried), why,
                        tried)


def float_twin(model: Any, recipe: Any, stats: dict, names: list[str]) -> Any:
    """A float copy of `model` smoothed as quantize_model will smooth it (exact in float)."""
    from .smooth import smooth_model

    twin = copy.deepcopy(model)
    if recipe.alphas:
        smooth_model(twin, {k: type(v)(v.absmax.clone()) for k, v in stats.items()},
                     recipe.alphas, set(names))
    return twin


# estimated loss (nats per token) under which a layer stays int8 whatever the allowance: about
# +0.01 % perplexity; SmolLM2's least sensitive float layer under static W8A8 is at 1.3e-4
MIN_FISHER = 1e-4


def keep_most_sensitive(scores: dict[str, float], params: dict[str, int],
                        min_int8: float = MIN_INT8_FRACTION,
                        floor: float = MIN_FISHER) -> dict[str, str]:
    """Fill the float allowance (1 - min_int8 of the linear weights) with the layers whose
    whole-model sensitivity (engine.quant.fisher) per weight is largest: a small v_proj that
    matters goes float before a large down_proj that matters a little more. Layers estimated
    below `floor` stay int8 (a model that loses nothing keeps everything int8)."""
    total = sum(params.values())
    allowance = (1.0 - min_int8) * total
    ranked = sorted((n for n in scores if n in params),
                    key=lambda n: scores[n] / params[n], reverse=True)
    keep: dict[str, str] = {}
    used = 0
    for rank, name in enumerate(ranked):
        if scores[name] <= floor or used + params[name] > allowance:
            continue
        keep[name] = (f"most sensitive per weight: rank {rank + 1}, int8 alone adds an estimated "
                      f"{scores[name]:.2e} nats/token to the calibration loss")
        used += params[name]
    return keep
