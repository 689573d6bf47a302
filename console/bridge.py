"""The one place where engine events and telemetry snapshots become Qt signals on the GUI thread.

Other threads only append to locked buffers: the engine's own thread (or a remote client's
reader) through each request handle's callback, a few submit threads that template, tokenize
and open each request off the GUI thread, the stats sampler and the telemetry poller. One
GUI-thread QTimer drains them every FLUSH_MS, so a page sees at most one `tokens` signal per
request per repaint however fast the engine decodes, and the GUI thread never waits on an
engine lock.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

# engine.runtime.types is imported inside functions: importing anything under engine.runtime
# may pull in torch (seconds), and the window must show before that happens.

log = logging.getLogger(__name__)

FLUSH_MS = 40
STATS_INTERVAL_S = 0.25
# requests opened at once: a server slow to answer holds one submit thread, not the others
SUBMIT_THREADS = 4


@dataclass
class _Stream:
    request_id: str
    handle: Any
    pending: list[str] = field(default_factory=list)
    pending_reasoning: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0
    reasoning_sent: int = -1  # the count last emitted
    n_tokens: int = 0
    finish: Any = None  # FinishEvent
    cancelled: bool = False


class EngineBridge(QObject):
    """Owns no model: it forwards to an EngineClient and a TelemetryPoller set on it."""

    tokens = Signal(str, str)  # request_id, text since the last flush
    # request_id, reasoning text since the last flush (may be ""), reasoning tokens so far;
    # emitted before that flush's `tokens` (a reply's reasoning comes before its answer)
    reasoning = Signal(str, str, int)
    finished = Signal(str, object)  # request_id, FinishEvent
    stats = Signal(object)  # EngineStats, a few times a second
    metrics = Signal(object)  # engine metrics sample (whatever the engine exposes), same rate
    telemetry = Signal(object)  # TelemetrySnapshot, once per poll
    alert = Signal(object)  # AlertEvent
    engine_changed = Signal(object)  # the EngineClient (or None)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.engine = None  # an engine.runtime.types.EngineClient
        self.poller = None
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()
        self._snapshots: deque = deque(maxlen=4)
        self._alerts: deque = deque(maxlen=256)
        self._stat_samples: deque = deque(maxlen=8)
        self._unsubs: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._metrics_source: Callable[[], Any] | None = None
        self._submitter = _Submitter(self._submit)
        self.timer = QTimer(self)
        self.timer.setInterval(FLUSH_MS)
        self.timer.timeout.connect(self.flush)
        self.timer.start()
        self.flushes = 0

    # ------------------------------------------------------------------ wiring

    def set_engine(self, engine,
                   metrics_source: Callable[[], Any] | None = None) -> None:
        """metrics_source: a cheap callable returning the engine's metrics sample (ring buffers)."""
        self.engine = engine
        self._metrics_source = metrics_source
        if engine is not None and self._sampler is None:
            self._sampler = threading.Thread(target=self._sample_stats, name="bridge-stats",
                                             daemon=True)
            self._sampler.start()
        self.engine_changed.emit(engine)

    def set_poller(self, poller) -> None:
        """Attach a TelemetryPoller (started by the caller); replaces any previous one."""
        for unsub in self._unsubs:
            unsub()
        self._unsubs.clear()
        self.poller = poller
        if poller is None:
            return
        self._unsubs.append(poller.subscribe(self._snapshots.append))
        self._unsubs.append(poller.subscribe_alerts(self._alerts.append))
        if poller.latest is not None:
            self._snapshots.append(poller.latest)

    # ------------------------------------------------------------------ requests

    def submit(self, request, engine=None) -> str:
        """Stream `request` on `engine` (default: the console's own; a connected server's
        RemoteEngine streams the same way). The engine's cheap checks run here (EngineError
        subclasses are raised at once: unknown model, bad parameter, stopped engine);
        rendering the chat template and tokenizing (for a server: the HTTP request) run on the
        stream's own thread, never the GUI's, and a refusal there (a prompt over the context,
        a server gone) ends the stream with an error finish."""
        engine = engine if engine is not None else self.engine
        if engine is None:
            from ..engine.runtime.types import NoModelLoadedError

            raise NoModelLoadedError("The engine is not running yet; load a model first.")
        validate = getattr(engine, "validate", None)
        if validate is not None:
            validate(request)
        rid = request.request_id
        stream = _Stream(rid, None)
        with self._lock:
            self._streams[rid] = stream
        self._submitter.put((stream, engine, request))
        return rid

    def _submit(self, stream: _Stream, engine, request) -> None:
        """On a submit thread: open the request, then take its events as the engine makes them."""
        try:
            stream.handle = engine.submit(request)
        except Exception as exc:  # noqa: BLE001 - the request's end, shown like any other
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            with self._lock:
                stream.finish = _error_finish(stream.request_id, message)
            return
        if stream.cancelled:  # stopped while its prompt was being tokenized
            stream.handle.cancel()
        stream.handle.add_callback(lambda events: self._take(stream, events))

    def cancel(self, request_id: str) -> None:
        with self._lock:
            stream = self._streams.get(request_id)
        if stream is not None:
            stream.cancelled = True
            if stream.handle is None:
                return  # still tokenizing: its thread cancels it once submitted
            try:
                stream.handle.cancel()
            except Exception as exc:  # already finished: nothing to abort  # noqa: BLE001
                log.debug("cancel %s: %s", request_id, exc)

    def active(self) -> list[str]:
        with self._lock:
            return [rid for rid, s in self._streams.items() if s.finish is None]

    def _take(self, stream: _Stream, events: list) -> None:
        """On the thread that made `events` (the engine's, or a remote client's reader)."""
        from ..engine.runtime.types import FinishEvent, TokenEvent

        with self._lock:
            for event in events:
                if isinstance(event, TokenEvent):
                    stream.pending.append(event.text)
                    stream.n_tokens += len(event.token_ids)
                    if event.reasoning:
                        stream.pending_reasoning.append(event.reasoning)
                    stream.reasoning_tokens += event.reasoning_tokens
                elif isinstance(event, FinishEvent):
                    stream.finish = event

    # ------------------------------------------------------------------ GUI-thread drain

    def flush(self) -> None:
        """Emit what accumulated since the last tick (runs on the GUI thread)."""
        self.flushes += 1
        out: list[tuple[str, str]] = []
        thought: list[tuple[str, str, int]] = []
        done: list[tuple[str, Any]] = []
        with self._lock:
            for rid, stream in list(self._streams.items()):
                if stream.pending_reasoning or (stream.reasoning_tokens
                                                and stream.reasoning_tokens
                                                != stream.reasoning_sent):
                    thought.append((rid, "".join(stream.pending_reasoning),
                                    stream.reasoning_tokens))
                    stream.pending_reasoning.clear()
                    stream.reasoning_sent = stream.reasoning_tokens
                if stream.pending:
                    out.append((rid, "".join(stream.pending)))
                    stream.pending.clear()
                if stream.finish is not None:
                    done.append((rid, stream.finish))
                    del self._streams[rid]
        for rid, text, n in thought:
            self.reasoning.emit(rid, text, n)
        for rid, text in out:
            self.tokens.emit(rid, text)
        for rid, fin in done:
            self.finished.emit(rid, fin)
        if self._snapshots:
            snap = self._snapshots.pop()
            self._snapshots.clear()
            self.telemetry.emit(snap)
        while self._alerts:
            self.alert.emit(self._alerts.popleft())
        if self._stat_samples:
            stats, sample = self._stat_samples.pop()
            self._stat_samples.clear()
            self.stats.emit(stats)
            if sample is not None:
                self.metrics.emit(sample)

    def _sample_stats(self) -> None:
        while not self._stop.wait(STATS_INTERVAL_S):
            engine = self.engine
            if engine is None:
                continue
            try:
                stats = engine.stats()
                sample = self._metrics_source() if self._metrics_source else None
            except Exception as exc:  # a stopped engine must not kill the sampler  # noqa: BLE001
                log.debug("stats sample failed: %s", exc)
                continue
            self._stat_samples.append((stats, sample))

    # ------------------------------------------------------------------ shutdown

    def shutdown(self, timeout: float = 2.5) -> None:
        """Abort streams, stop sampler and poller, stop the engine: bounded by `timeout`."""
        deadline = time.monotonic() + timeout
        self.timer.stop()
        self._stop.set()
        for rid in self.active():
            self.cancel(rid)
        for unsub in self._unsubs:
            unsub()
        self._unsubs.clear()
        if self.poller is not None:
            try:
                self.poller.stop()
            except Exception as exc:  # noqa: BLE001
                log.debug("poller stop: %s", exc)
        if self.engine is not None:
            try:
                self.engine.shutdown(timeout=max(0.1, deadline - time.monotonic()))
            except Exception as exc:  # noqa: BLE001
                log.warning("engine shutdown: %s", exc)
        self._submitter.stop(deadline)
        if self._sampler is not None:
            self._sampler.join(max(0.0, deadline - time.monotonic()))


class _Submitter:
    """Up to SUBMIT_THREADS threads, started as needed, that run `run(*job)` for queued jobs.
    Not a ThreadPoolExecutor: its shutdown either waits with no bound or leaves the threads to
    end later, and closing the window must end them within its deadline."""

    def __init__(self, run: Callable[..., None]):
        self._run = run
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()

    def put(self, job: tuple) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1  # that thread takes this job
            elif len(self._threads) < SUBMIT_THREADS:
                t = threading.Thread(target=self._loop, daemon=True,
                                     name=f"bridge-submit-{len(self._threads)}")
                self._threads.append(t)
                t.start()
            self._jobs.put(job)  # all busy: the first to finish takes it

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                self._run(*job)
            except Exception:  # a bug in one submission must not end the thread
                log.exception("submit failed")
            with self._lock:
                self._idle += 1

    def stop(self, deadline: float) -> None:
        """Let every thread finish its job and end, waiting until `deadline` (monotonic)."""
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


def _error_finish(request_id: str, message: str):
    from ..engine.runtime.types import FinishEvent, RequestTimings, Usage

    now = time.time()
    return FinishEvent(request_id=request_id, finish_reason="error", usage=Usage(0, 0),
                       timings=RequestTimings(arrival=now, queue_s=0.0, ttft_s=None, e2e_s=0.0,
                                              tpot_s=None),
                       model="", error=message)
