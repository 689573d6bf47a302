"""EngineCore: the loop on the one engine thread that owns every model.

Each turn drains the inbox (submits, cancels, model adds and unloads), then runs one step per
variant with work: schedule (the variant's Scheduler picks decodes and prefill chunks) ->
execute (the runner's batched forward) -> update (sample, hand each token to the output side,
finish what ended). Callers never touch this directly: engine.runtime.engine.LocalEngine is the
thread-safe facade, engine.runtime.output.RequestOutputs turns tokens and finishes into events.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .config import EngineConfig
from .handle import Job, LocalRequestHandle, batched_wakeups
from .metrics import EngineMetrics, StepStats
from .output import RequestOutputs
from .runner import run_step
from .sampler import sample_contained
from .sequence import SeqState, Sequence
from .types import (
    EngineError,
    EngineStoppedError,
    Event,
    FinishEvent,
    InvalidRequestError,
    QueueFullError,
)
from .variant import Variant, rebuild_variant

log = logging.getLogger(__name__)


class EngineCore:
    """State shared with the facade lives under `lock`; the rest is the engine thread's."""

    def __init__(self, config: EngineConfig, metrics: EngineMetrics):
        self.config = config
        self.metrics = metrics
        self.lock = threading.Condition()
        self.outputs = RequestOutputs(self.lock, metrics)
        self.inbox: deque[tuple] = deque()
        self.variants: dict[str, Variant] = {}  # name -> variant, replaced whole under lock
        self.draining: list[Variant] = []  # swapped-out variants finishing their requests
        self.default: str | None = None
        self.loading: list[str] = []
        self.listeners: list[Callable[[StepStats], None]] = []
        self.num_waiting = 0  # accepted, not yet admitted (all variants)
        self.num_running = 0
        self.kv_used = 0
        self.stopping = False
        self.stopped = False
        self.crashed: str | None = None
        self.last_error: str | None = None
        self.thread: threading.Thread | None = None
        with self.lock:
            self._start_thread()

    # ================================================================ called by the facade
    def check_open(self) -> None:
        """Refuse new work at once when the loop has died or the engine is shutting down."""
        if self.crashed:
            raise EngineStoppedError(f"the engine stopped after an error ({self.crashed}); "
                                     "restart it")
        if self.stopping:
            raise EngineStoppedError("the engine is shut down")

    def add_request(self, seq: Sequence, variant: Variant, handle: LocalRequestHandle) -> None:
        """Queue a validated, tokenized request (the queue limit is checked here, once)."""
        with self.lock:
            self.check_open()  # under the lock: a crash drains the inbox under it too
            if seq.request_id in self.outputs.handles:
                raise InvalidRequestError(f"request id {seq.request_id!r} is already in use",
                                          param="request_id")
            if self.num_waiting >= self.config.max_waiting:
                raise QueueFullError(
                    f"the engine queue is full ({self.config.max_waiting} waiting requests); "
                    "retry later", retry_after_s=1.0)
            self.num_waiting += 1
            self.outputs.handles[seq.request_id] = handle
            self.post(("submit", seq, variant))

    def abort_request(self, request_id: str) -> None:
        with self.lock:
            if request_id in self.outputs.handles:
                self.post(("cancel", request_id))

    def post(self, cmd: tuple) -> None:
        """Queue a command for the engine thread (called with self.lock held)."""
        self.inbox.append(cmd)
        self.lock.notify()
        if self.thread is None and not self.crashed:
            self._start_thread()

    def restart(self, timeout: float) -> bool:
        """Revive a crashed loop: fresh runners, KV caches and schedulers, a new thread."""
        with self.lock:
            if self.stopping:
                raise EngineStoppedError("the engine is shut down")
            if not self.crashed:
                return False
            dead = self.thread
        if dead is not None and dead is not threading.current_thread():
            dead.join(timeout)  # its `finally` fails every request it held
        fresh = {name: rebuild_variant(v, self.config) for name, v in self.variants.items()}
        with self.lock:
            self.variants, self.draining, self.outputs.handles = fresh, [], {}
            self.num_waiting = self.num_running = self.kv_used = 0
            self.crashed, self.stopped, self.thread, self.last_error = None, False, None, None
        log.info("engine restarted with %d model(s)", len(fresh))
        return True

    def shutdown(self, timeout: float) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify()
            if self.thread is None and not self.stopped:
                self._start_thread()  # an idle engine has no thread: one ends it properly
            thread = self.thread
        if thread is not None and threading.current_thread() is not thread:
            thread.join(timeout)

    def all_variants(self) -> list[Variant]:
        with self.lock:
            return list(self.variants.values()) + list(self.draining)

    # ================================================================ engine thread
    def _start_thread(self) -> None:
        """Called with self.lock held."""
        self.thread = threading.Thread(target=self._loop, name="npu-console-engine",
                                       daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        retired = False
        # everything is inside the try, the thread setup too: a failure anywhere marks the
        # loop crashed and ends its callers' waits, instead of a thread gone without a word
        try:
            import torch

            torch.set_num_threads(self.config.resolve_threads())
            idle_s = self.config.idle_thread_s or None
            while True:
                busy = any(v.scheduler.has_work for v in self.all_variants())
                with self.lock:
                    while not self.inbox and not busy and not self.stopping:
                        if not self.lock.wait(idle_s) and not self.inbox and not self.stopping:
                            # idle: end the thread, and with it its OpenMP team, which would
                            # slow any other thread's torch work (engine.runtime.threads); the
                            # next command starts a new one
                            self.thread = None
                            retired = True
                            return
                    cmds = list(self.inbox)
                    self.inbox.clear()
                    stopping = self.stopping
                for cmd in cmds:
                    self._command_contained(cmd)
                if stopping:
                    break
                variants = self.all_variants()
                for v in variants:
                    if v.scheduler.has_work:
                        with batched_wakeups():
                            self._step_contained(v)
                if self.outputs.finished and variants:
                    # requests ended outside a step (cancelled while waiting, unloaded): report
                    # them so listeners (Prometheus, plots) see every finish
                    self._emit_stats(variants[0], 0.0, 0, 0, 0, 0, 0)
                self._retire_drained()
        except BaseException as exc:
            with self.lock:  # add_request checks under the lock: nothing slips into a dead inbox
                self.crashed = f"engine loop crashed: {type(exc).__name__}: {exc}"
            log.exception("engine loop crashed")  # after the marker: logging may fail too
        finally:
            if not retired:
                if self.crashed:
                    self._abort_all(self.crashed, "error")
                else:
                    self._abort_all("the engine shut down")
                self.stopped = True

    # ---------------------------------------------------------------- commands
    def _command_contained(self, cmd: tuple) -> None:
        """Run a command; one that fails ends with an error for its caller, never the loop."""
        try:
            self._handle_command(cmd)
        except Exception as exc:
            log.exception("engine command %r failed", cmd[0])
            message = f"{cmd[0]} failed: {type(exc).__name__}: {exc}"
            self.last_error = message
            if cmd[0] == "submit":
                seq, variant = cmd[1], cmd[2]
                if seq.state is SeqState.WAITING and seq in variant.scheduler.waiting:
                    self._finalize(variant, seq, "error", error=message)
                else:
                    self._decrement_waiting()
                    self.outputs.finish_unscheduled(seq, variant.name, "error", message)
            elif cmd[0] in ("add", "unload"):
                cmd[2]._finish(error=EngineError(message))

    def _handle_command(self, cmd: tuple) -> None:
        kind = cmd[0]
        if kind == "submit":
            _, seq, variant = cmd
            with self.lock:
                alive = variant in self.variants.values() or variant in self.draining
            if not alive:
                self._decrement_waiting()
                self.outputs.finish_unscheduled(seq, variant.name, "error",
                                                f"model {variant.name!r} was unloaded")
                return
            variant.scheduler.add(seq)
        elif kind == "cancel":
            rid = cmd[1]
            for v in self.all_variants():
                seq = v.scheduler.find(rid)
                if seq is not None:
                    self._finalize(v, seq, "cancelled")
                    return
        elif kind == "add":
            self._add_variant(*cmd[1:])
        elif kind == "unload":
            _, name, job = cmd
            with self.lock:
                variant = self.variants.get(name)
                variants = {k: v for k, v in self.variants.items() if k != name}
                self.variants = variants
                if self.default == name:
                    self.default = next(iter(variants), None)
            if variant is not None:
                self._abort_variant(variant, f"model {name!r} was unloaded")
            job._finish(name)

    def _add_variant(self, variant: Variant, job: Job, default: bool, replace: bool) -> None:
        with self.lock:
            old = self.variants.get(variant.name)
            if old is not None and replace:
                old.draining = True
                self.draining.append(old)
            variants = dict(self.variants)
            variants[variant.name] = variant
            self.variants = variants
            if default or self.default is None or self.default not in variants:
                self.default = variant.name
            if variant.name in self.loading:
                self.loading.remove(variant.name)
        # the model, torch and transformers stay for the process's life: move them out of the
        # collector's reach, or every full collection walks them all (measured: 12-17 % of a
        # batch-16 decode loop on SmolLM2, from the token events' garbage). O(1), unlike a
        # collect, so the engine loop does not stall here.
        gc.freeze()
        job._finish(variant.info)

    def _retire_drained(self) -> None:
        if not self.draining:
            return
        with self.lock:
            self.draining = [v for v in self.draining if v.scheduler.has_work]

    # ---------------------------------------------------------------- one step
    def _step_contained(self, v: Variant) -> None:
        try:
            self._step(v)
        except Exception as exc:
            log.exception("engine step failed")
            self.last_error = f"step failed: {exc}"
            for seq in list(v.scheduler.running):
                self._finalize(v, seq, "error", error=f"internal error: {exc}")

    def _step(self, v: Variant) -> None:
        """schedule -> execute -> update, for one variant."""
        t0 = time.perf_counter()
        sched = v.scheduler
        out = sched.schedule(now=time.monotonic())
        for seq in out.admitted:
            self.metrics.record_admission(seq.num_cached, len(seq.prompt_ids))
        if out.admitted:
            self._decrement_waiting(len(out.admitted))
        if out.empty:
            return
        v.runner.prepare(out.admitted)
        items = out.decodes + out.prefills
        ok_items, logits, failed = run_step(v.runner, items, len(out.decodes))
        failed_seqs = set()
        for it, msg in failed:
            failed_seqs.add(it.seq)
            self._finalize(v, it.seq, "error", error=msg)
        for it in items:
            if it.seq not in failed_seqs:
                sched.advance(it)
        generated = self._update(v, [it.seq for it in ok_items], logits) if ok_items else 0
        self._emit_stats(v, time.perf_counter() - t0, len(items), out.num_tokens,
                         sum(it.num_tokens for it in out.prefills), len(out.decodes), generated)

    def _update(self, v: Variant, seqs: list[Sequence], logits: Any) -> int:
        """Sample one token per row and hand it to the output side; finish what ended."""
        generated = 0
        tokens, errors = sample_contained(logits, seqs)
        for r, seq in enumerate(seqs):
            if r in errors:
                self._finalize(v, seq, "error", error=errors[r])
                continue
            try:
                finish, events = self.outputs.token(seq, tokens[r])
                if finish is not None:
                    self._finalize(v, seq, finish, pre_events=events)
            except Exception as exc:  # noqa: BLE001 - e.g. a tokenizer failing on this id
                self._finalize(v, seq, "error", error=f"{type(exc).__name__}: {exc}")
            generated += 1
        return generated

    def _emit_stats(self, v: Variant, duration: float, batch: int, num_tokens: int,
                    prefill_tokens: int, decode_tokens: int, generated: int) -> None:
        finished = self.outputs.take_finished()
        sched = v.scheduler
        kv_used = v.allocator.used_tokens()
        with self.lock:
            self.num_running = sum(len(x.scheduler.running) for x in self.variants.values())
            self.kv_used = kv_used
            waiting = self.num_waiting
            listeners = self.listeners
        stats = StepStats(
            time=time.time(), model=v.name, duration_s=duration, running=len(sched.running),
            waiting=waiting, batch_size=batch, num_tokens=num_tokens,
            prefill_tokens=prefill_tokens, decode_tokens=decode_tokens,
            kv_used_tokens=kv_used, kv_total_tokens=v.allocator.total_tokens,
            prefix_hit_rate=self.metrics.prefix_hit_rate(), finished=tuple(finished))
        self.metrics.record_step(stats, generated)
        for cb in listeners:
            try:
                cb(stats)
            except Exception:
                log.exception("engine listener failed")

    def _finalize(self, v: Variant, seq: Sequence, reason: str, error: str | None = None,
                  pre_events: list[Event] | None = None) -> FinishEvent:
        was_waiting = seq.state is SeqState.WAITING
        v.scheduler.finish(seq, reason)
        if was_waiting:
            self._decrement_waiting()
        fin = self.outputs.finish(seq, v.name, reason, error, pre_events)
        v.runner.release(seq)  # last: a runner failing here has already let its caller go
        return fin

    def _decrement_waiting(self, n: int = 1) -> None:
        with self.lock:
            self.num_waiting = max(0, self.num_waiting - n)

    def _abort_variant(self, v: Variant, message: str) -> None:
        for seq in list(v.scheduler.running) + list(v.scheduler.waiting):
            self._finalize(v, seq, "error", error=message)

    def _abort_all(self, message: str, reason: str = "cancelled") -> None:
        """End every request and job the engine holds (shutdown, or a dead loop); never
        leaves a caller waiting, whatever state the crash left the runners in."""
        for v in self.all_variants():
            for seq in list(v.scheduler.running) + list(v.scheduler.waiting):
                try:
                    self._finalize(v, seq, reason, error=message)
                except Exception:  # its handle is ended below
                    log.exception("could not end request %s cleanly", seq.request_id)
        with self.lock:
            pending, self.inbox = list(self.inbox), deque()
            self.num_waiting = 0
        for cmd in pending:
            if cmd[0] in ("add", "unload"):
                cmd[2]._finish(error=EngineStoppedError(message))
        self.outputs.abandon_all(reason, message)
