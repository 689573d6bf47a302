"""INT8 quantization: W8A16, W8A8 dynamic, W8A8 static + SmoothQuant; calibration, sensitivity,
evaluation and exports (native, compressed-tensors, msModelSlim). No Qt here.

Entry points: `run_quantize(QuantizeRequest, progress, cancel)` for a whole job,
`quantize_model(model, QuantConfig, stats)` to quantize a loaded model in place,
`io.export` / `io.load_quantized` for checkpoints.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "QuantConfig": "engine.quant.config",
    "QuantError": "engine.quant.config",
    "select_layers": "engine.quant.config",
    "QuantLinear": "engine.quant.qlinear",
    "quantize_model": "engine.quant.apply",
    "prepare_for_serving": "engine.quant.apply",
    "QuantInfo": "engine.quant.apply",
    "Cancelled": "engine.quant.calib",
    "QuantizeRequest": "engine.quant.job",
    "QuantizeResult": "engine.quant.job",
    "run_quantize": "engine.quant.job",
    "export": "engine.quant.io",
    "load_quantized": "engine.quant.io",
    "load_quantized_model": "engine.quant.io",
    "detect_format": "engine.quant.io",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine.quant' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
