"""The quantization workflow's stages and progress: StageEvent (what leaves the workflow through
its one callback) and StageTracker (turns the engine.quant functions' (step, done, total)
calls into StageEvents with a run-wide, never decreasing fraction, and checks the cancel flag
at every one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .calib import Cancelled

STAGES = ("load", "calibrate", "quantize", "export", "evaluate", "report")
# share of the progress bar per stage (the stages a run skips are left out before scaling)
_WEIGHT = {"load": 1.0, "calibrate": 3.0, "quantize": 4.0, "export": 1.0, "evaluate": 8.0,
           "report": 0.2}
# the engine.quant functions' own progress steps -> the workflow stage they belong to
_STEP_STAGE = {"load": "load", "rotate": "load", "generate calibration": "calibrate",
               "calibrate": "calibrate", "smooth": "quantize", "search": "quantize",
               "quantize": "quantize", "sensitivity": "quantize", "budget": "quantize",
               "head cost": "quantize", "export": "export"}
_WORDS = {"load": "loading the float model", "rotate": "rotating the residual stream",
          "calibrate": "calibrating",
          "generate calibration": "generating calibration text", "smooth": "SmoothQuant",
          "search": "searching smoothing and clipping", "quantize": "quantizing layers",
          "sensitivity": "ranking layers by their effect on the loss",
          "budget": "fitting the budget", "head cost": "measuring the int8 head alone",
          "export": "writing", "report": "writing the report"}


@dataclass(frozen=True)
class StageEvent:
    stage: str  # one of STAGES
    fraction: float  # of the whole run, 0..1, never decreasing
    message: str  # one line for a person, e.g. "calibrating 3/64"
    step: str = ""  # the inner step ("calibrate", "search", "perplexity float", ...)
    done: int = 0
    total: int = 0


EventFn = Callable[[StageEvent], None]


class StageTracker:
    """Turns the engine.quant functions' (step, done, total) calls into StageEvents with a
    run-wide, never decreasing fraction, and checks the cancel flag at every one."""

    def __init__(self, stages: tuple[str, ...], on_event: EventFn | None,
                 cancel: threading.Event, weights: dict[str, float] = _WEIGHT,
                 step_stage: dict[str, str] = _STEP_STAGE):
        total = sum(weights[s] for s in stages)
        self.span: dict[str, tuple[float, float]] = {}
        lo = 0.0
        for s in stages:
            self.span[s] = (lo / total, (lo + weights[s]) / total)
            lo += weights[s]
        self.order, self.step_stage = stages, step_stage
        self.on_event, self.cancel = on_event, cancel
        self.stage, self.fraction = stages[0], 0.0
        self.started: dict[str, float] = {}
        self.seconds: dict[str, float] = {}

    def check(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()

    def enter(self, stage: str, message: str) -> None:
        """Start `stage` (a later one than the current; an earlier name is ignored)."""
        if stage not in self.span or self.order.index(stage) < self.order.index(self.stage):
            return
        if stage != self.stage or stage not in self.started:
            now = time.perf_counter()
            if self.stage in self.started and self.stage not in self.seconds:
                self.seconds[self.stage] = now - self.started[self.stage]
            self.stage = stage
            self.started[stage] = now
            self._emit(self.span[stage][0], message, "", 0, 0)

    def step(self, step: str, done: int, total: int, check: bool = True) -> None:
        stage = self.step_stage.get(step, self.stage)
        if stage != self.stage:
            self.enter(stage, _WORDS.get(stage, stage))
        lo, hi = self.span[self.stage]
        words = _WORDS.get(step, step)
        self._emit(lo + (hi - lo) * done / max(total, 1), f"{words} {done}/{total}", step, done,
                   total)
        if check:
            self.check()

    def measure(self, fraction: float, message: str) -> None:
        """engine.quant.report.compare's progress, inside the evaluate stage."""
        lo, hi = self.span["evaluate"]
        self._emit(lo + (hi - lo) * fraction, f"measuring {message}", "evaluate", 0, 0)

    def finish(self) -> dict[str, float]:
        now = time.perf_counter()
        if self.stage in self.started and self.stage not in self.seconds:
            self.seconds[self.stage] = now - self.started[self.stage]
        self._emit(1.0, "done", "", 1, 1)
        return self.seconds

    def _emit(self, fraction: float, message: str, step: str, done: int, total: int) -> None:
        self.fraction = max(self.fraction, min(1.0, fraction))
        if self.on_event is not None:
            self.on_event(StageEvent(self.stage, self.fraction, message, step, done, total))
