"""The inference engine: scheduler, model runner, sampler and the LocalEngine client.

Names are imported lazily so that the pure-Python parts (scheduler, types) load without torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "EngineConfig": "npu_console.engine.runtime.config",
    "LocalEngine": "npu_console.engine.runtime.engine",
    "Job": "npu_console.engine.runtime.handle",
    "LocalRequestHandle": "npu_console.engine.runtime.handle",
    "StepStats": "npu_console.engine.runtime.metrics",
}

__all__ = ["EngineConfig", "Job", "LocalEngine", "LocalRequestHandle", "StepStats"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'npu_console.engine.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
