"""Model formats beyond a Hugging Face folder: which function inspects or loads each.

engine.models knows these formats by name; each is implemented where it belongs (the GGUF
header reader in engine.models.gguf, INT8 exports in engine.quant.io, which itself builds on
engine.models.loader) and is found here by a "module:function" path resolved on first use. So
the folder check does not import the GGUF reader, and loading an INT8 folder does not make
engine.models import engine.quant: no import cycle (tests/test_architecture_bars.py). Another
format is one more entry, or a `register()` call from its own package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# (format, job) -> "module:function"
_REGISTRY: dict[tuple[str, str], str | Callable[..., Any]] = {
    # path -> ModelFolderReport of a GGUF file (or a folder holding one), or None
    ("gguf", "inspect"): "npu_console.engine.models.gguf:inspect_path",
    # (path, device=, dtype=, name=, progress=, cancel=) -> LoadedModel of an INT8 export
    ("int8", "load"): "npu_console.engine.quant.io:load_quantized",
    # the same for a GGUF file loaded straight into INT8 (no float copy)
    ("gguf-int8", "load"): "npu_console.engine.quant.gguf_load:load_gguf_int8",
}


def register(fmt: str, job: str, target: str | Callable[..., Any]) -> None:
    """Add or replace the function doing `job` ("inspect", "load") for `fmt`."""
    _REGISTRY[(fmt, job)] = target


def lookup(fmt: str, job: str) -> Callable[..., Any]:
    """The function registered for (fmt, job); KeyError when there is none."""
    target = _REGISTRY[(fmt, job)]
    if callable(target):
        return target
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    _REGISTRY[(fmt, job)] = fn
    return fn
