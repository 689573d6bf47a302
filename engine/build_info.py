"""Build flavour (cpu / cuda / ascend) as recorded by the packaging, or detected."""

from __future__ import annotations

import importlib.util
import os


def flavour() -> str:
    forced = os.environ.get("NPU_CONSOLE_FLAVOUR")
    if forced:
        return forced
    if importlib.util.find_spec("torch_npu") is not None:
        return "ascend"
    if importlib.util.find_spec("pynvml") is not None:
        return "cuda"
    return "cpu"
