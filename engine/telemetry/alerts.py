"""Alert rules over telemetry snapshots (and engine stats) with raised/cleared state.

A threshold rule raises when its value reaches `raise_at` for `for_samples` consecutive samples
and clears only when it falls below `clear_at` (lower), so a value hovering at the threshold
does not flap. Process appearance/disappearance is a one-shot "event". Rules are evaluated on
the poller thread; `AlertManager` keeps the state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from .types import TelemetrySnapshot

AlertState = Literal["raised", "cleared", "event"]


@dataclass(frozen=True)
class AlertEvent:
    rule: str  # "temperature", "hbm", "aicore_saturated", "health", "process", "p99_latency", ...
    subject: str  # device key ("npu0-1"), "engine", or "npu0-1/pid 1234"
    state: AlertState
    severity: Literal["info", "warning", "critical"]
    message: str
    value: float | None
    threshold: float | None
    timestamp: float


@dataclass(frozen=True)
class Observation:
    subject: str
    value: float | None  # None: no reading this cycle (state kept as is)
    label: str = ""  # shown in the message, e.g. the health string


def _stat(stats: Any, name: str) -> Any:
    if stats is None:
        return None
    if isinstance(stats, dict):
        return stats.get(name)
    return getattr(stats, name, None)


class ThresholdRule:
    """Raise when value >= raise_at (for_samples in a row); clear when value < clear_at."""

    name = "threshold"
    severity: Literal["info", "warning", "critical"] = "warning"
    unit = ""

    def __init__(self, raise_at: float, clear_at: float | None = None, for_samples: int = 1):
        self.raise_at = float(raise_at)
        self.clear_at = float(raise_at if clear_at is None else clear_at)
        if self.clear_at > self.raise_at:
            raise ValueError(f"{self.name}: clear_at must not exceed raise_at")
        self.for_samples = max(1, int(for_samples))

    def observe(self, snap: TelemetrySnapshot, stats: Any) -> Iterable[Observation]:
        raise NotImplementedError

    def message(self, obs: Observation, raised: bool) -> str:
        what = obs.label or f"{obs.value:g}{self.unit}"
        if raised:
            return f"{obs.subject}: {self.name} {what} >= {self.raise_at:g}{self.unit}"
        return f"{obs.subject}: {self.name} back to {what}"


class AcceleratorRule(ThresholdRule):
    """A reading every accelerator reports (the DeviceSnapshot attribute `reading`), raised per
    device; `defaults` are the (raise_at, clear_at, for_samples) an argument left out takes."""

    reading = ""
    defaults: tuple[float, float, int] = (0.0, 0.0, 1)

    def __init__(self, raise_at: float | None = None, clear_at: float | None = None,
                 for_samples: int | None = None):
        r, c, n = self.defaults
        super().__init__(r if raise_at is None else raise_at, c if clear_at is None else clear_at,
                         n if for_samples is None else for_samples)

    def observe(self, snap, stats):
        for d in snap.accelerators:
            yield Observation(d.key, getattr(d, self.reading))


class TemperatureRule(AcceleratorRule):
    name = "temperature"
    unit = " C"
    reading = "temp_c"
    defaults = (85.0, 80.0, 1)


class MemoryRule(AcceleratorRule):
    """Accelerator memory (HBM on 910 class) use in percent."""

    name = "hbm"
    unit = " %"
    reading = "mem_pct"
    defaults = (95.0, 90.0, 1)


class AICoreSaturatedRule(AcceleratorRule):
    name = "aicore_saturated"
    severity = "info"
    unit = " %"
    reading = "util_pct"
    defaults = (98.0, 90.0, 3)


class HealthRule(ThresholdRule):
    """Health other than OK (Warning, Alarm, Critical, UNKNOWN) raises; OK clears."""

    name = "health"
    severity = "critical"

    def __init__(self) -> None:
        super().__init__(1.0, 1.0, 1)

    def observe(self, snap, stats):
        for d in snap.accelerators:
            if d.health is None:
                yield Observation(d.key, None)
            else:
                bad = d.health.strip().upper() != "OK"
                yield Observation(d.key, 1.0 if bad else 0.0, d.health)

    def message(self, obs, raised):
        return f"{obs.subject}: health {obs.label}" if raised else f"{obs.subject}: health OK"


class EngineMetricRule(ThresholdRule):
    """A number from the engine stats callable (mapping key or attribute), e.g. p99 latency."""

    severity = "warning"

    def __init__(
        self,
        name: str,
        metric: str,
        raise_at: float,
        clear_at: float | None = None,
        unit: str = "",
        for_samples: int = 1,
    ):
        self.name = name
        self.metric = metric
        self.unit = unit
        super().__init__(raise_at, clear_at, for_samples)

    def observe(self, snap, stats):
        value = _stat(stats, self.metric)
        if isinstance(value, (int, float)):
            yield Observation("engine", float(value))


class ErrorRateRule(ThresholdRule):
    """Failed / finished requests: the stats' `error_rate` if present, else computed from the
    cumulative `requests_failed` / `requests_finished` counters between two evaluations."""

    name = "error_rate"
    unit = ""

    def __init__(self, raise_at: float = 0.05, clear_at: float = 0.02, for_samples: int = 1):
        super().__init__(raise_at, clear_at, for_samples)
        self._prev: tuple[float, float] | None = None

    def observe(self, snap, stats):
        direct = _stat(stats, "error_rate")
        if isinstance(direct, (int, float)):
            yield Observation("engine", float(direct))
            return
        failed, finished = _stat(stats, "requests_failed"), _stat(stats, "requests_finished")
        if not isinstance(failed, (int, float)) or not isinstance(finished, (int, float)):
            return
        prev, self._prev = self._prev, (float(failed), float(finished))
        if prev is None:
            return
        d_failed, d_finished = failed - prev[0], finished - prev[1]
        if d_failed + d_finished <= 0:
            return  # no traffic this cycle: keep the state
        yield Observation("engine", d_failed / (d_failed + d_finished))


class ProcessChangeRule:
    """One-shot events when a process appears on or vanishes from an accelerator."""

    name = "process"

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], str] | None = None

    def check(self, snap: TelemetrySnapshot) -> list[AlertEvent]:
        if snap.error is not None:
            return []  # a failed read says nothing about processes
        now = {(p.device_key, p.pid): p.name for p in snap.processes}
        prev, self._seen = self._seen, now
        if prev is None:
            return []
        events = []
        for (dev, pid), name in now.items():
            if (dev, pid) not in prev:
                events.append(_proc_event(dev, pid, name, "appeared", snap.timestamp))
        for (dev, pid), name in prev.items():
            if (dev, pid) not in now:
                events.append(_proc_event(dev, pid, name, "vanished", snap.timestamp))
        return events


def _proc_event(dev: str, pid: int, name: str, what: str, ts: float) -> AlertEvent:
    label = f"{name} ({pid})" if name else f"pid {pid}"
    return AlertEvent(
        rule="process",
        subject=f"{dev}/pid {pid}",
        state="event",
        severity="info",
        message=f"{dev}: process {label} {what}",
        value=float(pid),
        threshold=None,
        timestamp=ts,
    )


class AlertManager:
    """Evaluates rules each cycle; remembers what is raised; returns the transitions."""

    def __init__(self, rules: Iterable[Any] = ()):
        self.rules = list(rules)
        self._raised: dict[tuple[str, str], AlertEvent] = {}
        self._streak: dict[tuple[str, str], int] = {}

    def evaluate(self, snap: TelemetrySnapshot, stats: Any = None) -> list[AlertEvent]:
        events: list[AlertEvent] = []
        for rule in self.rules:
            if isinstance(rule, ProcessChangeRule):
                events.extend(rule.check(snap))
                continue
            for obs in rule.observe(snap, stats):
                if obs.value is None:
                    continue
                key = (rule.name, obs.subject)
                raised = key in self._raised
                if not raised:
                    if obs.value >= rule.raise_at:
                        streak = self._streak.get(key, 0) + 1
                        self._streak[key] = streak
                        if streak >= rule.for_samples:
                            ev = AlertEvent(
                                rule.name,
                                obs.subject,
                                "raised",
                                rule.severity,
                                rule.message(obs, True),
                                obs.value,
                                rule.raise_at,
                                snap.timestamp,
                            )
                            self._raised[key] = ev
                            self._streak.pop(key, None)
                            events.append(ev)
                    else:
                        self._streak.pop(key, None)
                elif obs.value < rule.clear_at:
                    del self._raised[key]
                    events.append(
                        AlertEvent(
                            rule.name,
                            obs.subject,
                            "cleared",
                            rule.severity,
                            rule.message(obs, False),
                            obs.value,
                            rule.clear_at,
                            snap.timestamp,
                        )
                    )
        return events

    def active(self) -> tuple[AlertEvent, ...]:
        return tuple(self._raised.values())


def default_rules(
    temp_c: float = 85.0,
    hbm_pct: float = 95.0,
    aicore_pct: float = 98.0,
    p99_latency_s: float = 10.0,
    p99_metric: str = "p99_e2e_s",
    error_rate: float = 0.05,
) -> list[Any]:
    """The rule set the console and `npu-console smi` use unless told otherwise."""
    return [
        TemperatureRule(temp_c, temp_c - 5.0),
        MemoryRule(hbm_pct, hbm_pct - 5.0),
        AICoreSaturatedRule(aicore_pct, aicore_pct - 8.0, for_samples=3),
        HealthRule(),
        ProcessChangeRule(),
        EngineMetricRule("p99_latency", p99_metric, p99_latency_s, p99_latency_s * 0.8, " s"),
        ErrorRateRule(error_rate, error_rate * 0.4),
    ]
