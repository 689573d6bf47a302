"""One telemetry snapshot as JSON: what `npu-console smi --once --json` prints and what the API's
`GET /v1/telemetry` (and each event of `/v1/telemetry/stream`) returns, so both share a schema.

    {"timestamp", "source", "devices": [...], "processes": [...], "host": {...} | null,
     "alerts": [...], "warnings": [...], "error": {"kind", "message", "code"} | null}

A device is every `DeviceSnapshot` field plus `mem_pct`, its `detail` as `detail_json` writes
it (the `smi --input DIR --json` form: ECC counters as an object, error codes with npu-smi's
text) or null; `alerts` are the poller's active `AlertEvent`s. Missing values are null.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from npu_console.engine.telemetry.npu_details import detail_json
from npu_console.engine.telemetry.types import DeviceSnapshot, TelemetrySnapshot

SCHEMA_KEYS = ("timestamp", "source", "devices", "processes", "host", "alerts", "warnings",
               "error")


def device_json(device: DeviceSnapshot) -> dict[str, Any]:
    data = dataclasses.asdict(device)
    data["mem_pct"] = device.mem_pct
    data["detail"] = detail_json(device.detail)
    return data


def snapshot_json(snap: TelemetrySnapshot, alerts: Iterable[Any] = ()) -> dict[str, Any]:
    """`snap` (and the alerts raised at the time, `poller.active_alerts()`) as plain JSON."""
    return {
        "timestamp": snap.timestamp,
        "source": snap.source,
        "devices": [device_json(d) for d in snap.devices],
        "processes": [dataclasses.asdict(p) for p in snap.processes],
        "host": None if snap.host is None else dataclasses.asdict(snap.host),
        "alerts": [dataclasses.asdict(a) for a in alerts],
        "warnings": list(snap.warnings),
        "error": None if snap.error is None else dataclasses.asdict(snap.error),
    }
