"""What a benchmark ran on, and how fast that memory can be read.

Decode of a batch reads every weight once per step plus each sequence's KV cache, so the memory
bandwidth bounds the decode rate. On the CPU the bandwidth is measured (a short multi-threaded
torch reduction over a buffer far larger than the caches, best of a few passes; the best figure
of the day per CPU is kept); accelerators use the vendor's spec-sheet figure from the table
below. `--bandwidth` beats both.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass

# Peak memory bandwidth in GB/s (10^9 bytes/s) of accelerators, matched against the device name
# (lower case, first match wins, so specific names come before general ones). Sources:
# - NVIDIA data sheets: H200 SXM 4.8 TB/s (HBM3e); H100 SXM 3.35 TB/s, H100 PCIe 2.0 TB/s;
#   A100 80GB SXM 2,039 GB/s, A100 40GB 1,555 GB/s; L40S 864 GB/s; L4 300 GB/s; A10 600 GB/s;
#   T4 320 GB/s; V100 900 GB/s; GeForce RTX 4090 1,008 GB/s.
# - Ascend 910B (Atlas 800T/800I A2, 64 GB HBM2e): about 1.6 TB/s as commonly quoted for the
#   910B1-B3 bins; public figures vary (third-party write-ups give 1.2-1.6 TB/s and Huawei does not
#   publish one number per bin), so treat it as approximate and measure or pass --bandwidth.
#   910B4 (32 GB): about 0.8 TB/s on the same basis. Ascend 910 (first generation, Atlas 300T
#   9000 white paper): 1.2 TB/s HBM2. Ascend 310P3 (Atlas 300I Pro, LPDDR4X): 204.8 GB/s.
SPEC_BANDWIDTH_GBPS: tuple[tuple[str, float, str], ...] = (
    ("h200", 4800.0, "NVIDIA H200 data sheet (HBM3e 4.8 TB/s)"),
    ("h100 pcie", 2000.0, "NVIDIA H100 data sheet (PCIe, 2.0 TB/s)"),
    ("h100", 3350.0, "NVIDIA H100 data sheet (SXM, 3.35 TB/s)"),
    ("a100-sxm4-80gb", 2039.0, "NVIDIA A100 data sheet (80GB SXM, 2,039 GB/s)"),
    ("a100 80gb", 1935.0, "NVIDIA A100 data sheet (80GB PCIe, 1,935 GB/s)"),
    ("a100", 1555.0, "NVIDIA A100 data sheet (40GB, 1,555 GB/s)"),
    ("l40s", 864.0, "NVIDIA L40S data sheet (864 GB/s)"),
    ("l4", 300.0, "NVIDIA L4 data sheet (300 GB/s)"),
    ("a10", 600.0, "NVIDIA A10 data sheet (600 GB/s)"),
    ("t4", 320.0, "NVIDIA T4 data sheet (320 GB/s)"),
    ("v100", 900.0, "NVIDIA V100 data sheet (900 GB/s)"),
    ("rtx 4090", 1008.0, "NVIDIA GeForce RTX 4090 specifications (1,008 GB/s)"),
    ("910b4", 800.0, "Ascend 910B4, 32 GB HBM: approximate public figure"),
    ("910b", 1600.0, "Ascend 910B (A2), 64 GB HBM2e: approximate public figure ~1.6 TB/s"),
    ("910_93", 1600.0, "Ascend 910C die (A3): approximate, per-die figure as 910B"),
    ("910", 1200.0, "Ascend 910 (Atlas 300T 9000 white paper: 1.2 TB/s)"),
    ("310p", 204.8, "Ascend 310P3 (Atlas 300I Pro: 204.8 GB/s LPDDR4X)"),
)


CACHE_TTL_S = 24 * 3600


@dataclass(frozen=True)
class Bandwidth:
    gbps: float
    source: str  # "measured ...", a data sheet, or "given with --bandwidth"


def spec_bandwidth(device_name: str) -> Bandwidth | None:
    name = device_name.lower()
    for pattern, gbps, source in SPEC_BANDWIDTH_GBPS:
        if pattern in name:
            return Bandwidth(gbps, source)
    return None


def _cache_path():
    from ..paths import state_dir

    return state_dir() / "host_bandwidth.json"


def measure_host_bandwidth(size_mb: int = 512, passes: int = 5,
                           use_cache: bool = True) -> Bandwidth:
    """Read bandwidth of host memory in GB/s: best pass of torch.sum over a float32 buffer, with
    torch's current thread count (decode uses the same threads, so the same ceiling).

    Measured every time (about a second). With `use_cache`, the best figure of the last day is
    kept and returned when today's is lower: a measurement taken while other work loads the
    host understates the memory system, and the roofline should be the hardware's, not the
    moment's. Older figures are dropped (hardware or settings may have changed)."""
    from ..devices import cpu_name, import_torch

    torch = import_torch()
    key = f"{cpu_name()}|{os.cpu_count()}|{torch.get_num_threads()}|{size_mb}"
    n = size_mb * (1 << 20) // 4
    buf = torch.ones(n, dtype=torch.float32)
    buf.sum()  # fault the pages in before timing
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    del buf
    gbps = n * 4 / best / 1e9
    fresh = Bandwidth(gbps, f"measured on this host (torch.sum over {size_mb} MiB)")
    if not use_cache:
        return fresh
    path = _cache_path()
    try:
        cached = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    entry = cached.get(key)
    try:
        if entry and time.time() - float(entry["at"]) < CACHE_TTL_S and \
                float(entry["gbps"]) > gbps:
            return Bandwidth(float(entry["gbps"]),
                             f"measured on this host (best of the last day; now {gbps:.1f})")
    except (TypeError, KeyError, ValueError):
        pass
    cached[key] = {"gbps": round(gbps, 2), "at": time.time()}
    try:
        path.write_text(json.dumps(cached, indent=1))
    except OSError:
        pass
    return fresh


def device_bandwidth(device: str, override_gbps: float | None = None) -> Bandwidth | None:
    """The bandwidth used for roofline shares on `device` ("cpu", "cuda:0", "npu:1")."""
    if override_gbps:
        return Bandwidth(float(override_gbps), "given with --bandwidth")
    if device.split(":")[0] == "cpu":
        return measure_host_bandwidth()
    from ..devices import get_device

    try:
        info = get_device(device)
    except ValueError:
        return None
    return spec_bandwidth(info.name)


@dataclass(frozen=True)
class HostInfo:
    cpu: str
    cores: int
    memory_gb: float
    platform: str
    python: str
    torch: str | None
    devices: tuple[str, ...]


def host_info() -> HostInfo:
    import psutil

    from ..devices import cpu_name

    try:
        from ..devices import import_torch, list_devices

        torch_version = import_torch().__version__
        devices = tuple(f"{d.torch_device}: {d.name} ({d.total_memory / 2**30:.1f} GiB)"
                        for d in list_devices())
    except Exception as exc:  # noqa: BLE001 - the record says why instead of failing the run
        torch_version = None
        devices = (f"unknown ({type(exc).__name__})",)
    return HostInfo(cpu=cpu_name(), cores=os.cpu_count() or 1,
                    memory_gb=round(psutil.virtual_memory().total / 2**30, 1),
                    platform=platform.platform(), python=platform.python_version(),
                    torch=torch_version, devices=devices)


def host_info_dict() -> dict:
    return asdict(host_info())
