"""The one quantization workflow: a float model in, an INT8 checkpoint (and optionally its
measured comparison with the float model and a report) out. The CLI (`npu-console quantize`),
the console's wizard and `bench offline` all run it; a server can too.

Stages, in this order: load -> calibrate -> quantize -> export -> evaluate -> report.
The calibrate stage runs when the recipe calibrates, evaluate and report when asked for, and
export unless the request keeps the model in memory (out_dir None, as the bench does).

Progress leaves as StageEvent dataclasses through one callback (stage, fraction of the whole
run, one line for a person); a threading.Event cancels, and the run then raises
engine.runtime.types.Cancelled. Nothing here prints, keeps global state or knows about Qt.

A run is all or nothing: when the evaluation follows the export, the checkpoint is written
to a hidden folder beside `out_dir` and put in place only after the evaluation, so a cancel or
an error at any stage leaves `out_dir` as it was (absent, or the earlier model).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import calib as calib_mod
from . import turn
from .apply import QuantInfo, quantize_model
from .calib import Cancelled
from .config import FORMATS, QuantConfig, QuantError, select_layers
from .head import HeadCost, HeadDecision, decide, head_mode
from .outdir import OutputFolderError, check_replaceable, write_folder
from .report import Comparison, EvalSpec, write_report
from .rotate import RotationDecision, check_mode, rotate_residual
from .rotate import decide as decide_rotation
from .stages import (
    _WORDS,
    STAGES,
    EventFn,
    StageEvent,
    StageTracker,
)


@dataclass
class QuantizeRequest:
    model_dir: str
    out_dir: str | None  # None: keep the quantized model in memory (result.model), no export
    method: str = "w8a8-dynamic"
    fmt: str = "native"
    preset: str = "all"
    skip: tuple[str, ...] = ()
    smoothquant: float | None = None
    group_size: int = 0
    calib_file: str | None = None  # None: "auto" samples the model's own text; "plain" the
    samples: int = 64  # shipped calibration set
    seq_len: int = 256
    device: str = "cpu"
    dtype: str = "float32"
    overwrite: bool = False
    # lm_head + embedding in int8: "auto" (engine.quant.head decides from the head's share of
    # the weights; float for a non-native export), "on", "off"; a bool means on / off
    int8_head: str | bool = "auto"
    # "auto": the searched recipe (engine.quant.auto: own-text calibration, per-input
    # SmoothQuant and clipping, error-compensating rounding, layers kept float as needed);
    # "plain": one global alpha, min-max ranges, round to nearest, calibration only when the
    # method needs it (the shipped text unless calib_file)
    recipe: str = "auto"
    budget_pct: float | None = None  # keep layers float until perplexity is within this
    eval_file: str | None = None  # held-out text for the budget and perplexity_change_pct
    evaluate: EvalSpec | None = None  # measure float vs the written checkpoint
    report: str | None = None  # write the comparison as REPORT.md and REPORT.json
    # quantize this many times, with the self-generated calibration drawn from seeds 0..N-1,
    # and report each seed's perplexity change on eval_file with their mean, worst and spread;
    # the checkpoint written is seed 0's (the default's)
    seeds: int = 1
    # w8a8-dynamic activation scales: "block" (one per 32 values, the native CPU kernels),
    # "token" (one per row: what NPU, CUDA, vLLM and MindIE run, and the VNNI int8 product),
    # "auto": block for the native format, token for the formats other runtimes read
    act_scales: str = "auto"
    rotate: str = "off"  # "on": the residual stream rotated first (engine.quant.rotate)
    turn_down: str = "auto"  # static's down_proj inputs turned at run time (turn.wanted)

    def config(self) -> QuantConfig:
        return QuantConfig(method=self.method, preset=self.preset, skip=tuple(self.skip),
                           group_size=self.group_size, smoothquant=self.smoothquant,
                           calib_samples=self.samples, calib_seq_len=self.seq_len,
                           int8_head=head_mode(self.int8_head) == "on",
                           act_blocks=self.method == "w8a8-dynamic" and (
                               self.act_scales == "block"
                               or (self.act_scales == "auto" and self.fmt == "native")),
                           turn_down=turn.wanted(self.turn_down, self.method, self.fmt,
                                                 self.recipe))

    def stages(self) -> tuple[str, ...]:
        plain_no_calib = self.recipe == "plain" and not self.config().needs_calibration
        skip = {"calibrate"} if plain_no_calib else set()
        if self.out_dir is None:
            skip.add("export")
        if self.evaluation() is None:
            skip.add("evaluate")
        if self.report is None:
            skip.add("report")
        return tuple(s for s in STAGES if s not in skip)

    def evaluation(self) -> EvalSpec | None:
        if self.evaluate is None and self.report is not None:
            return EvalSpec(data=self.eval_file)
        return self.evaluate


@dataclass
class QuantizeResult:
    out_dir: str | None
    fmt: str
    info: QuantInfo
    seconds: float
    calib_samples: int
    float_weight_bytes: int
    quant_weight_bytes: int
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage
    calibration: str | None = None  # which calibration text was used
    int8_weight_fraction: float = 1.0  # of the linear layers' weights
    kept_float: dict[str, str] = field(default_factory=dict)  # layer -> why
    float_perplexity: float | None = None  # on eval_file, when given
    quant_perplexity: float | None = None
    budget: dict | None = None
    comparison: Comparison | None = None  # the evaluate stage's float-vs-INT8 rows
    head: HeadDecision | None = None  # int8 head or not, and why
    rotation: RotationDecision | None = None  # residual stream rotated or not, and why
    head_cost: HeadCost | None = None  # the int8 head alone, when it is int8 and evaluated
    report_files: list[str] = field(default_factory=list)
    seed_runs: list[dict] = field(default_factory=list)  # with seeds > 1: one per seed
    model: Any = None  # the quantized model, only when out_dir is None

    @property
    def perplexity_change_pct(self) -> float | None:
        if self.float_perplexity is None or self.quant_perplexity is None:
            return None
        return 100.0 * (self.quant_perplexity / self.float_perplexity - 1.0)

    def to_dict(self) -> dict:
        return {"out_dir": self.out_dir, "format": self.fmt, "seconds": round(self.seconds, 2),
                "calib_samples": self.calib_samples, "float_weight_bytes": self.float_weight_bytes,
                "quant_weight_bytes": self.quant_weight_bytes,
                "stages": {k: round(v, 2) for k, v in self.stages.items()},
                "calibration": self.calibration,
                "int8_weight_fraction": round(self.int8_weight_fraction, 4),
                "kept_float": self.kept_float, "float_perplexity": self.float_perplexity,
                "quant_perplexity": self.quant_perplexity,
                "perplexity_change_pct": self.perplexity_change_pct, "budget": self.budget,
                **self.seeds_dict(), **self.info.to_dict(), **self.head_dict(),
                **self.rotation_dict()}

    def seeds_dict(self) -> dict:
        """With --seeds N: each seed's perplexity change, their mean, worst and spread."""
        if not self.seed_runs:
            return {}
        changes = [r["perplexity_change_pct"] for r in self.seed_runs]
        return {"seeds": {"runs": self.seed_runs, "mean_pct": sum(changes) / len(changes),
                          "worst_pct": max(changes), "spread_pct": max(changes) - min(changes)}}

    def rotation_dict(self) -> dict:
        r = self.rotation
        return {"rotation": None if r is None else {"mode": r.mode, "rotated": r.rotate,
                                                    "reason": r.reason}}

    def head_dict(self) -> dict:
        """int8_head (bool), int8_head_reason, the head's share and, when measured, what the
        int8 head alone costs; the layers it replaced stay in int8_head_layers."""
        d = {"int8_head": bool(self.info.int8_head), "int8_head_layers": self.info.int8_head}
        if self.head is not None:
            d |= {"int8_head_mode": self.head.mode, "int8_head_reason": self.head.reason,
                  "int8_head_share": (round(self.head.share, 4)
                                      if self.head.share is not None else None)}
        d["int8_head_cost"] = self.head_cost.to_dict() if self.head_cost else None
        return d


def load_float(model_dir: str, device: str, dtype: str, cancel: threading.Event | None = None
               ) -> Any:
    """The engine's LoadedModel of a float model folder or GGUF file (one-line QuantErrors)."""
    from ..models.gguf import GgufError, gguf_file_of
    from ..models.loader import load_model

    path = Path(model_dir)
    if not path.exists():
        raise QuantError(f"model not found: {path} (no such folder or file)")
    try:
        is_gguf = gguf_file_of(path) is not None
    except GgufError as exc:
        raise QuantError(str(exc)) from None
    if not is_gguf and not (path / "config.json").is_file():
        raise QuantError(f"{path} is not a model folder (no config.json) nor a GGUF file")
    from .io import detect_format

    if detect_format(path) is not None:
        raise QuantError(f"{path} is already quantized; quantize the float model")
    return load_model(path, device=device, dtype=dtype, cancel=cancel)


def _check_request(req: QuantizeRequest) -> QuantConfig:
    """Every check that needs no model, before any heavy work."""
    from .auto import check_budget

    if req.act_scales not in ("auto", "block", "token"):
        raise QuantError(f"unknown activation scales {req.act_scales!r}; choose auto, block "
                         "or token")
    if req.act_scales == "block" and req.fmt != "native":
        raise QuantError(f"the {req.fmt} format's readers quantize activations per token; use "
                         "--act-scales token (or auto) with it")
    turn.check_mode(req.turn_down, req.method, req.fmt, req.recipe)
    cfg = req.config()  # validates method / preset / alpha
    if req.fmt not in FORMATS:
        raise QuantError(f"unknown format {req.fmt!r}; choose one of {', '.join(FORMATS)}")
    if req.fmt == "compressed-tensors" and req.method == "w8a16":
        raise QuantError("compressed-tensors export is for w8a8-dynamic / w8a8-static; use "
                         "--format native or msmodelslim for w8a16")
    if cfg.int8_head and req.fmt != "native":
        raise QuantError(f"--int8-head is written only in the native format ({req.fmt} readers "
                         "keep lm_head and embeddings in float); use --int8-head auto or off")
    if req.out_dir is None and req.evaluation() is not None:
        raise QuantError("the evaluation measures the written checkpoint: give an output folder")
    if req.out_dir is not None:
        try:  # --overwrite replaces only a model folder or an empty one
            check_replaceable(Path(req.out_dir), req.overwrite)
        except OutputFolderError as exc:
            raise QuantError(str(exc)) from None
    check_mode(req.rotate)
    if req.recipe not in ("auto", "plain"):
        raise QuantError(f"unknown recipe {req.recipe!r}; choose auto or plain")
    check_budget(req.budget_pct)
    if req.budget_pct is not None and req.recipe != "auto":
        raise QuantError("--budget needs the auto recipe")
    for extra in (req.eval_file,) + ((req.calib_file,) if req.recipe == "auto" else ()):
        if extra is not None and not Path(extra).is_file():
            raise QuantError(f"file not found: {extra}")
    if req.evaluation() is not None:
        req.evaluation().check()
    if req.seeds < 1:
        raise QuantError("--seeds must be at least 1")
    if req.seeds > 1 and (req.recipe != "auto" or req.calib_file or not req.eval_file):
        raise QuantError("--seeds N draws the self-generated calibration N times: it needs the "
                         "auto recipe, no --calib, and --eval-data to score each seed on")
    return cfg


def run_workflow(req: QuantizeRequest, on_event: EventFn | None = None,
                 cancel: threading.Event | None = None, loaded: Any = None) -> QuantizeResult:
    """Run the stages of `req`. `loaded`: a LoadedModel of req.model_dir already in memory
    (quantized in place; the bench passes the model it serves). Raises QuantError (one line)
    for bad input, Cancelled when `cancel` was set; either way no output folder is left."""
    t0 = time.perf_counter()
    cancel = cancel or threading.Event()
    cfg = _check_request(req)
    ev = StageTracker(req.stages(), on_event, cancel)
    texts = (calib_mod.read_texts(req.calib_file)
             if cfg.needs_calibration and req.recipe == "plain" else None)
    ev.enter("load", _WORDS["load"])
    ev.step("load", 0, 1)
    if loaded is None:
        loaded = load_float(req.model_dir, req.device, req.dtype, cancel)
    elif getattr(loaded, "quantization", None):
        raise QuantError(f"{loaded.name} is already quantized ({loaded.quantization})")
    from ..models.experts import unroll_experts
    from .evaluate import weight_bytes

    unroll_experts(loaded.model)  # before calibration: its hooks must see every expert
    from .head import share_of_model, unsupported

    # before any calibration: an impossible --int8-head on fails here, auto never picks it
    head = decide(req.int8_head, share_of_model(loaded.model), req.fmt, req.device,
                  unsupported(loaded.model))
    cfg = replace(cfg, int8_head=head.int8_head)
    _check_device(req, cfg, loaded.model)
    float_bytes = weight_bytes(loaded.model)
    # before the float head is kept: the head cost compares against the rotated one
    cfg, rotation = rotated_config(req, cfg, loaded.model, progress=ev.step)
    # the float table, kept referenced so the int8 head's own cost can be measured after
    float_head = loaded.model.get_output_embeddings().weight if head.int8_head else None
    ev.step("load", 1, 1)
    if req.recipe == "auto":
        out = _auto(req, cfg, loaded, ev, cancel)
    else:
        out = _plain(req, cfg, loaded, texts, ev, cancel)
    result = QuantizeResult(out_dir=req.out_dir, fmt=req.fmt, info=out["info"], seconds=0.0,
                            calib_samples=out["calib_samples"], float_weight_bytes=float_bytes,
                            quant_weight_bytes=weight_bytes(out["model"]),
                            calibration=out["calibration"],
                            int8_weight_fraction=out["int8_weight_fraction"],
                            kept_float=out.get("kept_float", {}),
                            float_perplexity=out.get("float_ppl"),
                            quant_perplexity=out.get("quant_ppl"), budget=out.get("budget"),
                            head=head, rotation=rotation,
                            seed_runs=out.get("seed_runs", []))
    if float_head is not None and out["info"].int8_head and (req.evaluation() or req.eval_file):
        result.head_cost = _head_cost(req, out["model"], float_head, loaded.tokenizer, ev,
                                      cancel)
    del float_head
    if req.out_dir is None:
        result.model = out["model"]
    else:
        source_dir = getattr(loaded, "files_dir", None) or req.model_dir
        written = _export(req, out.pop("model"), source_dir, ev)
        loaded = None  # the evaluation loads both models afresh, as the engine will
        if written != Path(req.out_dir).absolute():
            _measure_and_commit(req, written, result, ev, cancel)
    result.stages = ev.finish()
    result.seconds = time.perf_counter() - t0
    return result


def rotated_config(req: QuantizeRequest, cfg: QuantConfig, model: Any,
                   progress: Callable[[str, int, int], None] | None = None
                   ) -> tuple[QuantConfig, RotationDecision]:
    """The request's rotation applied to `model` in place, and `cfg` saying so: the first
    thing quantizing does to the float model (benchmarks that call run_auto start here too)."""
    rotation = decide_rotation(req.rotate, cfg.method, model)
    if rotation.rotate:
        rotate_residual(model, progress=progress)
    return replace(cfg, rotate=rotation.rotate), rotation


def run_quantize(req: QuantizeRequest, progress: Callable[[str, int, int], None] | None = None,
                 cancel: threading.Event | None = None) -> QuantizeResult:
    """run_workflow with the older callback: progress(step, done, total) for each inner step
    ("load", "calibrate", "search", "quantize", "export", ...)."""
    def on_event(e: StageEvent) -> None:
        if progress is not None and e.step and e.total:
            progress(e.step, e.done, e.total)
    return run_workflow(req, on_event, cancel)


def _check_device(req: QuantizeRequest, cfg: QuantConfig, model: Any) -> None:
    if not req.device.startswith("npu"):
        return
    import torch

    from ..kernels.npu import check_supported

    for name in select_layers(model, cfg).quantize:
        lin = model.get_submodule(name)
        check_supported(cfg.method, getattr(torch, req.dtype), lin.in_features,
                        lin.out_features)


def _plain(req: QuantizeRequest, cfg: QuantConfig, loaded: Any, texts: list[str] | None,
           ev: StageTracker, cancel: threading.Event) -> dict:
    from .mixed import int8_fraction

    model, stats, n = loaded.model, None, 0
    if cfg.needs_calibration:
        ev.enter("calibrate", "preparing calibration samples")
        samples = calib_mod.build_samples(loaded.tokenizer, texts, cfg.calib_samples,
                                          cfg.calib_seq_len)
        n = len(samples)
        stats = calib_mod.collect_stats(model, samples, select_layers(model, cfg).quantize,
                                        progress=ev.step, cancel=cancel)
    ev.enter("quantize", _WORDS["quantize"])
    info = quantize_model(model, cfg, stats, progress=ev.step, cancel=cancel)
    names = set(info.quantized) | set(info.skipped)
    params = {k: m.weight.numel() for k, m in model.named_modules() if k in names}
    source = (f"file {Path(req.calib_file).name}" if req.calib_file
              else "shipped calibration text")
    return {"info": info, "model": model, "calib_samples": n,
            "calibration": source if n else None,
            "int8_weight_fraction": int8_fraction(params, info.quantized)}


def _auto(req: QuantizeRequest, cfg: QuantConfig, loaded: Any, ev: StageTracker,
          cancel: threading.Event) -> dict:
    from .auto import run_auto

    # the extra seeds first, each on a copy, while the float model is still float
    seed_runs = [_auto_seed(req, cfg, loaded, ev, cancel, seed)
                 for seed in range(1, req.seeds)]
    samples, source = _calibration(req, cfg, loaded, ev, cancel, seed=0)
    res = run_auto(loaded.model, loaded.tokenizer, cfg, samples, source, req.budget_pct,
                   req.eval_file, progress=ev.step, cancel=cancel)
    if seed_runs:
        seed_runs.insert(0, _seed_row(0, res))
    return {"info": res.info, "model": res.model, "calib_samples": res.calib_samples,
            "calibration": source, "int8_weight_fraction": res.int8_weight_fraction,
            "kept_float": res.kept_float, "float_ppl": res.float_ppl,
            "quant_ppl": res.quant_ppl, "budget": res.budget, "seed_runs": seed_runs}


def _calibration(req: QuantizeRequest, cfg: QuantConfig, loaded: Any, ev: StageTracker,
                 cancel: threading.Event, seed: int) -> tuple[list, str]:
    from .auto import calibration_samples, self_prompts_for, self_tokens_for

    ev.enter("calibrate", "preparing calibration samples")
    samples, source = calibration_samples(loaded.model, loaded.tokenizer, req.calib_file,
                                          req.samples, req.seq_len, loaded.files_dir, ev.step,
                                          cancel, self_tokens=self_tokens_for(cfg.method),
                                          seed=seed, self_prompts=self_prompts_for(cfg.method))
    ev.check()
    return samples, source


def _auto_seed(req: QuantizeRequest, cfg: QuantConfig, loaded: Any, ev: StageTracker,
               cancel: threading.Event, seed: int) -> dict:
    """One extra seed's quantization of a copy of the float model, scored on eval_file."""
    import copy

    from .auto import run_auto

    samples, source = _calibration(req, cfg, loaded, ev, cancel, seed)
    res = run_auto(copy.deepcopy(loaded.model), loaded.tokenizer, cfg, samples, source,
                   req.budget_pct, req.eval_file, progress=ev.step, cancel=cancel)
    return _seed_row(seed, res)


def _seed_row(seed: int, res: Any) -> dict:
    return {"seed": seed, "perplexity_change_pct": res.perplexity_change_pct,
            "int8_weight_fraction": round(res.int8_weight_fraction, 4),
            "kept_float": len(res.kept_float)}


def _head_cost(req: QuantizeRequest, model: Any, float_head: Any, tok: Any,
               ev: StageTracker, cancel: threading.Event) -> HeadCost:
    """The int8 head alone on the evaluation text (first 1024 tokens): one forward pass of the
    quantized model, through the int8 and the float head (engine.quant.head)."""
    from . import eval_methods as em
    from .head import measure_head_cost

    ev.step("head cost", 0, 1)
    data = req.evaluation().data if req.evaluation() is not None else req.eval_file
    docs = em.read_eval_text(data, tok)[1] if data else calib_mod.read_texts(None)
    ids = em.text_token_ids(tok, docs)[:1025]
    cost = measure_head_cost(model, float_head, ids, cancel=cancel)
    ev.step("head cost", 1, 1)
    return cost


def _export(req: QuantizeRequest, model: Any, source_dir: str, ev: StageTracker) -> Path:
    """Write the checkpoint: to out_dir (atomically), or, when an evaluation follows, to a
    hidden folder beside it that replaces out_dir only once the evaluation is done."""
    from .io import export

    out = Path(req.out_dir).absolute()
    staged = (out if req.evaluation() is None
              else out.parent / f".{out.name}.staged-{uuid.uuid4().hex[:8]}")
    ev.enter("export", _WORDS["export"])
    ev.step("export", 0, 1)
    export(model, staged, req.fmt, source_dir=source_dir,
           overwrite=req.overwrite if staged == out else False)
    # written straight to out_dir, the run is complete: a cancel now changes nothing
    try:
        ev.step("export", 1, 1, check=staged != out)
    except Cancelled:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return staged


def _measure_and_commit(req: QuantizeRequest, staged: Path, result: QuantizeResult,
                        ev: StageTracker, cancel: threading.Event) -> None:
    from .report import compare

    out = Path(req.out_dir).absolute()
    spec = req.evaluation()
    try:
        ev.enter("evaluate", "measuring float and INT8")
        result.comparison = compare(req.model_dir, [str(staged)], spec, req.dtype,
                                    progress=ev.measure, cancel=cancel, names=[out.name])
        ev.check()
        write_folder(out, req.overwrite, lambda tmp: _move_into(staged, tmp))
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    if req.report is not None:  # the checkpoint is in place: a cancel now changes nothing
        ev.enter("report", _WORDS["report"])
        md, js = write_report(result.comparison.rows, req.report,
                              {"data": spec.data, "tokens": result.comparison.tokens,
                               "dtype": req.dtype, **result.head_dict()})
        result.report_files = [str(md), str(js)]


def _move_into(src: Path, dest: Path) -> None:
    for p in src.iterdir():
        os.replace(p, dest / p.name)


def reexport(quant_dir: str, fmt: str, dest: str, source_dir: str | None = None,
             overwrite: bool = False, on_event: EventFn | None = None) -> Path:
    """Write a quantized checkpoint in another format (the export stage on its own; atomic)."""
    from .io import export, load_quantized_model

    ev = StageTracker(("load", "export"), on_event, threading.Event())
    ev.enter("load", f"loading {Path(quant_dir).name}")
    model = load_quantized_model(quant_dir, "cpu", "float32")
    ev.enter("export", f"writing {fmt}")
    path = export(model, dest, fmt, source_dir=source_dir, overwrite=overwrite)
    ev.finish()
    return path
