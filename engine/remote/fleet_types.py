"""What the fleet view shows of one server (engine.remote.fleet polls it): its address, its
state and a summary of its chips. Plain data, no I/O.

`HostSnapshot` here is one server's state, not `engine.telemetry.types.HostSnapshot` (the host
CPU inside a telemetry snapshot).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from ..runtime.types import EngineStats
from ..telemetry.alerts import AlertEvent
from ..telemetry.types import TelemetrySnapshot

HostState = Literal["connecting", "up", "unreachable", "unauthorized"]

_HEALTH_RANK = {"OK": 0, "WARNING": 1, "GENERAL WARNING": 1, "ALARM": 2, "CRITICAL": 3,
                "CRITICAL WARNING": 3, "ERROR": 3}


@dataclass(frozen=True)
class ServerRef:
    """A server to watch: its base URL, the API key it wants and a name to show."""

    url: str
    api_key: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class ChipSummary:
    """A host's chips in one line: the numbers a fleet card shows."""

    chips: int
    worst_health: str | None  # the most severe health any chip reports; None when none does
    util_pct: float | None  # mean AI Core / utilisation over the chips that report one
    mem_used_mb: float | None  # summed over the chips that report memory
    mem_total_mb: float | None
    power_w: float | None  # summed over the chips that report power


@dataclass(frozen=True)
class HostSnapshot:
    """One server as the fleet monitor last saw it. Telemetry and engine are kept from the last
    good poll while the server is unreachable (`updated` says when that was)."""

    url: str
    name: str | None
    state: HostState
    error: str | None = None  # one line: why it is unreachable / unauthorized / partial
    since: float = 0.0  # time.time() when the state began
    next_retry_s: float | None = None  # the wait before the next try, when not up
    retry_at: float | None = None  # time.time() of that try (a view counts down to it)
    updated: float | None = None  # time.time() of the last good poll
    telemetry: TelemetrySnapshot | None = None
    engine: EngineStats | None = None  # running, waiting, tok/s and the model names
    alerts: tuple[AlertEvent, ...] = ()  # the server poller's active alerts

    @property
    def label(self) -> str:
        return self.name or host_of(self.url)

    @property
    def source(self) -> str | None:
        """Where its chip numbers come from: "replay", "npu-smi", "nvml", "host"."""
        if self.telemetry is None or not self.telemetry.source:
            return None
        source = self.telemetry.source
        return "replay" if source.startswith("replay") else source

    def retry_in(self, now: float | None = None) -> float | None:
        if self.retry_at is None:
            return None
        return max(0.0, self.retry_at - (time.time() if now is None else now))


def host_of(url: str) -> str:
    return urlsplit(url).netloc or url


def health_rank(health: str | None) -> int:
    if not health:
        return -1
    return _HEALTH_RANK.get(health.strip().upper(), 1)


def chip_summary(snap: TelemetrySnapshot | None) -> ChipSummary | None:
    """The accelerators of `snap` summed up; None without a snapshot or without chips."""
    if snap is None or not snap.accelerators:
        return None
    chips = snap.accelerators

    def total(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    utils = [d.util_pct for d in chips if d.util_pct is not None]
    with_mem = [d for d in chips if d.mem_total_mb]
    worst = max((d.health for d in chips if d.health), key=health_rank, default=None)
    return ChipSummary(
        chips=len(chips), worst_health=worst,
        util_pct=sum(utils) / len(utils) if utils else None,
        mem_used_mb=total([d.mem_used_mb for d in with_mem]),
        mem_total_mb=total([d.mem_total_mb for d in with_mem]),
        power_w=total([d.power_w for d in chips]))
