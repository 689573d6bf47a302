"""Per-layer sensitivity as a job (the wizard's optional step before the workflow): quantize one
layer at a time, rank the layers by how far the output distribution moves (KL), then find the
fewest layers to keep float for a perplexity budget. Same StageEvents and cancel as
engine.quant.workflow; no Qt, no prints."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .workflow import EventFn, StageTracker, load_float

_STAGES = ("load", "calibrate", "sensitivity", "recommend")
_WEIGHT = {"load": 1.0, "calibrate": 1.0, "sensitivity": 6.0, "recommend": 5.0}
_STEP_STAGE = {"calibrate": "calibrate", "sensitivity": "sensitivity", "recommend": "recommend"}


@dataclass(frozen=True)
class SensitivityRequest:
    model_dir: str
    eval_file: str  # the text the perplexity budget is measured on
    method: str = "w8a8-dynamic"
    preset: str = "all"
    skip: tuple[str, ...] = ()
    smoothquant: float | None = None
    calib_file: str | None = None  # None: the shipped calibration text
    samples: int = 4  # at most this many windows of at most 128 tokens
    seq_len: int = 128
    budget_pct: float = 2.0
    eval_tokens: int = 1024
    max_skip: int = 12


@dataclass
class SensitivityResult:
    ranking: list[tuple[str, float]]  # (layer, KL), most sensitive first
    skip: list[str]  # recommended skip list for the budget
    budget_pct: float
    float_ppl: float
    quant_ppl: float
    met: bool
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def delta_pct(self) -> float:
        return 100.0 * (self.quant_ppl / self.float_ppl - 1.0)


def run_sensitivity(req: SensitivityRequest, on_event: EventFn | None = None,
                    cancel: threading.Event | None = None) -> SensitivityResult:
    import torch

    from . import calib as calib_mod
    from .config import QuantConfig, QuantError, select_layers
    from .eval_methods import text_token_ids
    from .sensitivity import layer_sensitivity, recommend_skip

    t0 = time.perf_counter()
    cancel = cancel or threading.Event()
    cfg = QuantConfig(method=req.method, preset=req.preset, skip=tuple(req.skip),
                      smoothquant=req.smoothquant, calib_samples=min(req.samples, 4),
                      calib_seq_len=min(req.seq_len, 128))
    stages = _STAGES if cfg.needs_calibration else tuple(s for s in _STAGES if s != "calibrate")
    ev = StageTracker(stages, on_event, cancel, _WEIGHT, _STEP_STAGE)
    ev.enter("load", "sensitivity: loading the float model")
    loaded = load_float(req.model_dir, "cpu", "float32", cancel)
    model, tok = loaded.model, loaded.tokenizer
    ids = text_token_ids(tok, calib_mod.read_texts(req.eval_file))[:req.eval_tokens]
    if len(ids) < 64:
        raise QuantError(f"evaluation text {Path(req.eval_file).name} is too short "
                         f"({len(ids)} tokens)")
    samples = [torch.tensor([ids[i:i + cfg.calib_seq_len]])
               for i in range(0, len(ids) - 1, cfg.calib_seq_len)][:cfg.calib_samples]
    stats = None
    if cfg.needs_calibration:
        ev.enter("calibrate", "preparing calibration samples")
        texts = calib_mod.read_texts(req.calib_file)
        csamples = calib_mod.build_samples(tok, texts, cfg.calib_samples, cfg.calib_seq_len)
        stats = calib_mod.collect_stats(model, csamples, select_layers(model, cfg).quantize,
                                        progress=ev.step, cancel=cancel)
    ev.enter("sensitivity", "sensitivity: one layer at a time")
    ranking = layer_sensitivity(model, cfg, samples, stats, progress=ev.step, cancel=cancel)
    window = min(int(getattr(model.config, "max_position_embeddings", 256) or 256), 256)
    ev.enter("recommend", "recommending layers to keep float")
    rec = recommend_skip(model, cfg, ranking, torch.tensor(ids[:1024]), req.budget_pct, stats,
                         max_skip=req.max_skip, window=window, progress=ev.step, cancel=cancel)
    ev.finish()
    return SensitivityResult(ranking=[(r.name, r.kl) for r in ranking], skip=list(rec.skip),
                             budget_pct=req.budget_pct, float_ppl=rec.float_ppl,
                             quant_ppl=rec.quant_ppl, met=rec.met,
                             seconds=time.perf_counter() - t0)
