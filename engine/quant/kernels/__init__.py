"""Backend kernels for QuantLinear, one module per device family.

Every backend computes the same math (int8 weights with per-channel scales; activations kept
float for W8A16, quantized to int8 per token or per tensor for W8A8) with the fastest integer
kernel the device offers; `reference` is the exact integer oracle the tests compare them with.
"""

from __future__ import annotations

from typing import Any

_BACKENDS: dict[str, Any] = {}


def get_backend(name: str) -> Any:
    if name not in _BACKENDS:
        if name == "cpu":
            from npu_console.engine.quant.kernels.cpu import CpuBackend as cls
        elif name == "cuda":
            from npu_console.engine.quant.kernels.cuda import CudaBackend as cls
        elif name == "npu":
            from npu_console.engine.quant.kernels.npu import NpuBackend as cls
        elif name == "reference":
            from npu_console.engine.quant.kernels.reference import ReferenceBackend as cls
        else:
            raise ValueError(f"no int8 backend for device type {name!r}")
        _BACKENDS[name] = cls()
    return _BACKENDS[name]


def backend_for(module: Any, device: Any) -> Any:
    name = module.backend if module.backend != "auto" else device.type
    return get_backend(name)
