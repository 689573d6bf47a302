"""The console's job runner: long work off the GUI thread, on a worker thread that reports
progress, can be cancelled, and hands its result (or a one-line error) back to the GUI thread
(console.gui_thread.post), where its signals fire. Pages create jobs; the thread starts here
(console.threads)."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from ..engine.runtime.types import Cancelled
from .gui_thread import post
from .threads import start_thread

log = logging.getLogger(__name__)

# worker code may report thousands of steps; the GUI needs a few a second
_MIN_EMIT_S = 0.05
_DIGITS = re.compile(r"[\d/.,]+")


JobCancelled = Cancelled  # what Reporter.check() raises: the engine's one cancellation exception


class Reporter:
    """What the worker function receives: report progress, look at the cancel flag."""

    def __init__(self, job: BackgroundJob):
        self._job = job
        self.cancel = job.cancel_event
        self._last_emit = 0.0
        self._last_stage = ""

    def __call__(self, fraction: float, message: str) -> None:
        now = time.monotonic()
        fraction = max(0.0, min(1.0, float(fraction)))
        self._job.fraction = fraction
        stage = _DIGITS.sub("", message)  # "calibrating 3/64" and "…4/64" are one stage
        if stage != self._last_stage or now - self._last_emit >= _MIN_EMIT_S or fraction >= 1.0:
            self._last_emit, self._last_stage = now, stage
            post(self._job.progress.emit, fraction, message)

    def check(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()


class BackgroundJob(QObject):
    """Run `fn(reporter)` on a daemon thread; exactly one of finished / failed / cancelled fires.

    A worker that noticed the cancel flag raises engine.runtime.types.Cancelled (Reporter.check,
    model loads, quantization all do) and the job ends in `cancelled`, not `failed`;
    `cancelled_types` adds other types that mean the same.
    """

    progress = Signal(float, str)
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal()
    ended = Signal()  # after any of the three

    def __init__(self, fn: Callable[[Reporter], Any], name: str,
                 cancelled_types: tuple[type[BaseException], ...] = (), parent=None):
        super().__init__(parent)
        self.fn = fn
        self.name = name
        self.cancelled_types = (Cancelled, *cancelled_types)
        self.cancel_event = threading.Event()
        self.fraction = 0.0
        self.started_at: float | None = None
        self.thread: threading.Thread | None = None
        self.done = False  # set on the worker thread
        self._ended_here = False  # set on the GUI thread, after the result slots ran
        self.ended.connect(self._mark_ended)

    def start(self) -> BackgroundJob:
        self.started_at = time.monotonic()
        self.thread = start_thread(self._run, f"job-{self.name}")
        return self

    def cancel(self) -> None:
        self.cancel_event.set()

    def running(self) -> bool:
        """True until the GUI thread has handled the outcome (the signals are queued)."""
        return self.thread is not None and not self._ended_here

    def _mark_ended(self) -> None:
        self._ended_here = True

    def eta_s(self) -> float | None:
        """Seconds left, extrapolated from the progress so far (None until it means something)."""
        if self.started_at is None or self.fraction < 0.03:
            return None
        elapsed = time.monotonic() - self.started_at
        if elapsed < 1.0:
            return None
        return elapsed * (1.0 - self.fraction) / self.fraction

    def _run(self) -> None:
        _lower_priority()
        reporter = Reporter(self)
        try:
            result = self.fn(reporter)
        except self.cancelled_types:
            self.done = True
            post(self.cancelled.emit)
        except Exception as exc:  # every failure becomes one sentence for the page
            self.done = True
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.info("job %s failed: %s", self.name, text, exc_info=not _user_error(exc))
            post(self.failed.emit, text)
        else:
            self.done = True
            if self.cancel_event.is_set() and result is None:
                post(self.cancelled.emit)
            else:
                post(self.finished.emit, result)
        post(self.ended.emit)


class FollowedJob(BackgroundJob):
    """A job that a Qt-free model runs on its own worker (console.remote_jobs.ServerAdmin),
    seen as a BackgroundJob: a progress view (JobProgress) and a page's one-job-at-a-time rule
    treat it as any other. The page feeds it the model's news on the GUI thread: step() while it
    runs, end() once; Cancel asks the model (`cancel`)."""

    def __init__(self, name: str, cancel: Callable[[], object], parent=None):
        super().__init__(lambda _r: None, name, parent=parent)
        self._ask_cancel = cancel

    def start(self) -> FollowedJob:
        self.started_at = time.monotonic()
        return self

    def running(self) -> bool:
        return self.started_at is not None and not self._ended_here

    def cancel(self) -> None:
        if self.running() and not self.cancel_event.is_set():
            self.cancel_event.set()
            self._ask_cancel()

    def step(self, fraction: float, message: str) -> None:
        self.fraction = max(0.0, min(1.0, float(fraction)))
        self.progress.emit(self.fraction, message)

    def end(self, state: str, result: Any = None, error: str = "") -> None:
        """`state`: "done" (finished(result)), "cancelled" or "failed" (failed(error))."""
        if self.done:
            return
        self.done = True
        if state == "done":
            self.finished.emit(result)
        elif state == "cancelled":
            self.cancelled.emit()
        else:
            self.failed.emit(error)
        self.ended.emit()


def _lower_priority(step: int = 5) -> None:
    """Make this worker thread nicer than the GUI thread (Linux schedules threads as tasks), so
    on a busy machine the scheduler runs the event loop first; elsewhere a no-op."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + step)
    except (AttributeError, OSError):
        pass


def _user_error(exc: BaseException) -> bool:
    """Errors that already carry a message for the user (no traceback in the log needed)."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"QuantError", "BenchError", "ModelLoadError", "ModelFolderError",
                         "ServerStartError", "UnsafeSettingsError", "EngineError"})


def fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "estimating time left…"
    if seconds < 60:
        return f"about {max(1, round(seconds))} s left"
    return f"about {seconds / 60:.1f} min left"
