"""Telemetry sources: npu-smi (subprocess or saved captures), NVML, psutil host.

Each accelerator provider returns (devices, processes, warnings, error) for one instant; a
`SnapshotSource` combines one of them with the host provider into a `TelemetrySnapshot`.
Providers never raise for a failing tool: a missing binary, a timeout or a non-zero exit is
reported in the snapshot's `error`, so a poller can keep going.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from .capture_folder import scan_folder
from .host_provider import HostProvider
from .npu_detail_poll import (
    DEFAULT_DETAIL_INTERVAL_S,
    DEFAULT_DETAIL_TIMEOUT_S,
    DetailRefresher,
)
from .npu_details import attach_details, build_details, table_chips
from .npu_smi_table import NpuSmiInfo, parse_npu_smi_info
from .nvml_provider import NvmlProvider
from .types import (
    DeviceSnapshot,
    ProcessInfo,
    ProviderError,
    Reading,
    TelemetrySnapshot,
)

log = logging.getLogger(__name__)

DEFAULT_NPU_SMI = "npu-smi"
DEFAULT_TIMEOUT_S = 10.0


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
    """Runs `npu-smi info` once per call (one call covers every card). With `details`, the
    slower `info -t` sub-commands run on their own thread every `detail_interval_s` (each call
    bounded by `detail_timeout_s`) and their cached answers fill `DeviceSnapshot.detail`."""

    name = "npu-smi"

    def __init__(
        self,
        binary: str | os.PathLike | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        details: bool = True,
        detail_interval_s: float = DEFAULT_DETAIL_INTERVAL_S,
        detail_timeout_s: float = DEFAULT_DETAIL_TIMEOUT_S,
    ):
        self.binary = str(binary or DEFAULT_NPU_SMI)
        self.timeout_s = float(timeout_s)
        self.details = (
            DetailRefresher(
                lambda: resolve_binary(self.binary),
                run_with_timeout,
                interval_s=detail_interval_s,
                timeout_s=min(detail_timeout_s, self.timeout_s),
            )
            if details
            else None
        )

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
        reading = reading_from_text(out, self.name, rc)
        if self.details is None or not reading.devices:
            return reading
        self.details.want(table_chips(reading.devices))
        devices = attach_details(reading.devices, self.details.details())
        return dataclasses.replace(reading, devices=devices)

    def close(self) -> None:
        if self.details is not None:
            self.details.close()


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
    """Plays saved `npu-smi info` captures, one per call, cycling (offline analysis, demos).

    A folder stands for its table captures in name order, each with the folder's sub-command
    captures of the same prefix filled into `DeviceSnapshot.detail` (engine/telemetry/
    capture_folder.py says how files are named)."""

    name = "replay"

    def __init__(self, files: Iterable[str | os.PathLike], cycle: bool = True):
        self.files = [Path(f) for f in files]
        self._entries: list[_ReplayEntry] = []
        for f in self.files:
            if f.is_dir():
                self._entries += _folder_entries(f)
            else:
                self._entries.append(_ReplayEntry(f))
        self.cycle = cycle
        n = len(self._entries)
        self._order = itertools.cycle(range(n)) if cycle else iter(range(n))
        self._lock = threading.Lock()
        self._last: int | None = None

    def read(self) -> Reading:
        if not self._entries:
            return Reading(
                error=ProviderError("missing", "no replay captures given"), source="replay"
            )
        with self._lock:
            idx = next(self._order, None)
            if idx is None:
                idx = self._last if self._last is not None else 0
            self._last = idx
            return self._entries[idx].reading()

    def close(self) -> None:
        pass


class _ReplayEntry:
    """One table capture (+ its sub-command captures), parsed once on first use."""

    def __init__(self, path: Path, outputs=(), warnings=(), problem: str | None = None):
        self.path = path
        self.outputs = list(outputs)
        self.warnings = tuple(warnings)
        self.problem = problem  # why there is nothing to parse (an empty folder)
        self._reading: Reading | None = None

    def reading(self) -> Reading:
        if self._reading is None:
            self._reading = self._parse()
        return self._reading

    def _parse(self) -> Reading:
        source = f"replay:{self.path.name}"
        if self.problem is not None:
            return Reading(error=ProviderError("missing", self.problem), source=source)
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            problem = f"cannot read {self.path}: {exc.strerror or exc}"
            return Reading(error=ProviderError("missing", problem), source=source)
        reading = reading_from_text(text, source, 0)
        if not self.outputs and not self.warnings:
            return reading
        details, warnings = build_details(self.outputs, table_chips(reading.devices))
        return dataclasses.replace(
            reading,
            devices=attach_details(reading.devices, details),
            warnings=reading.warnings + self.warnings + tuple(warnings),
        )


def _folder_entries(folder: Path) -> list[_ReplayEntry]:
    try:
        found = scan_folder(folder)
    except OSError as exc:
        return [_ReplayEntry(folder, problem=f"cannot list {folder}: {exc.strerror or exc}")]
    if not found.tables:
        return [_ReplayEntry(folder, problem=f"no `npu-smi info` table capture in {folder}")]
    entries = []
    for table in found.tables:
        outputs, warnings = found.outputs_for(table)
        entries.append(_ReplayEntry(table.path, outputs, warnings))
    return entries


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
