"""Accelerators behind one API: Ascend NPU (torch_npu), CUDA, CPU.

The only module that imports torch_npu. torch autoloads torch_npu through an entry point, and
without CANN that autoload makes `import torch` itself fail (see shared/design/ASCEND_INT8.md 1.2),
so `import_torch()` disables the autoload, imports torch, then tries torch_npu explicitly and keeps
the failure message for the doctor and the UI.
"""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

_NPU_IMPORT_ERROR: str | None = None


@lru_cache(maxsize=1)
def import_torch() -> Any:
    """Import torch safely, with torch_npu when it is installed and works."""
    global _NPU_IMPORT_ERROR
    if importlib.util.find_spec("torch_npu") is not None:
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch

    if importlib.util.find_spec("torch_npu") is not None:
        try:
            import torch_npu  # noqa: F401
        except (ImportError, OSError, RuntimeError) as exc:
            _NPU_IMPORT_ERROR = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return torch


def npu_import_error() -> str | None:
    """Why torch_npu could not be imported (None when it imported or is not installed)."""
    import_torch()
    return _NPU_IMPORT_ERROR


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "npu", "cuda", "cpu"
    index: int
    name: str
    total_memory: int  # bytes
    free_memory: int  # bytes
    dtypes: tuple[str, ...]  # supported float dtypes, best first
    extra: dict = field(default_factory=dict)

    @property
    def torch_device(self) -> str:
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    @property
    def label(self) -> str:
        return f"{self.torch_device} ({self.name})"


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (x86 'flags', Arm 'Features'); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_name() -> str:
    """The CPU's model from /proc/cpuinfo (x86 'model name', some Arm kernels 'Hardware'), else
    what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "CPU"


def cpu_supports_bf16() -> bool:
    """bf16 is only worth offering where the CPU computes it natively (AVX512-BF16 / AMX / Arm BF16)."""
    flags = cpu_flags()
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def cpu_device() -> DeviceInfo:
    import psutil

    vm = psutil.virtual_memory()
    dtypes = ("float32", "bfloat16") if cpu_supports_bf16() else ("float32",)
    return DeviceInfo(
        kind="cpu", index=0, name=cpu_name(), total_memory=vm.total, free_memory=vm.available,
        dtypes=dtypes, extra={"cores": os.cpu_count() or 1, "vnni": "avx512_vnni" in cpu_flags()},
    )


def npu_dtypes(soc_name: str) -> tuple[str, ...]:
    """bf16 exists on 910B / 910C (A2/A3) only; 310P and the first 910 take fp16."""
    name = soc_name.lower().replace(" ", "")
    if "910b" in name or "910_93" in name or "910c" in name or "950" in name:
        return ("bfloat16", "float16", "float32")
    return ("float16", "float32")


def _npu_devices(torch: Any) -> list[DeviceInfo]:
    npu = getattr(torch, "npu", None)
    if npu is None or not npu.is_available():
        return []
    out = []
    for i in range(npu.device_count()):
        name = npu.get_device_name(i)
        free, total = npu.mem_get_info(i)
        out.append(DeviceInfo("npu", i, name, total, free, npu_dtypes(name)))
    return out


def _cuda_devices(torch: Any) -> list[DeviceInfo]:
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        dtypes = ("bfloat16", "float16", "float32") if torch.cuda.is_bf16_supported() else (
            "float16", "float32")
        out.append(DeviceInfo("cuda", i, props.name, total, free, dtypes))
    return out


def list_devices() -> list[DeviceInfo]:
    """Every usable device, accelerators first; the CPU is always last."""
    torch = import_torch()
    return _npu_devices(torch) + _cuda_devices(torch) + [cpu_device()]


def default_device() -> DeviceInfo:
    return list_devices()[0]


def get_device(spec: str | None) -> DeviceInfo:
    """Resolve "auto"/None, "cpu", "npu", "npu:1", "cuda:0" to a DeviceInfo; ValueError if absent."""
    devices = list_devices()
    if spec in (None, "", "auto"):
        return devices[0]
    kind, _, idx = spec.partition(":")
    index = int(idx) if idx else 0
    for dev in devices:
        if dev.kind == kind and (dev.kind == "cpu" or dev.index == index):
            return dev
    have = ", ".join(d.torch_device for d in devices)
    raise ValueError(f"device {spec!r} is not available here (available: {have})")


def default_dtype(device: DeviceInfo) -> str:
    """fp32 on CPU (exact, and int8 kernels take fp32 activations); the best half type elsewhere."""
    return "float32" if device.kind == "cpu" else device.dtypes[0]


def synchronize(device: str) -> None:
    torch = import_torch()
    kind = device.split(":")[0]
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "npu":
        torch.npu.synchronize(device)


class Timer:
    """Wall-clock timer that synchronizes the device first, so async kernels are counted."""

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.elapsed = 0.0

    def __enter__(self) -> Timer:  # noqa: PYI034 - not subclassed
        synchronize(self.device)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        synchronize(self.device)
        self.elapsed = time.perf_counter() - self._t0


def memory_allocated(device: str) -> int | None:
    """Bytes held by the framework's allocator on an accelerator; None on CPU (use RSS)."""
    torch = import_torch()
    kind = device.split(":")[0]
    if kind == "cuda":
        return torch.cuda.memory_allocated(device)
    if kind == "npu":
        return torch.npu.memory_allocated(device)
    return None
