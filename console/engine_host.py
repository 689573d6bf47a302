"""Owns the in-process engine: creates it off the GUI thread, loads and unloads models as jobs
with progress and cancel, and hands the engine to the bridge. Pages talk to this, never torch."""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from .gui_thread import post
from .threads import start_thread

log = logging.getLogger(__name__)

METRICS_WINDOW_S = 30.0  # latency percentiles are over this recent window


@dataclass(frozen=True)
class MetricsSample:
    """What the dashboard's latency plots need from the engine's metrics, in seconds."""

    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p99: float | None
    batch_size: float | None


@dataclass(frozen=True)
class LoadJob:
    job_id: int
    path: str
    name: str
    device: str
    dtype: str
    load_as: str = "float"  # "int8": a GGUF straight into INT8 weights


class EngineHost(QObject):
    engine_ready = Signal(object)  # the engine
    engine_failed = Signal(str)
    engine_starting = Signal()
    device_changed = Signal(str)
    # list[ModelInfo], read on the GUI thread as it is announced (see _announce_models)
    models_changed = Signal(list)
    load_started = Signal(object)  # LoadJob
    load_progress = Signal(int, float, str)  # job id, fraction 0..1, stage
    load_finished = Signal(int, object, str)  # job id, ModelInfo | None, error ("" when ok)
    engine_restarted = Signal(str)  # "" when a crashed engine serves again, else the error

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.engine = None
        self.devices: list = []
        self._ready = threading.Event()
        self._jobs: dict[int, threading.Event] = {}
        self._threads: list[threading.Thread] = []
        self._next_job = 1
        self._lock = threading.Lock()
        self._closing = False
        self._started = False
        self.start_error: str | None = None

    # ------------------------------------------------------------------ engine

    def start(self) -> None:
        """Create the engine on a worker thread (importing torch alone takes seconds); once."""
        if self._started:
            return
        self._started = True
        self.engine_starting.emit()
        self._spawn(self._start, "engine-start")

    def _start(self) -> None:
        try:
            from ..engine.devices import import_torch, list_devices
            from ..engine.runtime.config import EngineConfig
            from ..engine.runtime.engine import LocalEngine

            torch = import_torch()
            # leave a core to the GUI thread: spin-waiting OpenMP workers starve painting
            torch.set_num_threads(max(1, (os.cpu_count() or 1) - 1))
            self.devices = list_devices()
            if self.devices:
                post(self.device_changed.emit, self.devices[0].label)
            engine = LocalEngine(EngineConfig(gui_in_process=True))
        except Exception as exc:  # shown in the status bar and on the models page
            self.start_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.exception("engine start failed")
            post(self.engine_failed.emit, self.start_error)
            self._ready.set()
            return
        if self._closing:
            engine.shutdown(timeout=1.0)
            self._ready.set()
            return
        self.engine = engine
        post(self.bridge.set_engine, engine, self.metrics_sample)
        self._ready.set()
        post(self.engine_ready.emit, engine)

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def versions(self) -> dict[str, str]:
        out = {}
        torch = sys.modules.get("torch")
        if torch is not None:
            out["torch"] = torch.__version__
        npu = sys.modules.get("torch_npu")
        if npu is not None:
            out["torch_npu"] = getattr(npu, "__version__", "?")
        if self.devices:
            out["device"] = ", ".join(d.label for d in self.devices)
        return out

    def models(self) -> list:
        return list(self.engine.models()) if self.engine is not None else []

    def metrics_sample(self) -> MetricsSample | None:
        """Called on the bridge's sampler thread, never the GUI thread."""
        metrics = getattr(self.engine, "metrics", None)
        return None if metrics is None else metrics_sample_from(metrics)

    # ------------------------------------------------------------------ load / unload

    def load(self, path: str | Path, name: str | None = None, device: str = "cpu",
             dtype: str = "float32", load_as: str = "float") -> LoadJob:
        with self._lock:
            job = LoadJob(self._next_job, str(path), name or Path(path).name, device, dtype,
                          load_as)
            self._next_job += 1
            cancel = threading.Event()
            self._jobs[job.job_id] = cancel
        self.load_started.emit(job)
        self._spawn(lambda: self._load(job, cancel), f"load-{job.job_id}")
        return job

    def cancel(self, job_id: int) -> None:
        ev = self._jobs.get(job_id)
        if ev is not None:
            ev.set()

    def busy(self) -> bool:
        return bool(self._jobs)

    def _load(self, job: LoadJob, cancel: threading.Event) -> None:
        info, error = None, ""
        try:
            post(self.load_progress.emit, job.job_id, 0.0, "starting the engine")
            self.wait_ready()
            if self.engine is None:
                raise RuntimeError(self.start_error or "the engine did not start")
            info = self._engine_load(job, cancel)
        except Exception as exc:  # every failure becomes one plain sentence for the dialog  # noqa: BLE001
            error = _one_line(exc)
            if "Cancel" not in type(exc).__name__:
                log.info("load %s failed: %s", job.path, error)
        finally:
            with self._lock:
                self._jobs.pop(job.job_id, None)
        if info is not None:
            # torch, transformers and the model are here to stay: keep them out of the
            # collector's full passes, which otherwise walk them all (about 0.25 s holding the
            # GIL, a frozen GUI frame) whenever a background job has made enough objects
            gc.freeze()
        if self._closing:
            return  # the window is gone (or going): its signals may already be deleted
        try:
            post(self.load_finished.emit, job.job_id, info, error)
            post(self._announce_models)
        except RuntimeError:  # deleted between the check and the emit, during shutdown
            log.debug("load %s finished after the console closed", job.path)

    def _engine_load(self, job: LoadJob, cancel: threading.Event):
        """The engine's one load path (LocalEngine.load: folder or GGUF, then the KV cache),
        its progress forwarded as signals and the page's cancel passed on to its job."""
        if cancel.is_set():
            from ..engine.runtime.types import Cancelled

            raise Cancelled("loading cancelled")
        engine_job = self.engine.load(job.path, name=job.name, device=job.device,
                                      dtype=job.dtype, default=not self.engine.models(),
                                      load_as=job.load_as)
        engine_job.add_progress_callback(
            lambda f, msg: post(self.load_progress.emit, job.job_id, f, msg or "starting"))
        while True:  # poll so that a cancel or window close never waits for the load
            try:
                engine_job.result(timeout=0.1)
                break
            except TimeoutError:
                if cancel.is_set():
                    engine_job.cancel()
        # the job reports its 1.0 after waking us: say it here, before load_finished
        post(self.load_progress.emit, job.job_id, 1.0, "done")
        return next((m for m in self.engine.models() if m.name == job.name), None)

    def _announce_models(self) -> None:
        """On the GUI thread. Workers only say that the list changed: a list read on a worker
        could be older than one another worker read and delivered first (two loads ending
        together once left the chat with a stale [demo]); read here, the last is the newest."""
        if not self._closing:
            self.models_changed.emit(self.models())

    def unload(self, name: str) -> None:
        def work():
            try:
                self.engine.unload(name).result(timeout=30)
            except Exception as exc:  # noqa: BLE001
                log.warning("unload %s: %s", name, exc)
            post(self._announce_models)

        self._spawn(work, f"unload-{name}")

    def restart_engine(self) -> bool:
        """Revive a crashed engine on a worker thread (it rebuilds every model's KV cache);
        False when there is nothing to restart."""
        engine = self.engine
        if engine is None or not getattr(engine, "crash_reason", None):
            return False

        def work():
            try:
                engine.restart()
                error = ""
            except Exception as exc:  # noqa: BLE001 - shown on the crash banner
                error = _one_line(exc)
                log.warning("engine restart failed: %s", error)
            if not self._closing:
                post(self.engine_restarted.emit, error)
                post(self._announce_models)

        self._spawn(work, "engine-restart")
        return True

    # ------------------------------------------------------------------ lifecycle

    def _spawn(self, fn, name: str) -> None:
        self._threads = [x for x in self._threads if x.is_alive()]
        self._threads.append(start_thread(fn, name))

    def shutdown(self, timeout: float = 2.0) -> None:
        """Cancel loads; the bridge stops the engine itself."""
        self._closing = True
        for ev in list(self._jobs.values()):
            ev.set()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def metrics_sample_from(metrics, window_s: float = METRICS_WINDOW_S) -> MetricsSample:
    """Percentiles over the engine's ring buffers (engine.runtime.metrics.EngineMetrics).

    The engine records TTFT per finished request and the duration of every step; a running
    stream gets one token per step, so step time is its inter-token latency."""
    import time

    import numpy as np

    def pct(name: str, scale: float = 1.0):
        _t, v = metrics.series(name, window_s)
        if not len(v):
            return None, None
        p50, p99 = np.percentile(v, [50, 99])
        return float(p50) * scale, float(p99) * scale

    ttft = pct("ttft_s")
    itl = pct("step_ms", 1e-3)
    t, b = metrics.series("batch_size", 2.0)
    batch = float(b[-1]) if len(b) and time.time() - t[-1] < 2.0 else 0.0
    return MetricsSample(ttft[0], ttft[1], itl[0], itl[1], batch)
