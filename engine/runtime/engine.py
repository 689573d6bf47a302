"""LocalEngine: the thread-safe EngineClient, a thin facade over the engine core.

Callers (any thread or asyncio loop) validate and tokenize here, in their own thread, then hand
the request to the EngineCore (engine.runtime.core), whose one thread owns every model and runs
schedule -> execute -> update. The output side (engine.runtime.output) turns tokens into events
on the request handles. Models load through engine.runtime.loading on a loader thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import EngineConfig
from .core import EngineCore
from .handle import Job, LocalRequestHandle
from .loading import folder_loader, start_load
from .metrics import EngineMetrics, StepStats
from .output import output_for
from .sequence import Sequence
from .types import (
    EngineStats,
    GenerationRequest,
    InvalidRequestError,
    ModelInfo,
    ModelNotFoundError,
    NoModelLoadedError,
)
from .validation import (
    check_context,
    check_prompt_source,
    check_token_ids,
    normalize_params,
)
from .variant import Variant


class LocalEngine:
    """In-process engine. Implements engine.runtime.types.EngineClient."""

    def __init__(self, config: EngineConfig | None = None):
        self.config = config or EngineConfig()
        self.metrics = EngineMetrics(self.config.metrics_capacity)
        self._core = EngineCore(self.config, self.metrics)

    # ================================================================ requests
    def validate(self, request: GenerationRequest) -> tuple[Any, Variant]:
        """submit()'s checks before tokenizing, cheap enough for a GUI thread: raises what
        submit would for a stopped engine, a bad parameter or an unknown model."""
        self._core.check_open()
        check_prompt_source(request)
        return normalize_params(request.params), self._resolve(request.model)

    def submit(self, request: GenerationRequest) -> LocalRequestHandle:
        params, variant = self.validate(request)
        # on this thread, with no engine lock held; a prompt too long for the context is
        # refused on its token count, before its ids become a list
        ids = variant.encoder.encode(request, variant.max_len)
        check_token_ids(ids, variant.vocab_size)
        take = {k: v for k, v in variant.info.sampling_defaults if k in params.model_defaults}
        if take:  # validated when the model was loaded
            params = dataclasses.replace(params, **take)
        if params.max_tokens_fits and len(ids) < variant.max_len:
            fit = min(params.max_tokens, variant.max_len - len(ids))
            params = dataclasses.replace(params, max_tokens=fit)
        check_context(len(ids), params.max_tokens, variant.max_len)
        seq = Sequence(request_id=request.request_id, prompt_ids=ids, params=params)
        seq.extra["out"] = output_for(variant, request, ids, params)
        handle = LocalRequestHandle(seq.request_id, variant.name, self.cancel)
        self._core.add_request(seq, variant, handle)
        return handle

    def encode(self, request: GenerationRequest) -> list[int]:
        """The prompt's token ids as submit() would compute them (callers that send one prompt
        several times encode it once and submit the ids)."""
        check_prompt_source(request)
        return self._resolve(request.model).encoder.encode(request)

    def generate(self, request: GenerationRequest, timeout: float | None = None):
        """Submit and wait: the Completion."""
        return self.submit(request).result(timeout)

    def cancel(self, request_id: str) -> None:
        self._core.abort_request(request_id)

    def set_max_waiting(self, limit: int) -> None:
        """Change the queue limit at run time (the engine is its only owner: requests already
        queued stay queued, new ones beyond the limit get QueueFullError)."""
        if int(limit) < 1:
            raise InvalidRequestError("the queue limit must be at least 1", param="max_waiting")
        with self._core.lock:
            self.config.max_waiting = int(limit)

    # ================================================================ state
    @property
    def crash_reason(self) -> str | None:
        """Why the engine loop died, or None while it is healthy (restart() revives it)."""
        return self._core.crashed

    @property
    def last_error(self) -> str | None:
        return self._core.last_error

    def stats(self) -> EngineStats:
        core = self._core
        with core.lock:
            models = tuple(core.variants)
            variants = list(core.variants.values())
            loading = core.loading[0] if core.loading else None
            waiting, running, kv_used = core.num_waiting, core.num_running, core.kv_used
        if core.crashed:
            state = "error"
        elif core.stopped or core.stopping:
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
            last_error=core.crashed or core.last_error)

    def models(self) -> list[ModelInfo]:
        with self._core.lock:
            return [v.info for v in self._core.variants.values()]

    @property
    def default_model(self) -> str | None:
        return self._core.default

    def set_default(self, name: str) -> None:
        with self._core.lock:
            if name not in self._core.variants:
                raise ModelNotFoundError(f"no loaded model named {name!r}", param="model")
            self._core.default = name

    def add_listener(self, callback: Callable[[StepStats], None]) -> Callable[[], None]:
        """Call `callback(StepStats)` on the engine thread after every step; keep it short.
        Returns a function that removes the listener."""
        core = self._core
        with core.lock:
            core.listeners = core.listeners + [callback]

        def remove() -> None:
            with core.lock:
                core.listeners = [cb for cb in core.listeners if cb is not callback]
        return remove

    # ================================================================ models
    def load(self, path: str | Path, name: str | None = None, device: str = "cpu",
             dtype: str = "float32", default: bool = False, replace: bool = False,
             force_fallback: bool = False, load_as: str = "float") -> Job:
        """Load a model folder or GGUF file on a loader thread; the Job's result() is its
        ModelInfo, its progress callbacks report the stages, and cancel() stops it.
        `load_as` "int8": a GGUF straight into INT8 weights (engine.models.load_model)."""
        name = name or Path(path).name
        return start_load(self._core, name, folder_loader(path, name, device, dtype, load_as),
                          default, replace, force_fallback)

    def add_model(self, loaded: Any, name: str | None = None, default: bool = False,
                  replace: bool = False, force_fallback: bool = False) -> Job:
        """Serve an already loaded (e.g. quantized in memory) LoadedModel under `name`."""
        return start_load(self._core, name or loaded.name, lambda job: loaded, default, replace,
                          force_fallback)

    def swap(self, name: str, path: str | Path, device: str = "cpu",
             dtype: str = "float32") -> Job:
        """Load `path` and put it in place of `name`; requests already on the old model finish
        there, new ones go to the new one."""
        return self.load(path, name=name, device=device, dtype=dtype, replace=True)

    def unload(self, name: str) -> Job:
        """Remove a variant; its running and waiting requests end with an error."""
        job = Job(f"unload {name}")
        with self._core.lock:
            self._core.check_open()
            if name not in self._core.variants:
                raise ModelNotFoundError(f"no loaded model named {name!r}", param="model")
            self._core.post(("unload", name, job))
        return job

    # ================================================================ lifecycle
    def restart(self, timeout: float = 30.0) -> None:
        """Revive a crashed engine: each model keeps its weights and gets a fresh runner, KV
        cache and scheduler, and a new loop thread serves them. A no-op while healthy."""
        self._core.restart(timeout)

    def shutdown(self, timeout: float = 5.0) -> None:
        self._core.shutdown(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # read-only views for tests and benchmarks that look inside
    @property
    def _variants(self) -> dict[str, Variant]:
        return self._core.variants

    @property
    def _thread(self):
        return self._core.thread

    # ================================================================ helpers
    def _resolve(self, model: str | None) -> Variant:
        core = self._core
        with core.lock:
            name = model or core.default
            if name is None or not core.variants:
                if core.loading:
                    raise NoModelLoadedError(f"model {core.loading[0]!r} is still loading")
                raise NoModelLoadedError("no model is loaded")
            variant = core.variants.get(name)
        if variant is None:
            raise ModelNotFoundError(
                f"model {name!r} is not loaded (loaded: {', '.join(core.variants) or 'none'})",
                param="model")
        return variant

