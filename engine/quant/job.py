"""One quantization run from a model folder to an exported checkpoint: the API the CLI and the
GUI wizard share (progress callback + cancel event in, a result dataclass out)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npu_console.engine.quant import calib as calib_mod
from npu_console.engine.quant.apply import QuantInfo, quantize_model
from npu_console.engine.quant.calib import Cancelled, Progress
from npu_console.engine.quant.config import FORMATS, QuantConfig, QuantError, select_layers
from npu_console.engine.quant.outdir import OutputFolderError, check_replaceable


@dataclass
class QuantizeRequest:
    model_dir: str
    out_dir: str
    method: str = "w8a8-dynamic"
    fmt: str = "native"
    preset: str = "all"
    skip: tuple[str, ...] = ()
    smoothquant: float | None = None
    group_size: int = 0
    calib_file: str | None = None  # None: the shipped calibration set
    samples: int = 64
    seq_len: int = 256
    device: str = "cpu"
    dtype: str = "float32"
    overwrite: bool = False
    int8_head: bool = False
    # "auto": the searched recipe (engine.quant.auto: own-text calibration, per-input
    # SmoothQuant and clipping, error-compensating rounding, layers kept float as needed);
    # "plain": one global alpha, min-max ranges, round to nearest, calibration only when the
    # method needs it (the shipped text unless calib_file)
    recipe: str = "auto"
    budget_pct: float | None = None  # keep layers float until perplexity is within this
    eval_file: str | None = None  # held-out text for the budget and perplexity_change_pct

    def config(self) -> QuantConfig:
        return QuantConfig(method=self.method, preset=self.preset, skip=tuple(self.skip),
                           group_size=self.group_size, smoothquant=self.smoothquant,
                           calib_samples=self.samples, calib_seq_len=self.seq_len,
                           int8_head=self.int8_head)


@dataclass
class QuantizeResult:
    out_dir: str
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
                **self.info.to_dict()}


def load_float_model(model_dir: str, device: str, dtype: str) -> tuple[Any, Any]:
    """Model + tokenizer through the engine's loader (its errors are already user-facing)."""
    loaded = load_float(model_dir, device, dtype)
    return loaded.model, loaded.tokenizer


def load_float(model_dir: str, device: str, dtype: str) -> Any:
    """The engine's LoadedModel of a float model folder or GGUF file."""
    from npu_console.engine.models.gguf import GgufError, gguf_file_of
    from npu_console.engine.models.loader import load_model

    path = Path(model_dir)
    try:
        is_gguf = gguf_file_of(path) is not None
    except GgufError as exc:
        raise QuantError(str(exc)) from None
    if not is_gguf and not (path / "config.json").is_file():
        raise QuantError(f"{path} is not a model folder (no config.json) nor a GGUF file")
    from npu_console.engine.quant.io import detect_format

    if detect_format(path) is not None:
        raise QuantError(f"{path} is already quantized; quantize the float model")
    return load_model(path, device=device, dtype=dtype)


def run_quantize(req: QuantizeRequest, progress: Progress | None = None,
                 cancel: threading.Event | None = None) -> QuantizeResult:
    from npu_console.engine.quant.evaluate import weight_bytes
    from npu_console.engine.quant.io import export

    t0 = time.perf_counter()
    stages: dict[str, float] = {}
    cfg = req.config()  # validates method / preset / alpha before any heavy work
    if req.fmt not in FORMATS:
        raise QuantError(f"unknown format {req.fmt!r}; choose one of {', '.join(FORMATS)}")
    if req.fmt == "compressed-tensors" and req.method == "w8a16":
        raise QuantError("compressed-tensors export is for w8a8-dynamic / w8a8-static; use "
                         "--format native or msmodelslim for w8a16")
    if req.int8_head and req.fmt != "native":
        raise QuantError(f"--int8-head is written only in the native format ({req.fmt} readers "
                         "keep lm_head and embeddings in float)")
    out = Path(req.out_dir)
    try:  # before the long work: --overwrite replaces only a model folder or an empty one
        check_replaceable(out, req.overwrite)
    except OutputFolderError as exc:
        raise QuantError(str(exc)) from None
    if req.recipe not in ("auto", "plain"):
        raise QuantError(f"unknown recipe {req.recipe!r}; choose auto or plain")
    auto = req.recipe == "auto"
    from npu_console.engine.quant.auto import check_budget

    check_budget(req.budget_pct)
    if req.budget_pct is not None and not auto:
        raise QuantError("--budget needs the auto recipe")
    for extra in (req.eval_file,) + ((req.calib_file,) if auto else ()):
        if extra is not None and not Path(extra).is_file():
            raise QuantError(f"file not found: {extra}")
    texts = (calib_mod.read_texts(req.calib_file)
             if cfg.needs_calibration and not auto else None)

    def step(stage: str, done: int, total: int) -> None:
        if progress:
            progress(stage, done, total)
        if cancel is not None and cancel.is_set():
            raise Cancelled()

    step("load", 0, 1)
    loaded = load_float(req.model_dir, req.device, req.dtype)
    model, tok = loaded.model, loaded.tokenizer
    stages["load"] = time.perf_counter() - t0
    if req.device.startswith("npu"):
        import torch
        from npu_console.engine.kernels.npu import check_supported
        for name in select_layers(model, cfg).quantize:
            lin = model.get_submodule(name)
            check_supported(cfg.method, getattr(torch, req.dtype), lin.in_features,
                            lin.out_features)
    float_bytes = weight_bytes(model)
    step("load", 1, 1)
    stats, n_samples = None, 0
    if auto:
        return _finish_auto(req, cfg, loaded, float_bytes, stages, t0, step, cancel)
    if cfg.needs_calibration:
        t = time.perf_counter()
        samples = calib_mod.build_samples(tok, texts, cfg.calib_samples, cfg.calib_seq_len)
        n_samples = len(samples)
        stats = calib_mod.collect_stats(model, samples, select_layers(model, cfg).quantize,
                                        progress=step, cancel=cancel)
        stages["calibrate"] = time.perf_counter() - t
    t = time.perf_counter()
    info = quantize_model(model, cfg, stats, progress=step, cancel=cancel)
    stages["quantize"] = time.perf_counter() - t
    t = time.perf_counter()
    step("export", 0, 1)
    export(model, out, req.fmt, source_dir=req.model_dir, overwrite=req.overwrite)
    step("export", 1, 1)
    stages["export"] = time.perf_counter() - t
    return QuantizeResult(out_dir=str(out), fmt=req.fmt, info=info,
                          seconds=time.perf_counter() - t0, calib_samples=n_samples,
                          float_weight_bytes=float_bytes, quant_weight_bytes=weight_bytes(model),
                          stages=stages, calibration=(
                              f"file {Path(req.calib_file).name}" if req.calib_file else
                              "shipped calibration text") if n_samples else None,
                          int8_weight_fraction=_int8_share(model, info))


def _int8_share(model: Any, info: QuantInfo) -> float:
    from npu_console.engine.quant.mixed import int8_fraction

    names = set(info.quantized) | set(info.skipped)
    params = {n: m.weight.numel() for n, m in model.named_modules() if n in names}
    return int8_fraction(params, info.quantized)


def _finish_auto(req: QuantizeRequest, cfg: QuantConfig, loaded: Any, float_bytes: int,
                 stages: dict, t0: float, step: Progress, cancel) -> QuantizeResult:
    from npu_console.engine.quant.auto import calibration_samples, run_auto
    from npu_console.engine.quant.evaluate import weight_bytes
    from npu_console.engine.quant.io import export

    t = time.perf_counter()
    samples, source = calibration_samples(loaded.model, loaded.tokenizer, req.calib_file,
                                          req.samples, req.seq_len, loaded.files_dir, step,
                                          cancel)
    stages["calibrate"] = time.perf_counter() - t
    t = time.perf_counter()
    res = run_auto(loaded.model, loaded.tokenizer, cfg, samples, source, req.budget_pct,
                   req.eval_file, progress=step, cancel=cancel)
    stages["quantize"] = time.perf_counter() - t
    t = time.perf_counter()
    step("export", 0, 1)
    export(res.model, Path(req.out_dir), req.fmt, source_dir=loaded.files_dir,
           overwrite=req.overwrite)
    step("export", 1, 1)
    stages["export"] = time.perf_counter() - t
    return QuantizeResult(out_dir=str(req.out_dir), fmt=req.fmt, info=res.info,
                          seconds=time.perf_counter() - t0, calib_samples=res.calib_samples,
                          float_weight_bytes=float_bytes,
                          quant_weight_bytes=weight_bytes(res.model), stages=stages,
                          calibration=source, int8_weight_fraction=res.int8_weight_fraction,
                          kept_float=res.kept_float, float_perplexity=res.float_ppl,
                          quant_perplexity=res.quant_ppl, budget=res.budget)
