"""Prometheus exposition of chip telemetry, named like Ascend's NPU exporter (MindCluster
npu-exporter: `npu_chip_info_*` gauges with `id`, `model_name`, `vdie_id`, `pcie_bus_info`
labels), so existing Grafana boards for npu-exporter read our `/metrics` too.

Register on the API's registry: `registry.register(TelemetryCollector(poller))`. Collection
reads the poller's latest snapshot only; it never runs npu-smi itself.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .types import DeviceSnapshot

_LABELS = ["id", "model_name", "vdie_id", "pcie_bus_info", "kind"]


def _chip_id(d: DeviceSnapshot) -> str:
    # npu-exporter's id is the logical device id; the table only prints it on 310/310P/A3
    return str(d.device_id if d.device_id is not None else d.index)


def _labels(d: DeviceSnapshot) -> list[str]:
    return [_chip_id(d), d.name, "", d.bus_id or "", d.kind]


class TelemetryCollector(Collector):
    def __init__(self, poller):
        self.poller = poller

    def describe(self):
        # families are dynamic per snapshot; an empty describe lets register() skip a collect
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.poller.latest
        up = GaugeMetricFamily(
            "npu_console_telemetry_up",
            "1 if the last telemetry read succeeded, 0 if it failed",
            labels=["source"],
        )
        if snap is None:
            up.add_metric([getattr(self.poller.source, "name", "")], 0.0)
            yield up
            return
        up.add_metric([snap.source], 0.0 if snap.error is not None else 1.0)
        yield up
        accel = snap.accelerators
        nums = GaugeMetricFamily("machine_npu_nums", "Amount of npu installed on the machine.")
        nums.add_metric([], float(sum(1 for d in accel if d.kind == "npu")))
        yield nums

        def family(name: str, doc: str, attr: str, scale: float = 1.0) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(name, doc, labels=_LABELS)
            for d in accel:
                value = getattr(d, attr)
                if value is not None:
                    fam.add_metric(_labels(d), float(value) * scale)
            return fam

        yield family("npu_chip_info_utilization", "the ai core utilization", "util_pct")
        yield family("npu_chip_info_temperature", "the npu temperature", "temp_c")
        yield family("npu_chip_info_power", "the npu power", "power_w")
        yield family("npu_chip_info_hbm_used_memory", "the npu hbm used memory", "mem_used_mb")
        yield family("npu_chip_info_hbm_total_memory", "the npu hbm total memory", "mem_total_mb")
        yield family("npu_chip_info_hbm_utilization", "the npu hbm memory utilization", "mem_pct")
        yield family("npu_chip_info_used_memory", "the npu ddr used memory", "ddr_used_mb")
        yield family("npu_chip_info_total_memory", "the npu ddr total memory", "ddr_total_mb")

        health = GaugeMetricFamily(
            "npu_chip_info_health_status",
            "the npu health status: 1 healthy, 0 unhealthy",
            labels=_LABELS,
        )
        for d in accel:
            if d.health is not None:
                health.add_metric(_labels(d), 1.0 if d.health.upper() == "OK" else 0.0)
        yield health

        procs = GaugeMetricFamily(
            "npu_chip_info_process_info",
            "memory (MB) used by a process on the npu",
            labels=_LABELS + ["process_id", "process_name"],
        )
        by_key = {d.key: d for d in accel}
        for p in snap.processes:
            d = by_key.get(p.device_key)
            if d is not None and p.memory_mb is not None:
                procs.add_metric(_labels(d) + [str(p.pid), p.name], float(p.memory_mb))
        yield procs

        host = snap.host
        if host is not None:
            for name, doc, value in (
                ("npu_console_host_cpu_percent", "host CPU use in percent", host.cpu_pct),
                ("npu_console_host_memory_used_mb", "host memory in use (MB)", host.mem_used_mb),
                (
                    "npu_console_process_cpu_percent",
                    "engine process CPU percent",
                    host.proc_cpu_pct,
                ),
                (
                    "npu_console_process_rss_mb",
                    "engine process resident memory (MB)",
                    host.proc_rss_mb,
                ),
            ):
                if value is not None:
                    g = GaugeMetricFamily(name, doc)
                    g.add_metric([], float(value))
                    yield g
