"""Build flavour (cpu / cuda / ascend): as recorded by the packaging, forced, or detected.

The offline bundle builder (packaging/bundle.py) writes `engine/_build_flavour.py` into the wheel it
builds, so an installed bundle knows what it was built for even before torch is importable (a broken
CANN makes `import torch` fail, and that is exactly when support needs the flavour). A checkout or a
plain wheel has no such file and falls back to detecting what is installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, replace

FLAVOURS = ("cpu", "cuda", "ascend")
ENV_VAR = "NPU_CONSOLE_FLAVOUR"


@dataclass(frozen=True)
class BuildInfo:
    flavour: str
    source: str  # "env" (NPU_CONSOLE_FLAVOUR), "bundle" (recorded at build time) or "detected"
    target: str | None = None  # machine the bundle was built for, e.g. "x86_64"
    python: str | None = None  # "3.11"
    torch: str | None = None  # torch release the bundle pins
    torch_npu: str | None = None
    built: str | None = None  # UTC timestamp of the bundle build

    def describe(self) -> str:
        """One line for `--version` and the About box, e.g. `cpu, bundle x86_64, torch 2.13.0+cpu`."""
        parts = [self.flavour]
        if self.source == "bundle":
            parts.append(f"bundle {self.target}" if self.target else "bundle")
        elif self.source == "env":
            parts.append(f"from {ENV_VAR}")
        if self.torch:
            parts.append(f"torch {self.torch}")
        if self.torch_npu:
            parts.append(f"torch_npu {self.torch_npu}")
        return ", ".join(parts)


def _recorded() -> BuildInfo | None:
    try:
        rec = importlib.import_module("npu_console.engine._build_flavour")
    except ImportError:
        return None
    flavour = getattr(rec, "FLAVOUR", None)
    if flavour not in FLAVOURS:
        return None
    return BuildInfo(
        flavour=flavour,
        source="bundle",
        target=getattr(rec, "TARGET", None),
        python=getattr(rec, "PYTHON", None),
        torch=getattr(rec, "TORCH", None),
        torch_npu=getattr(rec, "TORCH_NPU", None),
        built=getattr(rec, "BUILT", None),
    )


def _detected() -> str:
    # find_spec only: importing torch_npu without CANN raises, and --version must stay instant
    if importlib.util.find_spec("torch_npu") is not None:
        return "ascend"
    if importlib.util.find_spec("pynvml") is not None:
        return "cuda"
    return "cpu"


def build_info() -> BuildInfo:
    recorded = _recorded()
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    if forced in FLAVOURS:
        base = recorded or BuildInfo(flavour=forced, source="env")
        return replace(base, flavour=forced, source="env")
    if recorded is not None:
        return recorded
    return BuildInfo(flavour=_detected(), source="detected")


def flavour() -> str:
    return build_info().flavour
