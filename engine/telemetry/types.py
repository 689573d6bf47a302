"""The snapshot model every telemetry source is turned into (immutable, safe to share across threads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

DeviceKind = Literal["npu", "gpu", "cpu"]


@dataclass(frozen=True)
class ProviderError:
    """Why a source produced no (or only partial) data this cycle."""

    kind: Literal["missing", "timeout", "exit", "parse", "unavailable"]
    message: str
    code: int | None = None  # npu-smi return code or process exit status

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ProcessInfo:
    """A process holding accelerator memory."""

    pid: int
    name: str  # "" when the pid lives in another PID namespace
    memory_mb: float | None
    device_key: str
    npu_id: int | None = None
    chip_id: int | None = None
    container_pid: int | None = None


@dataclass(frozen=True)
class ChipDetail:
    """What npu-smi's slower `info -t` sub-commands add about one chip (usages, board, health,
    ecc). Refreshed at its own cadence, so `updated_at` may be older than the snapshot; None
    for a value the sub-command did not print (or has not answered yet)."""

    updated_at: float | None = None  # time.time() of the refresh; None for a replayed capture
    health_status: str | None = None  # `-t health`: OK, Warning, Alarm, Critical, UNKNOWN
    health_meaning: str | None = None  # the status in words (engine/telemetry/npu_health.py)
    error_codes: tuple[str, ...] = ()  # hex codes as printed ("80E01801")
    error_info: tuple[str, ...] = ()  # npu-smi's own lines explaining them
    ecc: tuple[tuple[str, int | None], ...] = ()  # `-t ecc` counters, as printed, in order
    hbm_bandwidth_pct: float | None = None  # `-t usages`
    ddr_bandwidth_pct: float | None = None
    aicpu_pct: float | None = None
    ctrlcpu_pct: float | None = None
    aivector_pct: float | None = None
    aicube_pct: float | None = None
    npu_util_pct: float | None = None
    product_name: str | None = None  # `-t board` (card)
    serial_number: str | None = None
    firmware_version: str | None = None
    software_version: str | None = None
    chip_version: str | None = None  # `-t board -c` (chip)
    sources: tuple[str, ...] = ()  # what it was read from: commands or capture files
    errors: tuple[str, ...] = ()  # sub-commands that failed or timed out in the last refresh

    def ecc_count(self, memory: str = "HBM", bits: str = "Double") -> int | None:
        """e.g. ecc_count("HBM", "Single") -> `HBM Single Bit Error Count`."""
        return dict(self.ecc).get(f"{memory} {bits} Bit Error Count")


@dataclass(frozen=True)
class DeviceSnapshot:
    """One chip / GPU / the host CPU at one instant. Missing values are None, never guessed."""

    kind: DeviceKind
    index: int  # position in the source's order (0..N-1)
    key: str  # stable id used in history keys: "npu<npu_id>-<chip_id>", "gpu<i>", "cpu"
    name: str
    health: str | None = None
    util_pct: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    bus_id: str | None = None
    npu_id: int | None = None
    chip_id: int | None = None
    device_id: int | None = None
    hugepages_used: int | None = None
    hugepages_total: int | None = None
    ddr_used_mb: float | None = None
    ddr_total_mb: float | None = None
    processes: tuple[ProcessInfo, ...] = ()
    detail: ChipDetail | None = None  # npu-smi sub-commands, where read (NPUs only)

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_mb is None or not self.mem_total_mb:
            return None
        return 100.0 * self.mem_used_mb / self.mem_total_mb


@dataclass(frozen=True)
class HostSnapshot:
    """Host CPU / memory plus this engine process's own CPU and resident memory."""

    cpu_pct: float | None
    cpu_count: int | None
    mem_used_mb: float | None
    mem_total_mb: float | None
    mem_pct: float | None
    load_1m: float | None
    proc_pid: int
    proc_cpu_pct: float | None
    proc_rss_mb: float | None


@dataclass(frozen=True)
class Reading:
    """What an accelerator provider saw in one call (a SnapshotSource adds the host)."""

    devices: tuple[DeviceSnapshot, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    warnings: tuple[str, ...] = ()
    error: ProviderError | None = None
    source: str = ""
    raw: str | None = None


@dataclass(frozen=True)
class TelemetrySnapshot:
    timestamp: float  # time.time() when the sample was taken
    devices: tuple[DeviceSnapshot, ...] = ()
    host: HostSnapshot | None = None
    processes: tuple[ProcessInfo, ...] = ()
    source: str = ""  # "npu-smi", "replay:<file>", "nvml", "host"
    warnings: tuple[str, ...] = ()
    error: ProviderError | None = None
    raw: str | None = field(default=None, compare=False, repr=False)  # the text parsed, if any

    def device(self, key: str) -> DeviceSnapshot | None:
        for dev in self.devices:
            if dev.key == key:
                return dev
        return None

    @property
    def accelerators(self) -> tuple[DeviceSnapshot, ...]:
        return tuple(d for d in self.devices if d.kind != "cpu")
