"""The default ("auto") recipe of a quantization job, end to end on a loaded float model:
calibration (the model's own text unless a file is given), one capture pass, the per-input
search, error-compensating rounding, automatic mixed precision or a perplexity budget, and
the measured perplexity change when evaluation text is given."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..models.experts import unroll_experts
from . import calib as calib_mod
from . import mixed, turn
from . import recipe as recipe_mod
from .apply import QuantInfo, quantize_model
from .calib import Cancelled, Progress
from .capture import capture
from .config import QuantConfig, QuantError, select_layers

SELF_SAMPLES = 16
SELF_TOKENS = 128
# static W8A8 fixes its input ranges from this text, and text it never saw overflowed them
# (SmolLM2: every int8 down_proj input, by 1.6-6.4x), more often the later the position
# (1.6x as often at 256-511 as at 1-127): samples of 128 tokens never reach the positions a
# served model or a ctx-512 evaluation does, and 2,048 tokens are few. 16 x 256 took the
# static default from +1.46 / +1.53 % (2 / 1 torch threads) to +0.67 % at both; 8 x 256
# (the same tokens, fewer samples) measured +3.20 %. The other methods take their activation
# ranges per token at run time; w8a8-dynamic measured worse with 16 x 256 (+1.25 % against
# +0.73 %), so they keep 128 (docs/quantization.md)
STATIC_SELF_TOKENS = 256


def self_tokens_for(method: str) -> int:
    return STATIC_SELF_TOKENS if method == "w8a8-static" else SELF_TOKENS


def self_prompts_for(method: str) -> tuple[str, ...]:
    """The chat requests of a method's self-calibration. Static W8A8 adds two programming
    requests (2 of its 16 samples): its ranges are fixed by this text, and code ran past ranges
    fitted on the neutral ones alone. The other methods take their activation ranges per token
    or per block at run time, and keep the neutral set (and their cached samples)."""
    from .selfcalib import CODE_PROMPTS, PROMPTS

    return PROMPTS + CODE_PROMPTS if method == "w8a8-static" else PROMPTS


EVAL_CTX = 512
EVAL_MAX_TOKENS = 4096


@dataclass
class AutoOutcome:
    info: QuantInfo
    model: Any  # the quantized model (a budget run swaps in another copy)
    calibration: str
    calib_samples: int
    int8_weight_fraction: float
    kept_float: dict[str, str] = field(default_factory=dict)
    float_ppl: float | None = None
    quant_ppl: float | None = None
    budget: dict | None = None

    @property
    def perplexity_change_pct(self) -> float | None:
        if self.float_ppl is None or self.quant_ppl is None:
            return None
        return 100.0 * (self.quant_ppl / self.float_ppl - 1.0)


def calibration_samples(model: Any, tok: Any, calib_file: str | None, samples: int,
                        seq_len: int, model_dir: str | Path | None,
                        progress: Progress | None, cancel: threading.Event | None,
                        self_samples: int = SELF_SAMPLES,
                        self_tokens: int = SELF_TOKENS,
                        seed: int = 0,
                        self_prompts: tuple[str, ...] | None = None
                        ) -> tuple[list[torch.Tensor], str]:
    if calib_file:
        texts = calib_mod.read_texts(calib_file)
        got = calib_mod.build_samples(tok, texts, samples, seq_len)
        return got, f"file {Path(calib_file).name}: {len(got)} windows of {seq_len} tokens"
    from .selfcalib import PROMPTS, self_calibration

    sc = self_calibration(model, tok, self_samples, self_tokens, seed=seed, model_dir=model_dir,
                          progress=progress, cancel=cancel, prompts=self_prompts or PROMPTS)
    return sc.samples, sc.description + (" (cached)" if sc.cached else "")


def eval_measure(tok: Any, eval_file: str | None, samples: list[torch.Tensor]):
    """Perplexity function for budget and report: llama.cpp's chunks on the evaluation text,
    or, without one, the mean NLL over the calibration samples."""
    if eval_file:
        from . import eval_methods as em

        whole, docs = em.read_eval_text(eval_file, tok)

        def on_text(m: Any) -> float:
            return em.evaluate_texts(m, tok, docs, "chunks", EVAL_CTX, whole=whole,
                                     max_tokens=EVAL_MAX_TOKENS).perplexity
        return on_text

    @torch.inference_mode()
    def on_samples(m: Any) -> float:
        dev = next(m.parameters()).device
        nll, n = 0.0, 0
        for s in samples:
            ids = s.reshape(1, -1).to(dev)
            logits = m(input_ids=ids, use_cache=False).logits[0, :-1].float()
            nll += F.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
            n += ids.shape[1] - 1
        return math.exp(nll / max(n, 1))
    return on_samples


def run_auto(model: Any, tok: Any, cfg: QuantConfig, samples: list[torch.Tensor],
             calibration: str, budget_pct: float | None = None, eval_file: str | None = None,
             progress: Progress | None = None,
             cancel: threading.Event | None = None) -> AutoOutcome:
    unroll_experts(model)  # calibrate, search and round the routed experts too
    turned = turn.turn_down_inputs(model) if cfg.turn_down else 0
    try:
        outcome = _run_auto(model, tok, cfg, samples, calibration, budget_pct, eval_file,
                            progress, cancel)
    finally:
        if turned:  # int8 down_projs keep the turn, float ones are turned back
            turn.settle(model)
    if turned:
        outcome.info.config["recipe"]["turned_down_inputs"] = turned
    return outcome


def _run_auto(model: Any, tok: Any, cfg: QuantConfig, samples: list[torch.Tensor],
              calibration: str, budget_pct: float | None, eval_file: str | None,
              progress: Progress | None, cancel: threading.Event | None) -> AutoOutcome:
    names = select_layers(model, cfg).quantize
    params = mixed.layer_params(model, names)
    # error-compensating rounding measured worse for static W8A8 on SmolLM2 (+1.90 % against
    # +1.68 % with nearest, same recipe): its Gram matrix is of float inputs, not the
    # clipped int8 ones the layer will see
    gptq = not cfg.group_size and cfg.method != "w8a8-static"
    measure = eval_measure(tok, eval_file, samples) if (eval_file or budget_pct) else None
    float_ppl = measure(model) if measure is not None else None
    caps = capture(model, samples, names, gram=gptq, bos_id=tok.bos_token_id,
                   progress=progress, cancel=cancel)
    w8a8 = cfg.method != "w8a16"
    if w8a8:
        alphas = (cfg.smoothquant,) if cfg.smoothquant is not None else None
        rec = recipe_mod.search(model, cfg.method, caps, alphas=alphas, progress=progress,
                                cancel=cancel, act_blocks=cfg.act_blocks)
    else:
        rec = recipe_mod.Recipe(cfg.method)
    recipe_mod.link(rec, model, caps, grams=gptq)
    rec.calibration = calibration
    stats = recipe_mod.body_stats(caps)
    budget = None
    if budget_pct is not None and w8a8:
        whole = None
        if cfg.method == "w8a8-static":  # as the default recipe ranks (below)
            whole = _static_scores(model, cfg, names, samples, tok, progress, cancel)
        twin = mixed.float_twin(model, rec, stats, names)
        quantize_model(model, cfg, stats, progress=progress, cancel=cancel, recipe=rec)
        res = mixed.fit_budget(model, twin, rec, params, measure, float_ppl, budget_pct,
                               progress=progress, cancel=cancel, whole_model=whole)
        rec.keep_float = res.keep_float
        info = model.npu_quant
        info.quantized = [n for n in info.quantized if n not in res.keep_float]
        info.skipped = info.skipped + [n for n in names if n in res.keep_float]
        budget, quant_ppl = res.to_dict(), res.quant_ppl
    else:
        if cfg.method == "w8a8-static":
            # ranked by the whole model's loss, not the layer's own error: the layers whose
            # output error the later layers amplify (sink-token down_proj) go float first
            scores = _static_scores(model, cfg, names, samples, tok, progress, cancel)
            rec.keep_float = mixed.keep_most_sensitive(scores, params)
        elif w8a8:
            rec.keep_float = mixed.auto_keep_float(rec, params)
        info = quantize_model(model, cfg, stats, progress=progress, cancel=cancel, recipe=rec)
        quant_ppl = measure(model) if measure is not None else None
        if budget_pct is not None:  # w8a16: every layer int8, the budget is only checked
            met = quant_ppl <= float_ppl * (1 + budget_pct / 100)
            budget = {"budget_pct": budget_pct, "met": met, "why": "" if met else (
                "w8a16 keeps every linear layer int8; use --skip to keep layers float")}
    info.config["recipe"] = {**rec.to_dict(), "int8_weight_fraction":
                             mixed.int8_fraction(params, info.quantized)}
    if cancel is not None and cancel.is_set():
        raise Cancelled()
    return AutoOutcome(info=info, model=model, calibration=calibration,
                       calib_samples=len(samples),
                       int8_weight_fraction=mixed.int8_fraction(params, info.quantized),
                       kept_float=dict(rec.keep_float), float_ppl=float_ppl,
                       quant_ppl=quant_ppl, budget=budget)


def _static_scores(model: Any, cfg: QuantConfig, names: list[str], samples: list[torch.Tensor],
                   tok: Any, progress: Progress | None,
                   cancel: threading.Event | None) -> dict[str, float]:
    """Static W8A8's whole-model sensitivity, scored out of sample (engine.quant.fisher)."""
    from .fisher import crossfit_scores

    return crossfit_scores(model, cfg.method, names, samples, bos_id=tok.bos_token_id,
                           act_blocks=cfg.act_blocks, progress=progress, cancel=cancel)


def check_budget(budget_pct: float | None) -> None:
    if budget_pct is not None and not 0 < budget_pct < 1000:
        raise QuantError(f"--budget must be a positive percentage, got {budget_pct}")

