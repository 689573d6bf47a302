"""The host: CPU and memory, and this engine process's own CPU % and RSS, through psutil."""

from __future__ import annotations

import os

from ..devices import cpu_name
from .types import DeviceSnapshot, HostSnapshot


class HostProvider:
    """Host CPU and memory, and this process's own CPU % and RSS, through psutil."""

    name = "host"

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        # cpu_percent(None) measures since the previous call: prime both counters now
        psutil.cpu_percent(interval=None)
        self._proc.cpu_percent(interval=None)
        self._cpu_name = cpu_name()

    def host(self) -> HostSnapshot:
        ps = self._psutil
        try:
            cpu = float(ps.cpu_percent(interval=None))
        except Exception:  # noqa: BLE001
            cpu = None
        try:
            vm = ps.virtual_memory()
            used, total, pct = (
                (vm.total - vm.available) / 2**20,
                vm.total / 2**20,
                float(vm.percent),
            )
        except Exception:  # noqa: BLE001
            used = total = pct = None
        try:
            load = float(os.getloadavg()[0])
        except (OSError, AttributeError):
            load = None
        try:
            pcpu = float(self._proc.cpu_percent(interval=None))
            rss = self._proc.memory_info().rss / 2**20
        except Exception:  # noqa: BLE001
            pcpu = rss = None
        return HostSnapshot(
            cpu_pct=cpu,
            cpu_count=ps.cpu_count(logical=True),
            mem_used_mb=used,
            mem_total_mb=total,
            mem_pct=pct,
            load_1m=load,
            proc_pid=self._proc.pid,
            proc_cpu_pct=pcpu,
            proc_rss_mb=rss,
        )

    def cpu_device(self, host: HostSnapshot) -> DeviceSnapshot:
        return DeviceSnapshot(
            kind="cpu",
            index=0,
            key="cpu",
            name=self._cpu_name,
            health="OK",
            util_pct=host.cpu_pct,
            mem_used_mb=host.mem_used_mb,
            mem_total_mb=host.mem_total_mb,
            temp_c=_cpu_temp(self._psutil),
        )


def _cpu_temp(psutil) -> float | None:
    fn = getattr(psutil, "sensors_temperatures", None)
    if fn is None:
        return None
    try:
        temps = fn()
    except Exception:  # noqa: BLE001
        return None
    for name in ("coretemp", "k10temp", "cpu_thermal", "zenpower"):
        for entry in temps.get(name, ()):
            if entry.current:
                return float(entry.current)
    return None
