"""INT8 quantization: W8A16, W8A8 dynamic, W8A8 static + SmoothQuant; calibration, sensitivity,
evaluation and exports (native, compressed-tensors, msModelSlim). No Qt here.

Entry points: `run_workflow(QuantizeRequest, on_event, cancel)` for a whole job (load,
calibrate, quantize, export, evaluate, report; engine.quant.workflow),
`quantize_model(model, QuantConfig, stats)` to quantize a loaded model in place,
`io.export` / `io.load_quantized` for checkpoints.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "QuantConfig": "npu_console.engine.quant.config",
    "QuantError": "npu_console.engine.quant.config",
    "select_layers": "npu_console.engine.quant.config",
    "QuantLinear": "npu_console.engine.quant.qlinear",
    "quantize_model": "npu_console.engine.quant.apply",
    "prepare_for_serving": "npu_console.engine.quant.apply",
    "QuantInfo": "npu_console.engine.quant.apply",
    "Cancelled": "npu_console.engine.quant.calib",
    "QuantizeRequest": "npu_console.engine.quant.workflow",
    "QuantizeResult": "npu_console.engine.quant.workflow",
    "StageEvent": "npu_console.engine.quant.workflow",
    "run_workflow": "npu_console.engine.quant.workflow",
    "run_quantize": "npu_console.engine.quant.workflow",
    "export": "npu_console.engine.quant.io",
    "load_quantized": "npu_console.engine.quant.io",
    "load_quantized_model": "npu_console.engine.quant.io",
    "detect_format": "npu_console.engine.quant.io",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'npu_console.engine.quant' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
