"""Device telemetry: npu-smi / NVML / psutil sources, one snapshot model, a poller with history.

Stable API (the dashboard, the HTTP API and the CLI code against this; no Qt here)
----------------------------------------------------------------------------------
    from npu_console.engine.telemetry import TelemetryPoller, make_provider, default_rules

    provider = make_provider(
        "auto",                 # "auto" | "npu-smi" | "nvml" | "host" | "replay"
        npu_smi_path=None,      # binary path or name; default "npu-smi" on PATH
        replay_files=(),        # captures for "replay" (cycled, one per poll)
        timeout_s=10.0,         # npu-smi subprocess timeout
    )                           # "auto": npu-smi if found, else NVML if usable, else host only
    poller = TelemetryPoller(provider, interval_s=2.0, history_s=3600.0,
                             rules=default_rules(), engine_stats=None)  # engine_stats: callable
    unsubscribe = poller.subscribe(callback)        # callback(TelemetrySnapshot), poller thread
    unsub_alerts = poller.subscribe_alerts(cb)      # cb(AlertEvent), poller thread
    poller.start(); ...; poller.stop()
    poller.latest                   -> TelemetrySnapshot | None
    poller.poll_once()              -> TelemetrySnapshot (synchronous; also feeds history/alerts)
    poller.history(key, seconds)    -> (t, values): float64 numpy COPIES, t = unix seconds,
                                       oldest first, NaN where the value was missing
    poller.history_keys()           -> list[str]
    poller.active_alerts()          -> tuple[AlertEvent, ...] (currently raised)

Snapshots (frozen dataclasses, engine/telemetry/types.py)
    TelemetrySnapshot(timestamp: float, devices: tuple[DeviceSnapshot], host: HostSnapshot | None,
                      processes: tuple[ProcessInfo], source: str, warnings: tuple[str],
                      error: ProviderError | None)
    DeviceSnapshot(kind: "npu"|"gpu"|"cpu", index: int, key: str, name: str, health: str | None,
                   util_pct, mem_used_mb, mem_total_mb, temp_c, power_w  (all float | None),
                   bus_id, npu_id, chip_id, device_id, hugepages_used, hugepages_total,
                   ddr_used_mb, ddr_total_mb, processes: tuple[ProcessInfo]) + .mem_pct property
        kind "npu": one per chip (a 300I Duo card gives two); mem_* is HBM when the layout has
        it, else the DDR "Memory-Usage" column. util_pct = AICore %.
        key: "npu<npu_id>-<chip_id>", "gpu<index>", "cpu".
    ProcessInfo(pid, name, memory_mb, device_key, npu_id, chip_id, container_pid)
    HostSnapshot(cpu_pct, cpu_count, mem_used_mb, mem_total_mb, mem_pct, load_1m,
                 proc_pid, proc_cpu_pct, proc_rss_mb)       # proc_* = this engine process
    ProviderError(kind: "missing"|"timeout"|"exit"|"parse"|"unavailable", message, code)

History keys ("<subject>:<metric>")
    per device: "<device key>:util_pct", ":mem_used_mb", ":mem_pct", ":temp_c", ":power_w"
    host:       "host:cpu_pct", "host:mem_used_mb", "host:mem_pct",
                "proc:cpu_pct", "proc:rss_mb"
    capacity: history_s / interval_s samples (default 1800 = 1 hour at 2 s).

Alerts (engine/telemetry/alerts.py)
    AlertEvent(rule, subject, state: "raised"|"cleared"|"event", severity, message, value,
               threshold, timestamp)
    Threshold rules raise at `raise_at` and clear below `clear_at` (hysteresis): TemperatureRule,
    MemoryRule (HBM %), AICoreSaturatedRule, HealthRule (health not OK), EngineMetricRule
    (p99 latency, error rate; reads the engine_stats callable's mapping or attributes).
    ProcessChangeRule emits one-shot "event" alerts when a device process appears or vanishes.

Parsers (pure functions, text in, dataclasses out; never raise on bad input)
    parse_npu_smi_info(text) -> NpuSmiInfo   (.chips, .processes, .error, .warnings, .to_json())
    parse_kv_output(text) / parse_usages / parse_common / parse_power / parse_temp /
    parse_memory                           (engine/telemetry/npu_smi_kv.py)
    parse_board / parse_health / parse_ecc / parse_proc_mem / parse_list /
    parse_mapping                          (engine/telemetry/npu_smi_kv_card.py)

Prometheus: engine.telemetry.prometheus.TelemetryCollector(poller) (npu-exporter-shaped names).
"""

from __future__ import annotations

from .alerts import AlertEvent, default_rules
from .npu_smi_kv import parse_kv_output
from .npu_smi_table import NpuSmiInfo, parse_npu_smi_info
from .poller import TelemetryPoller
from .providers import make_provider
from .types import (
    DeviceSnapshot,
    HostSnapshot,
    ProcessInfo,
    ProviderError,
    TelemetrySnapshot,
)

__all__ = [
    "AlertEvent",
    "DeviceSnapshot",
    "HostSnapshot",
    "NpuSmiInfo",
    "ProcessInfo",
    "ProviderError",
    "TelemetryPoller",
    "TelemetrySnapshot",
    "default_rules",
    "make_provider",
    "parse_kv_output",
    "parse_npu_smi_info",
]
