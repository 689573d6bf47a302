"""The console's model loads in flight, as a Qt-free model that announces its changes.

EngineHost feeds it (on the GUI thread: its signals arrive queued); the chat page and the
dashboard's engine card listen, so they show the stage and percent of what is loading and
know when it is done, without asking the engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from .events import Emitter


@dataclass(frozen=True)
class LoadProgress:
    job_id: int
    name: str
    fraction: float = 0.0  # 0..1
    stage: str = "starting"

    @property
    def percent(self) -> int:
        return round(100 * max(0.0, min(1.0, self.fraction)))

    def text(self) -> str:
        """"Loading smollm2: converting GGUF tensors · 45 %"."""
        return f"Loading {self.name}: {self.stage} · {self.percent} %"


@dataclass(frozen=True)
class LoadEnded:
    job_id: int
    name: str
    error: str  # "" when the model is ready


class LoadTracker:
    """Events: "changed" (the list of loads in flight), "ended" (a LoadEnded)."""

    def __init__(self):
        self.events = Emitter()
        self._active: dict[int, LoadProgress] = {}

    def subscribe(self, event: str, fn: Callable) -> Callable[[], None]:
        return self.events.subscribe(event, fn)

    # ------------------------------------------------------------------ fed by EngineHost
    def started(self, job_id: int, name: str) -> None:
        self._active[job_id] = LoadProgress(job_id, name)
        self.events.emit("changed", self.active())

    def progress(self, job_id: int, fraction: float, stage: str) -> None:
        load = self._active.get(job_id)
        if load is None:
            return  # a late report after the end
        self._active[job_id] = replace(load, fraction=fraction, stage=stage or load.stage)
        self.events.emit("changed", self.active())

    def finished(self, job_id: int, error: str) -> None:
        load = self._active.pop(job_id, None)
        if load is None:
            return
        self.events.emit("changed", self.active())
        self.events.emit("ended", LoadEnded(job_id, load.name, error))

    # ------------------------------------------------------------------ read by pages
    def active(self) -> list[LoadProgress]:
        return list(self._active.values())

    def current(self) -> LoadProgress | None:
        """The oldest load in flight (what a one-line view shows)."""
        return next(iter(self._active.values()), None)

    @property
    def loading(self) -> bool:
        return bool(self._active)


def connect_host(tracker: LoadTracker, host) -> None:
    """Feed `tracker` from an EngineHost's signals (delivered on the GUI thread)."""
    host.load_started.connect(lambda job: tracker.started(job.job_id, job.name))
    host.load_progress.connect(tracker.progress)
    host.load_finished.connect(lambda job_id, _info, error: tracker.finished(job_id, error))
