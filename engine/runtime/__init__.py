"""The inference engine: scheduler, model runner, sampler and the LocalEngine client.

Names are imported lazily so that the pure-Python parts (scheduler, types) load without torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "EngineConfig": "engine.runtime.config",
    "LocalEngine": "engine.runtime.engine",
    "Job": "engine.runtime.handle",
    "LocalRequestHandle": "engine.runtime.handle",
    "StepStats": "engine.runtime.metrics",
}

__all__ = ["EngineConfig", "Job", "LocalEngine", "LocalRequestHandle", "StepStats"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
