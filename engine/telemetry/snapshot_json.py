"""One telemetry snapshot as JSON: what `npu-console smi --once --json` prints and what the API's
`GET /v1/telemetry` (and each event of `/v1/telemetry/stream`) returns, so both share a schema.

    {"timestamp", "source", "devices": [...], "processes": [...], "host": {...} | null,
     "alerts": [...], "warnings": [...], "error": {"kind", "message", "code"} | null}

A device is every `DeviceSnapshot` field plus `mem_pct`, its `detail` as `detail_json` writes
it (the `smi --input DIR --json` form: ECC counters as an object, error codes with npu-smi's
text) or null; `alerts` are the poller's active `AlertEvent`s. Missing values are null.
`snapshot_from_json` reads it back (the fleet monitor, engine/remote/fleet.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from .alerts import AlertEvent
from .npu_details import detail_json
from .types import (
    ChipDetail,
    DeviceSnapshot,
    HostSnapshot,
    ProcessInfo,
    ProviderError,
    TelemetrySnapshot,
)

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


class TelemetryJsonError(ValueError):
    """JSON that is not a telemetry snapshot (a server that is not npu-console, a bad answer)."""


def _fields(cls, data: dict[str, Any], what: str) -> dict[str, Any]:
    """`data`'s entries that are fields of `cls` (a newer server may send more; they are
    dropped, not an error), tuples where the dataclass keeps tuples."""
    if not isinstance(data, dict):
        raise TelemetryJsonError(f"telemetry JSON: {what} is not an object: {data!r:.80}")
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}


def _detail(data: dict[str, Any] | None) -> ChipDetail | None:
    if data is None:
        return None
    kw = _fields(ChipDetail, data, "a chip detail")
    ecc = data.get("ecc") or {}
    kw["ecc"] = tuple(ecc.items()) if isinstance(ecc, dict) else tuple(tuple(p) for p in ecc)
    return ChipDetail(**kw)


def _device(data: dict[str, Any]) -> DeviceSnapshot:
    kw = _fields(DeviceSnapshot, data, "a device")
    kw["processes"] = tuple(ProcessInfo(**_fields(ProcessInfo, p, "a process"))
                            for p in data.get("processes") or ())
    kw["detail"] = _detail(data.get("detail"))
    return DeviceSnapshot(**kw)


def snapshot_from_json(data: dict[str, Any]) -> tuple[TelemetrySnapshot, tuple[AlertEvent, ...]]:
    """The inverse of `snapshot_json`: what a remote `GET /v1/telemetry` answered, back as the
    snapshot dataclasses (and its active alerts), so a remote host's chips render with the same
    widgets as local ones. Raises TelemetryJsonError (a ValueError) for JSON that is not such a snapshot."""
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise TelemetryJsonError("telemetry JSON: not a snapshot (no 'devices' list)")
    try:
        host = data.get("host")
        error = data.get("error")
        snap = TelemetrySnapshot(
            timestamp=float(data.get("timestamp") or 0.0),
            devices=tuple(_device(d) for d in data["devices"]),
            host=None if host is None else HostSnapshot(**_fields(HostSnapshot, host, "host")),
            processes=tuple(ProcessInfo(**_fields(ProcessInfo, p, "a process"))
                            for p in data.get("processes") or ()),
            source=str(data.get("source") or ""),
            warnings=tuple(str(w) for w in data.get("warnings") or ()),
            error=None if error is None else ProviderError(
                **_fields(ProviderError, error, "error")))
        alerts = tuple(AlertEvent(**_fields(AlertEvent, a, "an alert"))
                       for a in data.get("alerts") or ())
    except TypeError as exc:  # a required field missing
        raise TelemetryJsonError(f"telemetry JSON: {exc}") from None
    return snap, alerts
