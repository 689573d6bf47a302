"""How many parameters a loaded model has and how many bytes its weights take, whatever form
they are in. An INT8 layer keeps its weight as a buffer, not a parameter, and a layer packed
for serving frees that buffer (the kernel's packed copy is all that is left), so counting
`model.parameters()` alone says "0.03 M" for a model loaded straight to INT8."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class ModelSize:
    parameters: int
    weight_bytes: int


def _released_int8_weight(module: Any, name: str, t: torch.Tensor) -> int:
    """Elements of an int8 weight that was freed after packing (0 when it is still there)."""
    if name == "weight" and t.dtype == torch.int8 and t.numel() == 0:
        return int(getattr(module, "in_features", 0)) * int(getattr(module, "out_features", 0))
    return 0


def _released_scale_bytes(module: Any, name: str, t: torch.Tensor) -> int:
    """Bytes of weight scales that moved into a packed copy, as it keeps them (fp16; 0 when
    still here)."""
    if name != "weight_scale" or t.numel():
        return 0
    k, n = int(getattr(module, "in_features", 0)), int(getattr(module, "out_features", 0))
    group = int(getattr(module, "group_size", 0) or 0)
    packed = getattr(module, "packed", None)
    size = packed.scale.element_size() if packed is not None else 4
    return size * n * (k // group if group else 1)


def model_size(model: Any) -> ModelSize:
    params = nbytes = 0
    seen: set[int] = set()  # a tensor shared by two modules (tied weights) counts once
    for module in model.modules():
        for name, t in [*module.named_parameters(recurse=False),
                        *module.named_buffers(recurse=False)]:
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            released = _released_int8_weight(module, name, t)
            is_weight = isinstance(t, torch.nn.Parameter) or (
                name in ("weight", "bias") and t.dtype in (torch.int8, *_FLOATS))
            if released:
                params += released
                nbytes += released  # one byte each, as the packed copy keeps them
            elif is_weight:
                params += t.numel()
                nbytes += t.numel() * t.element_size()
            else:  # scales, rotary tables, masks: bytes, not parameters
                nbytes += t.numel() * t.element_size() + _released_scale_bytes(module, name, t)
    return ModelSize(params, nbytes)


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
