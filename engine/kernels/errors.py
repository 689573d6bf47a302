"""The one error the int8 kernels and the quantizer share."""

from __future__ import annotations


class QuantError(Exception):
    """A user-facing quantization problem (bad option, unusable input, a layer this device's
    int8 kernels cannot run); one line, no traceback. Defined here, below engine.quant, because
    the device backends raise it too (kernels/npu.py checks what a chip can run) and the kernels
    never import engine.quant; engine.quant.config re-exports it."""
