"""The products, in one place for the runtime and engine.quant alike: the int8 layer the
kernels read (int8_linear.Int8Linear, which engine.quant's QuantLinear builds on), its
backends (one module per device family, chosen here), the int8 arithmetic (qmath) and the
native AVX2 kernels (native.py: cpu_gemm.c / cpu_decode.c, built on first use, trust-checked
cache) that the runtime's fp32 products and decode step use too. Nothing here imports
engine.quant or engine.runtime (tests/test_architecture_bars.py).

Every int8 backend computes the same math (int8 weights with per-channel scales; activations kept
float for W8A16, quantized to int8 per token or per tensor for W8A8) with the fastest integer
kernel the device offers; `reference` is the exact integer oracle the tests compare them with.
"""

from __future__ import annotations

from typing import Any

_BACKENDS: dict[str, Any] = {}


def get_backend(name: str) -> Any:
    if name not in _BACKENDS:
        if name == "cpu":
            from .cpu import CpuBackend as cls
        elif name == "cuda":
            from .cuda import CudaBackend as cls
        elif name == "npu":
            from .npu import NpuBackend as cls
        elif name == "reference":
            from .reference import ReferenceBackend as cls
        else:
            raise ValueError(f"no int8 backend for device type {name!r}")
        _BACKENDS[name] = cls()
    return _BACKENDS[name]


def backend_for(module: Any, device: Any) -> Any:
    name = module.backend if module.backend != "auto" else device.type
    return get_backend(name)
