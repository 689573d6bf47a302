"""One quantization run from a model folder to an exported checkpoint: the API the CLI and the
GUI wizard share (progress callback + cancel event in, a result dataclass out)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.quant import calib as calib_mod
from engine.quant.apply import QuantInfo, quantize_model
from engine.quant.calib import Cancelled, Progress
from engine.quant.config import FORMATS, QuantConfig, QuantError, select_layers
from engine.quant.outdir import OutputFolderError, check_replaceable


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

    def to_dict(self) -> dict:
        return {"out_dir": self.out_dir, "format": self.fmt, "seconds": round(self.seconds, 2),
                "calib_samples": self.calib_samples, "float_weight_bytes": self.float_weight_bytes,
                "quant_weight_bytes": self.quant_weight_bytes,
                "stages": {k: round(v, 2) for k, v in self.stages.items()},
                **self.info.to_dict()}


def load_float_model(model_dir: str, device: str, dtype: str) -> tuple[Any, Any]:
    """Model + tokenizer through the engine's loader (its errors are already user-facing)."""
    from engine.models.gguf import GgufError, gguf_file_of
    from engine.models.loader import load_model

    path = Path(model_dir)
    try:
        is_gguf = gguf_file_of(path) is not None
    except GgufError as exc:
        raise QuantError(str(exc)) from None
    if not is_gguf and not (path / "config.json").is_file():
        raise QuantError(f"{path} is not a model folder (no config.json) nor a GGUF file")
    from engine.quant.io import detect_format

    if detect_format(path) is not None:
        raise QuantError(f"{path} is already quantized; quantize the float model")
    loaded = load_model(path, device=device, dtype=dtype)
    return loaded.model, loaded.tokenizer


def run_quantize(req: QuantizeRequest, progress: Progress | None = None,
                 cancel: threading.Event | None = None) -> QuantizeResult:
    from engine.quant.evaluate import weight_bytes
    from engine.quant.io import export

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
    texts = calib_mod.read_texts(req.calib_file) if cfg.needs_calibration else None

    def step(stage: str, done: int, total: int) -> None:
        if progress:
            progress(stage, done, total)
        if cancel is not None and cancel.is_set():
            raise Cancelled()

    step("load", 0, 1)
    model, tok = load_float_model(req.model_dir, req.device, req.dtype)
    stages["load"] = time.perf_counter() - t0
    if req.device.startswith("npu"):
        import torch

        from engine.quant.kernels.npu import check_supported
        for name in select_layers(model, cfg).quantize:
            lin = model.get_submodule(name)
            check_supported(cfg.method, getattr(torch, req.dtype), lin.in_features,
                            lin.out_features)
    float_bytes = weight_bytes(model)
    step("load", 1, 1)
    stats, n_samples = None, 0
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
                          stages=stages)
