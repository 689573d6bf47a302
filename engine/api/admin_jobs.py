"""Long admin work (a model load, a quantization) as jobs a client can poll, follow and cancel.

A job's state lives here and is changed only by its worker thread (progress, the end) and by
cancel(); readers take snapshots (plain dicts, the JSON the routes send). Listeners get every
snapshot on the worker's thread and must be quick: the SSE route hands them to its event loop.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("npu_console.engine.api")

RUNNING = "running"
DONE, FAILED, CANCELLED = "done", "failed", "cancelled"
FINAL = (DONE, FAILED, CANCELLED)
KEEP_FINISHED = 50  # finished jobs kept for GET /v1/admin/jobs; older ones are forgotten

Listener = Callable[[dict[str, Any]], None]


class JobConflict(Exception):
    """A job that may not start now (another quantization is running); HTTP 409."""


@dataclass
class AdminJob:
    id: str
    kind: str  # "load" or "quantize"
    params: dict[str, Any]  # what the client asked for, in client form (relative paths)
    state: str = RUNNING
    stage: str = ""
    fraction: float = 0.0
    message: str = "starting"
    error: str | None = None
    result: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    finished: float | None = None
    cancel_requested: bool = False
    cancel_event: threading.Event = field(default_factory=threading.Event)
    on_cancel: Callable[[], None] | None = None  # e.g. the engine load Job's cancel
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _listeners: list[Listener] = field(default_factory=list)
    _ended: threading.Event = field(default_factory=threading.Event)

    # ------------------------------------------------------------------ readers
    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "state": self.state, "stage": self.stage,
                "fraction": round(self.fraction, 4), "message": self.message,
                "error": self.error, "result": self.result, "params": self.params,
                "cancel_requested": self.cancel_requested, "created": self.created,
                "finished": self.finished}

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._ended.wait(timeout)

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        """Call fn(snapshot) now and on every change until the job ends (the final snapshot
        included); returns the unsubscribe function."""
        with self._lock:
            self._listeners.append(fn)
            snap = self._snapshot()
        fn(snap)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._listeners:
                    self._listeners.remove(fn)
        return unsubscribe

    # ------------------------------------------------------------------ writers
    def progress(self, stage: str, fraction: float, message: str) -> None:
        """Progress from the worker; the fraction never goes back (a stage run twice, as the
        auto recipe's second quantize pass, keeps the bar where it was)."""
        self._change(stage=stage, fraction=min(1.0, max(self.fraction, fraction)),
                     message=message or self.message)

    def finish(self, state: str, *, result: dict | None = None, error: str | None = None,
               message: str = "") -> None:
        fraction = 1.0 if state == DONE else self.fraction
        self._change(state=state, result=result, error=error, fraction=fraction,
                     message=message or state, finished=time.time())
        self._ended.set()

    def cancel(self) -> None:
        if self.done:
            return
        self.cancel_event.set()
        self._change(cancel_requested=True, message="cancelling")
        if self.on_cancel is not None:
            self.on_cancel()

    def _change(self, **fields: Any) -> None:
        with self._lock:
            if self.state in FINAL:
                return  # a late progress report after the end changes nothing
            for name, value in fields.items():
                setattr(self, name, value)
            snap = self._snapshot()
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn(snap)
            except Exception:  # a listener's bug must not stop the job
                log.exception("admin job listener failed")


class AdminJobs:
    """Every job of one server: create, find, list, cancel; at most one quantization at a
    time (it takes every core and a model's worth of memory beside the served ones)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, AdminJob] = {}
        self.closed = False

    def create(self, kind: str, params: dict[str, Any], exclusive: bool = False) -> AdminJob:
        with self._lock:
            if self.closed:
                raise JobConflict("the server is stopping")
            if exclusive:
                busy = next((j for j in self._jobs.values()
                             if j.kind == kind and not j.done), None)
                if busy is not None:
                    raise JobConflict(f"a {kind} job is already running ({busy.id}); wait for "
                                      f"it or cancel it (DELETE /v1/admin/jobs/{busy.id})")
            job = AdminJob(id=f"job-{uuid.uuid4().hex[:12]}", kind=kind, params=params)
            self._jobs[job.id] = job
            self._forget_old()
        return job

    def _forget_old(self) -> None:
        finished = sorted((j for j in self._jobs.values() if j.done), key=lambda j: j.created)
        for job in finished[:max(0, len(finished) - KEEP_FINISHED)]:
            del self._jobs[job.id]

    def get(self, job_id: str) -> AdminJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def all(self) -> list[AdminJob]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.created)

    def close(self, wait_s: float = 10.0) -> None:
        """The server is stopping: no new jobs, running ones cancelled and given `wait_s`
        to clean up (a cancelled quantization removes its output)."""
        with self._lock:
            self.closed = True
            running = [j for j in self._jobs.values() if not j.done]
        for job in running:
            job.cancel()
        deadline = time.monotonic() + wait_s
        for job in running:
            job.wait(max(0.0, deadline - time.monotonic()))
