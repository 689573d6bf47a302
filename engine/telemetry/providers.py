"""Telemetry sources: npu-smi (subprocess or saved captures), NVML, psutil host.

Each accelerator provider returns (devices, processes, warnings, error) for one instant; a
`SnapshotSource` combines one of them with the host provider into a `TelemetrySnapshot`.
Providers never raise for a failing tool: a missing binary, a timeout or a non-zero exit is
reported in the snapshot's `error`, so a poller can keep going.
"""

from __future__ import annotations

import itertools
import logging
import os
import platform
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.telemetry.npu_smi_table import NpuSmiInfo, parse_npu_smi_info
from engine.telemetry.types import (
    DeviceSnapshot,
    HostSnapshot,
    ProcessInfo,
    ProviderError,
    TelemetrySnapshot,
)

log = logging.getLogger(__name__)

DEFAULT_NPU_SMI = "npu-smi"
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Reading:
    """What an accelerator provider saw in one call."""

    devices: tuple[DeviceSnapshot, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    warnings: tuple[str, ...] = ()
    error: ProviderError | None = None
    source: str = ""
    raw: str | None = None


# ----------------------------------------------------------------------------- npu-smi


def npu_devices_from_info(
    info: NpuSmiInfo,
) -> tuple[tuple[DeviceSnapshot, ...], tuple[ProcessInfo, ...]]:
    """Turn a parsed table into one DeviceSnapshot per chip, processes attached to their chip."""
    procs_by_chip: dict[tuple[int, int], list[ProcessInfo]] = {}
    all_procs: list[ProcessInfo] = []
    for p in info.processes:
        key = f"npu{p.npu_id}-{p.chip_id}"
        proc = ProcessInfo(
            pid=p.pid,
            name=p.name,
            memory_mb=None if p.memory_mb is None else float(p.memory_mb),
            device_key=key,
            npu_id=p.npu_id,
            chip_id=p.chip_id,
            container_pid=p.container_pid,
        )
        procs_by_chip.setdefault((p.npu_id, p.chip_id), []).append(proc)
        all_procs.append(proc)
    devices = []
    for i, c in enumerate(info.chips):
        # accelerator memory is HBM where the layout has it (910 class); on 310/310P/310B the
        # "Memory-Usage" DDR column is the device memory
        if c.hbm_total_mb:
            used, total = c.hbm_used_mb, c.hbm_total_mb
        else:
            used, total = c.memory_used_mb, c.memory_total_mb
        devices.append(
            DeviceSnapshot(
                kind="npu",
                index=i,
                key=f"npu{c.npu_id}-{c.chip_id}",
                name=c.name,
                health=c.health,
                util_pct=None if c.aicore_pct is None else float(c.aicore_pct),
                mem_used_mb=None if used is None else float(used),
                mem_total_mb=None if total is None else float(total),
                temp_c=None if c.temp_c is None else float(c.temp_c),
                power_w=c.power_w,
                bus_id=c.bus_id,
                npu_id=c.npu_id,
                chip_id=c.chip_id,
                device_id=c.device_id,
                hugepages_used=c.hugepages_used,
                hugepages_total=c.hugepages_total,
                ddr_used_mb=None if c.memory_used_mb is None else float(c.memory_used_mb),
                ddr_total_mb=None if c.memory_total_mb is None else float(c.memory_total_mb),
                processes=tuple(procs_by_chip.get((c.npu_id, c.chip_id), ())),
            )
        )
    return tuple(devices), tuple(all_procs)


def reading_from_text(text: str, source: str, returncode: int | None = 0) -> Reading:
    info = parse_npu_smi_info(text)
    devices, procs = npu_devices_from_info(info)
    error = None
    if info.error is not None:
        error = ProviderError("exit", info.error.message, info.error.code)
    elif returncode not in (0, None):
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
        msg = f"npu-smi exited with status {returncode}" + (f": {last[:200]}" if last else "")
        error = ProviderError("exit", msg, returncode)
    elif not devices:
        error = ProviderError("parse", "npu-smi printed no device table", None)
    return Reading(devices, procs, info.warnings, error, source, text)


def resolve_binary(binary: str | os.PathLike | None) -> str | None:
    binary = str(binary or DEFAULT_NPU_SMI)
    if os.sep in binary or (os.altsep and os.altsep in binary):
        return binary if os.path.isfile(binary) and os.access(binary, os.X_OK) else None
    return shutil.which(binary)


class NpuSmiProvider:
    """Runs `npu-smi info` once per call (one call covers every card)."""

    name = "npu-smi"

    def __init__(
        self, binary: str | os.PathLike | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ):
        self.binary = str(binary or DEFAULT_NPU_SMI)
        self.timeout_s = float(timeout_s)

    @property
    def available(self) -> bool:
        return resolve_binary(self.binary) is not None

    def read(self) -> Reading:
        path = resolve_binary(self.binary)
        if path is None:
            return Reading(
                error=ProviderError("missing", f"npu-smi not found ({self.binary})"),
                source=self.name,
            )
        try:
            rc, out = run_with_timeout([path, "info"], self.timeout_s)
        except subprocess.TimeoutExpired:
            return Reading(
                error=ProviderError("timeout", f"npu-smi timed out after {self.timeout_s:g} s"),
                source=self.name,
            )
        except OSError as exc:
            return Reading(
                error=ProviderError("missing", f"cannot run {path}: {exc.strerror or exc}"),
                source=self.name,
            )
        return reading_from_text(out, self.name, rc)

    def close(self) -> None:
        pass


def run_with_timeout(argv: Sequence[str], timeout_s: float) -> tuple[int, str]:
    """Run a tool in its own process group so that a hung tool and its children all die on
    timeout (a plain kill of the direct child leaves grandchildren holding the pipe open)."""
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "LC_ALL": "C"},
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        try:
            proc.communicate(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
        raise
    return proc.returncode, out.decode("utf-8", errors="replace")


class ReplayProvider:
    """Plays saved `npu-smi info` captures, one per call, cycling (offline analysis, demos)."""

    name = "replay"

    def __init__(self, files: Iterable[str | os.PathLike], cycle: bool = True):
        self.files = [Path(f) for f in files]
        self._texts: list[tuple[str, str | None, str | None]] = []
        for f in self.files:
            try:
                self._texts.append((f.name, f.read_text(encoding="utf-8", errors="replace"), None))
            except OSError as exc:
                self._texts.append((f.name, None, f"cannot read {f}: {exc.strerror or exc}"))
        self.cycle = cycle
        self._order = (
            itertools.cycle(range(len(self._texts))) if cycle else iter(range(len(self._texts)))
        )
        self._lock = threading.Lock()
        self._last: int | None = None

    def read(self) -> Reading:
        if not self._texts:
            return Reading(
                error=ProviderError("missing", "no replay captures given"), source="replay"
            )
        with self._lock:
            idx = next(self._order, None)
            if idx is None:
                idx = self._last if self._last is not None else 0
            self._last = idx
        name, text, problem = self._texts[idx]
        source = f"replay:{name}"
        if text is None:
            return Reading(error=ProviderError("missing", problem or "unreadable"), source=source)
        return reading_from_text(text, source, 0)

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------- NVML


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


# ----------------------------------------------------------------------------- host


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
        self._cpu_name = _cpu_name()

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


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


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


# ----------------------------------------------------------------------------- combined


class SnapshotSource:
    """One accelerator provider (or none) + the host: what the poller samples each cycle."""

    def __init__(self, accelerator=None, host: HostProvider | None = None, note: str | None = None):
        self.accelerator = accelerator
        self.host = host if host is not None else HostProvider()
        self.note = note  # why "auto" fell back, reported as a warning

    @property
    def name(self) -> str:
        return self.accelerator.name if self.accelerator is not None else "host"

    def sample(self) -> TelemetrySnapshot:
        ts = time.time()
        reading = Reading(source="host")
        if self.accelerator is not None:
            try:
                reading = self.accelerator.read()
            except Exception as exc:  # noqa: BLE001 - a provider bug must not stop the poller
                reading = Reading(
                    error=ProviderError("unavailable", f"{type(exc).__name__}: {exc}"),
                    source=self.accelerator.name,
                )
        host = self.host.host()
        warnings = reading.warnings + ((self.note,) if self.note else ())
        return TelemetrySnapshot(
            timestamp=ts,
            devices=reading.devices + (self.host.cpu_device(host),),
            host=host,
            processes=reading.processes,
            source=reading.source or self.name,
            warnings=warnings,
            error=reading.error,
            raw=reading.raw,
        )

    def close(self) -> None:
        if self.accelerator is not None:
            self.accelerator.close()


def make_provider(
    kind: str = "auto",
    *,
    npu_smi_path: str | os.PathLike | None = None,
    replay_files: Iterable[str | os.PathLike] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cycle: bool = True,
) -> SnapshotSource:
    """Build the snapshot source a poller samples. See the package docstring for `kind`."""
    kind = (kind or "auto").lower()
    if kind == "replay":
        return SnapshotSource(ReplayProvider(replay_files, cycle=cycle))
    if kind in ("npu-smi", "npu", "npu_smi"):
        return SnapshotSource(NpuSmiProvider(npu_smi_path, timeout_s))
    if kind in ("nvml", "gpu", "cuda"):
        return SnapshotSource(NvmlProvider())
    if kind in ("host", "cpu"):
        return SnapshotSource(None)
    if kind != "auto":
        raise ValueError(f"unknown telemetry source {kind!r} (auto, npu-smi, nvml, host, replay)")
    npu = NpuSmiProvider(npu_smi_path, timeout_s)
    if npu.available:
        return SnapshotSource(npu)
    nvml = NvmlProvider()
    if nvml.available:
        return SnapshotSource(nvml)
    note = f"no accelerator telemetry: npu-smi not found ({npu.binary}); {nvml._problem}"
    return SnapshotSource(None, note=note)
