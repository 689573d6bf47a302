"""NVIDIA GPUs through NVML (`nvidia-ml-py`, imported only when the provider is built)."""

from __future__ import annotations

import logging

from .types import DeviceSnapshot, ProcessInfo, ProviderError, Reading

log = logging.getLogger(__name__)


class NvmlProvider:
    """NVIDIA GPUs through NVML (`nvidia-ml-py`, imported only when this provider is used)."""

    name = "nvml"

    def __init__(self) -> None:
        self._nvml = None
        self._problem: str | None = None
        try:
            import pynvml  # type: ignore[import-not-found]
        except ImportError:
            self._problem = "NVML unavailable: nvidia-ml-py (pynvml) is not installed"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, driver not loaded...
            self._problem = f"NVML unavailable: {exc}"
            return
        self._nvml = pynvml

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def read(self) -> Reading:
        nv = self._nvml
        if nv is None:
            return Reading(
                error=ProviderError("unavailable", self._problem or "NVML unavailable"),
                source=self.name,
            )
        devices: list[DeviceSnapshot] = []
        procs: list[ProcessInfo] = []
        warnings: list[str] = []
        try:
            count = nv.nvmlDeviceGetCount()
        except Exception as exc:  # noqa: BLE001
            return Reading(error=ProviderError("unavailable", f"NVML: {exc}"), source=self.name)
        for i in range(count):
            key = f"gpu{i}"

            def q(fn, *args, key=key):
                try:
                    return fn(*args)
                except Exception as exc:  # noqa: BLE001 - one unsupported query must not hide the others
                    warnings.append(f"{key}: {getattr(fn, '__name__', 'query')}: {exc}")
                    return None

            h = q(nv.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                continue
            name = q(nv.nvmlDeviceGetName, h) or f"GPU {i}"
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            util = q(nv.nvmlDeviceGetUtilizationRates, h)
            mem = q(nv.nvmlDeviceGetMemoryInfo, h)
            temp = q(nv.nvmlDeviceGetTemperature, h, 0)  # NVML_TEMPERATURE_GPU
            power = q(nv.nvmlDeviceGetPowerUsage, h)
            pci = q(nv.nvmlDeviceGetPciInfo, h)
            gpu_procs = []
            for p in q(nv.nvmlDeviceGetComputeRunningProcesses, h) or []:
                used = getattr(p, "usedGpuMemory", None)
                gpu_procs.append(
                    ProcessInfo(
                        pid=int(p.pid),
                        name=_proc_name(int(p.pid)),
                        memory_mb=None if used is None else used / 2**20,
                        device_key=key,
                    )
                )
            bus = getattr(pci, "busId", None) if pci is not None else None
            if isinstance(bus, bytes):
                bus = bus.decode(errors="replace")
            devices.append(
                DeviceSnapshot(
                    kind="gpu",
                    index=i,
                    key=key,
                    name=str(name),
                    health="OK",
                    util_pct=None if util is None else float(util.gpu),
                    mem_used_mb=None if mem is None else mem.used / 2**20,
                    mem_total_mb=None if mem is None else mem.total / 2**20,
                    temp_c=None if temp is None else float(temp),
                    power_w=None if power is None else power / 1000.0,
                    bus_id=bus,
                    processes=tuple(gpu_procs),
                )
            )
            procs.extend(gpu_procs)
        return Reading(tuple(devices), tuple(procs), tuple(warnings), None, self.name)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:  # noqa: BLE001 - shutting down anyway
                log.debug("nvmlShutdown failed: %s", exc)
            self._nvml = None


def _proc_name(pid: int) -> str:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001
        return ""
