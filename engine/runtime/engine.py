"""LocalEngine: the thread-safe EngineClient over an engine thread that owns every model.

Callers (any thread or asyncio loop) validate and tokenize in their own thread, then hand
commands to the engine thread through an inbox. The engine thread alone runs torch: it drains
the inbox, lets each variant's scheduler pick the step's work, runs it, samples, detokenizes and
pushes events to the request handles. Models load on a loader thread so nobody blocks.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.runtime.config import EngineConfig
from engine.runtime.handle import Job, LocalRequestHandle, batched_wakeups
from engine.runtime.loading import LoadCancelled, folder_loader
from engine.runtime.metrics import EngineMetrics, StepStats
from engine.runtime.output import OutputProcessor, reasoning_parser_for
from engine.runtime.runner import run_step
from engine.runtime.sampler import sample_contained
from engine.runtime.sequence import SeqState, Sequence, finish_event
from engine.runtime.types import (
    EngineError,
    EngineStats,
    EngineStoppedError,
    Event,
    FinishEvent,
    GenerationRequest,
    InvalidRequestError,
    ModelInfo,
    ModelNotFoundError,
    NoModelLoadedError,
    QueueFullError,
    TokenEvent,
)
from engine.runtime.validation import (
    check_context,
    check_prompt_source,
    check_token_ids,
    normalize_params,
)
from engine.runtime.variant import Variant, build_variant, rebuild_variant

log = logging.getLogger(__name__)


class LocalEngine:
    """In-process engine. Implements engine.runtime.types.EngineClient."""

    def __init__(self, config: EngineConfig | None = None):
        self.config = config or EngineConfig()
        self.metrics = EngineMetrics(self.config.metrics_capacity)
        self._lock = threading.Condition()
        self._inbox: deque[tuple] = deque()
        self._variants: dict[str, Variant] = {}  # name -> variant, replaced whole under _lock
        self._draining: list[Variant] = []  # swapped-out variants finishing their requests
        self._default: str | None = None
        self._handles: dict[str, LocalRequestHandle] = {}
        self._num_waiting = 0  # accepted, not yet admitted (all variants)
        self._num_running = 0
        self._kv_used = 0
        self._loading: list[str] = []
        self._listeners: list[Callable[[StepStats], None]] = []
        self._stopping = False
        self._stopped = False
        self._crashed: str | None = None
        self._finished_since_stats: list[FinishEvent] = []  # engine thread only
        self.last_error: str | None = None
        self._thread: threading.Thread | None = None
        with self._lock:
            self._start_thread()

    # ================================================================ client API (any thread)
    def validate(self, request: GenerationRequest) -> tuple[Any, Variant]:
        """submit()'s checks before tokenizing, cheap enough for a GUI thread: raises what
        submit would for a stopped engine, a bad parameter or an unknown model."""
        self._check_open()
        check_prompt_source(request)
        return normalize_params(request.params), self._resolve(request.model)

    def submit(self, request: GenerationRequest) -> LocalRequestHandle:
        params, variant = self.validate(request)
        ids = variant.encoder.encode(request)  # on this thread, with no engine lock held
        check_token_ids(ids, variant.vocab_size)
        take = {k: v for k, v in variant.info.sampling_defaults if k in params.model_defaults}
        if take:  # validated when the model was loaded
            params = dataclasses.replace(params, **take)
        if params.max_tokens_fits and len(ids) < variant.max_len:
            fit = min(params.max_tokens, variant.max_len - len(ids))
            params = dataclasses.replace(params, max_tokens=fit)
        check_context(len(ids), params.max_tokens, variant.max_len)
        seq = Sequence(request_id=request.request_id, prompt_ids=ids, params=params)
        stop_ids = frozenset(params.stop_token_ids) | (
            frozenset() if params.ignore_eos else variant.eos)
        seq.extra["out"] = OutputProcessor(variant.tokenizer, ids, params, stop_ids,
                                           reasoning_parser_for(variant, request, ids))
        handle = LocalRequestHandle(seq.request_id, variant.name, self.cancel)
        with self._lock:
            self._check_open()  # under the lock: a crash drains the inbox under it too
            if seq.request_id in self._handles:
                raise InvalidRequestError(f"request id {seq.request_id!r} is already in use",
                                          param="request_id")
            if self._num_waiting >= self.config.max_waiting:
                raise QueueFullError(
                    f"the engine queue is full ({self.config.max_waiting} waiting requests); "
                    "retry later", retry_after_s=1.0)
            self._num_waiting += 1
            self._handles[seq.request_id] = handle
            self._post(("submit", seq, variant))
        return handle

    def encode(self, request: GenerationRequest) -> list[int]:
        """The prompt's token ids as submit() would compute them (callers that send one prompt
        several times encode it once and submit the ids)."""
        check_prompt_source(request)
        return self._resolve(request.model).encoder.encode(request)

    def set_max_waiting(self, limit: int) -> None:
        """Change the queue limit at run time (the engine is its only owner: requests already
        queued stay queued, new ones beyond the limit get QueueFullError)."""
        if int(limit) < 1:
            raise InvalidRequestError("the queue limit must be at least 1", param="max_waiting")
        with self._lock:
            self.config.max_waiting = int(limit)

    @property
    def crash_reason(self) -> str | None:
        """Why the engine loop died, or None while it is healthy (restart() revives it)."""
        return self._crashed

    def generate(self, request: GenerationRequest, timeout: float | None = None):
        """Submit and wait: the Completion."""
        return self.submit(request).result(timeout)

    def cancel(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._handles:
                self._post(("cancel", request_id))

    def stats(self) -> EngineStats:
        with self._lock:
            models = tuple(self._variants)
            variants = list(self._variants.values())
            loading = self._loading[0] if self._loading else None
            waiting, running, kv_used = self._num_waiting, self._num_running, self._kv_used
        if self._crashed:
            state = "error"
        elif self._stopped or self._stopping:
            state = "stopped"
        elif loading:
            state = "loading"
        elif models:
            state = "ready"
        else:
            state = "idle"
        prompt_tps, gen_tps = self.metrics.rates()
        return EngineStats(
            state=state, running=running, waiting=waiting,
            max_running=self.config.max_running, max_waiting=self.config.max_waiting,
            kv_used_tokens=kv_used,
            kv_total_tokens=sum(v.allocator.total_tokens for v in variants),
            prefix_hit_rate=self.metrics.prefix_hit_rate(),
            prompt_tokens_per_s=prompt_tps, generation_tokens_per_s=gen_tps,
            steps=self.metrics.steps, requests_finished=self.metrics.requests_finished,
            requests_failed=self.metrics.requests_failed, models=models, loading=loading,
            last_error=self._crashed or self.last_error)

    def models(self) -> list[ModelInfo]:
        with self._lock:
            return [v.info for v in self._variants.values()]

    @property
    def default_model(self) -> str | None:
        return self._default

    def set_default(self, name: str) -> None:
        with self._lock:
            if name not in self._variants:
                raise ModelNotFoundError(f"no loaded model named {name!r}", param="model")
            self._default = name

    def add_listener(self, callback: Callable[[StepStats], None]) -> Callable[[], None]:
        """Call `callback(StepStats)` on the engine thread after every step; keep it short.
        Returns a function that removes the listener."""
        with self._lock:
            self._listeners = self._listeners + [callback]

        def remove() -> None:
            with self._lock:
                self._listeners = [cb for cb in self._listeners if cb is not callback]
        return remove

    # ---------------------------------------------------------------- models
    def load(self, path: str | Path, name: str | None = None, device: str = "cpu",
             dtype: str = "float32", default: bool = False, replace: bool = False,
             force_fallback: bool = False) -> Job:
        """Load a model folder on a loader thread; the Job's result() is its ModelInfo."""
        name = name or Path(path).name
        return self._start_load(name, folder_loader(path, name, device, dtype), default,
                                replace, force_fallback)

    def add_model(self, loaded: Any, name: str | None = None, default: bool = False,
                  replace: bool = False, force_fallback: bool = False) -> Job:
        """Serve an already loaded (e.g. quantized in memory) LoadedModel under `name`."""
        return self._start_load(name or loaded.name, lambda job: loaded, default, replace,
                                force_fallback)

    def swap(self, name: str, path: str | Path, device: str = "cpu",
             dtype: str = "float32") -> Job:
        """Load `path` and put it in place of `name`; requests already on the old model finish
        there, new ones go to the new one."""
        return self.load(path, name=name, device=device, dtype=dtype, replace=True)

    def unload(self, name: str) -> Job:
        """Remove a variant; its running and waiting requests end with an error."""
        job = Job(f"unload {name}")
        with self._lock:
            self._check_open()
            if name not in self._variants:
                raise ModelNotFoundError(f"no loaded model named {name!r}", param="model")
            self._post(("unload", name, job))
        return job

    def _start_load(self, name: str, produce: Callable[[Job], Any], default: bool,
                    replace: bool, force_fallback: bool) -> Job:
        self._check_open()
        job = Job(f"load {name}")
        with self._lock:
            if name in self._variants and not replace:
                raise InvalidRequestError(f"a model named {name!r} is already loaded; unload it "
                                          "or use swap", param="name")
            if name in self._loading:
                raise InvalidRequestError(f"{name!r} is already loading", param="name")
            self._loading.append(name)

        def work() -> None:
            try:
                loaded = produce(job)
                if job.cancelled:
                    raise LoadCancelled(f"loading {name} was cancelled")
                job._report(0.8, "allocating the KV cache")
                variant = build_variant(loaded, name, self.config, force_fallback=force_fallback)
                if job.cancelled:
                    raise LoadCancelled(f"loading {name} was cancelled")
                with self._lock:
                    self._check_open()
                    self._post(("add", variant, job, default, replace))
            except BaseException as exc:  # noqa: BLE001 - reported through the job
                with self._lock:
                    if name in self._loading:
                        self._loading.remove(name)
                err = exc if isinstance(exc, EngineError) else EngineError(
                    f"could not load {name}: {exc}")
                self.last_error = err.message
                job._finish(error=err)

        threading.Thread(target=work, name=f"load-{name}", daemon=True).start()
        return job

    def restart(self, timeout: float = 30.0) -> None:
        """Revive a crashed engine: each model keeps its weights and gets a fresh runner, KV
        cache and scheduler, and a new loop thread serves them. A no-op while healthy."""
        with self._lock:
            if self._stopping:
                raise EngineStoppedError("the engine is shut down")
            if not self._crashed:
                return
            dead = self._thread
        if dead is not None and dead is not threading.current_thread():
            dead.join(timeout)  # its `finally` fails every request it held
        fresh = {name: rebuild_variant(v, self.config) for name, v in self._variants.items()}
        with self._lock:
            self._variants, self._draining, self._handles = fresh, [], {}
            self._num_waiting = self._num_running = self._kv_used = 0
            self._crashed, self._stopped, self._thread, self.last_error = None, False, None, None
        log.info("engine restarted with %d model(s)", len(fresh))

    def shutdown(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify()
            if self._thread is None and not self._stopped:
                self._start_thread()  # an idle engine has no thread: one ends it properly
            thread = self._thread
        if thread is not None and threading.current_thread() is not thread:
            thread.join(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ================================================================ helpers (caller thread)
    def _resolve(self, model: str | None) -> Variant:
        with self._lock:
            name = model or self._default
            if name is None or not self._variants:
                if self._loading:
                    raise NoModelLoadedError(f"model {self._loading[0]!r} is still loading")
                raise NoModelLoadedError("no model is loaded")
            variant = self._variants.get(name)
        if variant is None:
            raise ModelNotFoundError(
                f"model {name!r} is not loaded (loaded: {', '.join(self._variants) or 'none'})",
                param="model")
        return variant

    def _check_open(self) -> None:
        """Refuse new work at once when the loop has died or the engine is shutting down."""
        if self._crashed:
            raise EngineStoppedError(f"the engine stopped after an error ({self._crashed}); "
                                     "restart it")
        if self._stopping:
            raise EngineStoppedError("the engine is shut down")

    # ================================================================ engine thread
    def _start_thread(self) -> None:
        """Called with self._lock held."""
        self._thread = threading.Thread(target=self._loop, name="npu-console-engine",
                                        daemon=True)
        self._thread.start()

    def _post(self, cmd: tuple) -> None:
        """Queue a command for the engine thread (called with self._lock held)."""
        self._inbox.append(cmd)
        self._lock.notify()
        if self._thread is None and not self._crashed:
            self._start_thread()

    def _loop(self) -> None:
        import torch

        torch.set_num_threads(self.config.resolve_threads())
        idle_s = self.config.idle_thread_s or None
        retired = False
        try:
            while True:
                busy = any(v.scheduler.has_work for v in self._all_variants())
                with self._lock:
                    while not self._inbox and not busy and not self._stopping:
                        if not self._lock.wait(idle_s) and not self._inbox and not self._stopping:
                            # idle: end the thread, and with it its OpenMP team, which would
                            # slow any other thread's torch work (engine.runtime.threads); the
                            # next command starts a new one
                            self._thread = None
                            retired = True
                            return
                    cmds = list(self._inbox)
                    self._inbox.clear()
                    stopping = self._stopping
                for cmd in cmds:
                    self._command_contained(cmd)
                if stopping:
                    break
                variants = self._all_variants()
                for v in variants:
                    if v.scheduler.has_work:
                        with batched_wakeups():
                            self._step_contained(v)
                if self._finished_since_stats and variants:
                    # requests ended outside a step (cancelled while waiting, unloaded): report
                    # them so listeners (Prometheus, plots) see every finish
                    self._emit_stats(variants[0], 0.0, 0, 0, 0, 0, 0)
                self._retire_drained()
        except BaseException as exc:
            log.exception("engine loop crashed")
            with self._lock:  # submit() checks under the lock: nothing slips into a dead inbox
                self._crashed = f"engine loop crashed: {type(exc).__name__}: {exc}"
        finally:
            if not retired:
                if self._crashed:
                    self._abort_all(self._crashed, "error")
                else:
                    self._abort_all("the engine shut down")
                self._stopped = True

    def _all_variants(self) -> list[Variant]:
        with self._lock:
            return list(self._variants.values()) + list(self._draining)

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
                    self._finish_unscheduled(seq, variant.name, "error", message)
            elif cmd[0] in ("add", "unload"):
                cmd[2]._finish(error=EngineError(message))

    def _handle_command(self, cmd: tuple) -> None:
        kind = cmd[0]
        if kind == "submit":
            _, seq, variant = cmd
            with self._lock:
                alive = variant in self._variants.values() or variant in self._draining
            if not alive:
                self._decrement_waiting()
                self._finish_unscheduled(seq, variant.name, "error",
                                         f"model {variant.name!r} was unloaded")
                return
            variant.scheduler.add(seq)
        elif kind == "cancel":
            rid = cmd[1]
            for v in self._all_variants():
                seq = v.scheduler.find(rid)
                if seq is not None:
                    self._finalize(v, seq, "cancelled")
                    return
        elif kind == "add":
            _, variant, job, default, replace = cmd
            with self._lock:
                old = self._variants.get(variant.name)
                if old is not None and replace:
                    old.draining = True
                    self._draining.append(old)
                variants = dict(self._variants)
                variants[variant.name] = variant
                self._variants = variants
                if default or self._default is None or self._default not in variants:
                    self._default = variant.name
                if variant.name in self._loading:
                    self._loading.remove(variant.name)
            job._finish(variant.info)
        elif kind == "unload":
            _, name, job = cmd
            with self._lock:
                variant = self._variants.get(name)
                variants = {k: v for k, v in self._variants.items() if k != name}
                self._variants = variants
                if self._default == name:
                    self._default = next(iter(variants), None)
            if variant is not None:
                self._abort_variant(variant, f"model {name!r} was unloaded")
            job._finish(name)

    def _retire_drained(self) -> None:
        if not self._draining:
            return
        with self._lock:
            keep = [v for v in self._draining if v.scheduler.has_work]
            self._draining = keep

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
        generated = 0
        if ok_items:
            seqs = [it.seq for it in ok_items]
            tokens, errors = sample_contained(logits, seqs)
            for r, seq in enumerate(seqs):
                if r in errors:
                    self._finalize(v, seq, "error", error=errors[r])
                    continue
                try:
                    self._append_token(v, seq, tokens[r])
                except Exception as exc:  # noqa: BLE001 - e.g. a tokenizer failing on this id
                    self._finalize(v, seq, "error", error=f"{type(exc).__name__}: {exc}")
                generated += 1
        self._emit_stats(v, time.perf_counter() - t0, len(items), out.num_tokens,
                         sum(it.num_tokens for it in out.prefills), len(out.decodes), generated)

    def _emit_stats(self, v: Variant, duration: float, batch: int, num_tokens: int,
                    prefill_tokens: int, decode_tokens: int, generated: int) -> None:
        finished, self._finished_since_stats = self._finished_since_stats, []
        sched = v.scheduler
        kv_used = v.allocator.used_tokens()
        with self._lock:
            self._num_running = sum(len(x.scheduler.running) for x in self._variants.values())
            self._kv_used = kv_used
            waiting = self._num_waiting
            listeners = self._listeners
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

    def _append_token(self, v: Variant, seq: Sequence, tok: int) -> FinishEvent | None:
        now = time.monotonic()
        seq.output_ids.append(tok)
        seq.token_times.append(now)
        out = seq.extra["out"].step(tok, len(seq.output_ids), now)
        if out.stop_reason is not None:
            seq.stop_reason = out.stop_reason
        events: list[Event] = [TokenEvent(seq.request_id, out.text, (tok,), out.reasoning,
                                          out.reasoning_tokens)]
        if out.finish is None:
            handle = self._handles.get(seq.request_id)
            if handle is not None:
                handle._push(events)
            return None
        return self._finalize(v, seq, out.finish, pre_events=events)

    def _finalize(self, v: Variant, seq: Sequence, reason: str, error: str | None = None,
                  pre_events: list[Event] | None = None) -> FinishEvent:
        was_waiting = seq.state is SeqState.WAITING
        v.scheduler.finish(seq, reason)
        if was_waiting:
            self._decrement_waiting()
        seq.error = error
        fin = finish_event(seq, v.name, reason, error)
        if "out" in seq.extra:  # reasoning tokens, time to the first answer token
            fin = seq.extra["out"].annotate(fin, seq.arrival_mono)
        self.metrics.record_finish(fin.timings, failed=reason == "error")
        self._finished_since_stats.append(fin)
        with self._lock:
            handle = self._handles.pop(seq.request_id, None)
        if handle is not None:
            handle._push((pre_events or []) + [fin])
        v.runner.release(seq)  # last: a runner failing here has already let its caller go
        return fin

    def _finish_unscheduled(self, seq: Sequence, model: str, reason: str, error: str) -> None:
        fin = finish_event(seq, model, reason, error)
        self.metrics.record_finish(fin.timings, failed=True)
        self._finished_since_stats.append(fin)
        with self._lock:
            handle = self._handles.pop(seq.request_id, None)
        if handle is not None:
            handle._push([fin])

    def _decrement_waiting(self, n: int = 1) -> None:
        with self._lock:
            self._num_waiting = max(0, self._num_waiting - n)

    def _abort_variant(self, v: Variant, message: str) -> None:
        for seq in list(v.scheduler.running) + list(v.scheduler.waiting):
            self._finalize(v, seq, "error", error=message)

    def _abort_all(self, message: str, reason: str = "cancelled") -> None:
        """End every request and job the engine holds (shutdown, or a dead loop); never
        leaves a caller waiting, whatever state the crash left the runners in."""
        for v in self._all_variants():
            for seq in list(v.scheduler.running) + list(v.scheduler.waiting):
                try:
                    self._finalize(v, seq, reason, error=message)
                except Exception:  # its handle is ended below
                    log.exception("could not end request %s cleanly", seq.request_id)
        with self._lock:
            pending, self._inbox = list(self._inbox), deque()
            left, self._handles = list(self._handles.values()), {}
            self._num_waiting = 0
        for cmd in pending:
            if cmd[0] in ("add", "unload"):
                cmd[2]._finish(error=EngineStoppedError(message))
        for handle in left:  # still queued, or caught mid-step
            self.metrics.record_finish(handle._abandon(reason, message).timings, failed=True)
