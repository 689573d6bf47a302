"""ReplicaPool: one engine replica per accelerator behind a single EngineClient.

A host with several NPUs or GPUs serves one model copy per device; each request goes to the
replica with the least work (running + waiting), so the devices fill evenly. The pool counts
the requests it has handed to each replica and not yet seen finish, because a replica's own
stats lag behind a burst of submits by a step. Every replica's stats stay visible for the UI.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime.types import (
    EngineClient,
    EngineError,
    EngineStats,
    EngineStoppedError,
    FinishEvent,
    GenerationRequest,
    ModelInfo,
    ModelNotFoundError,
    QueueFullError,
    RequestHandle,
)


@dataclass(frozen=True)
class ReplicaStats:
    label: str  # the device, e.g. "npu:0", or a name given to the pool
    stats: EngineStats
    outstanding: int  # handed to this replica by the pool and not finished yet
    submitted: int  # all requests the pool routed here


class _PoolMetrics:
    """Counters summed over replicas, for the /metrics exporter (same attributes as
    engine.runtime.metrics.EngineMetrics offers it)."""

    def __init__(self, pool: ReplicaPool):
        self._pool = pool

    def _sum(self, attr: str) -> float:
        return sum(getattr(getattr(r, "metrics", None), attr, 0) or 0
                   for r in self._pool.replicas)

    @property
    def prompt_tokens_total(self) -> float:
        return self._sum("prompt_tokens_total")

    @property
    def generation_tokens_total(self) -> float:
        return self._sum("generation_tokens_total")

    @property
    def steps(self) -> float:
        return self._sum("steps")


class ReplicaPool:
    """EngineClient over several replicas (LocalEngine per device, or RemoteEngines)."""

    def __init__(self, replicas: Sequence[EngineClient], labels: Sequence[str] | None = None):
        if not replicas:
            raise ValueError("a replica pool needs at least one replica")
        self.replicas = list(replicas)
        self.labels = list(labels) if labels else [f"replica-{i}" for i in range(len(replicas))]
        if len(self.labels) != len(self.replicas):
            raise ValueError("one label per replica")
        self._lock = threading.Lock()
        self._outstanding = [0] * len(self.replicas)
        self._submitted = [0] * len(self.replicas)
        self._where: dict[str, int] = {}  # request id -> replica index
        self._rr = 0  # rotates ties
        self.metrics = _PoolMetrics(self)

    @classmethod
    def local(cls, devices: Sequence[str], config: Any = None) -> ReplicaPool:
        """One LocalEngine per device ("npu:0", "npu:1", ... or "cpu" several times)."""
        from dataclasses import replace

        from ..runtime import EngineConfig, LocalEngine

        base = config or EngineConfig()
        engines = [LocalEngine(replace(base)) for _ in devices]
        return cls(engines, labels=list(devices))

    def load(self, path: str | Path, name: str | None = None, dtype: str = "float32",
             default: bool = False, timeout: float | None = None) -> list[ModelInfo]:
        """Load the model on every replica's own device and wait; one ModelInfo per replica.

        Replicas load one after another: two transformers loads at once in one process can
        collide (meta-tensor initialisation is not thread-safe), and the disk is shared anyway.
        """
        infos = []
        for r, label in zip(self.replicas, self.labels):
            device = label if label == "cpu" or ":" in label else "cpu"
            infos.append(r.load(path, name=name, device=device, dtype=dtype,
                                default=default).result(timeout))
        return infos

    # ---------------------------------------------------------------- routing
    def _load_of(self, i: int) -> int:
        s = self.replicas[i].stats()
        return max(s.running + s.waiting, self._outstanding[i])

    def _order(self, model: str | None) -> list[int]:
        n = len(self.replicas)
        candidates = []
        for i in range(n):
            served = self.replicas[i].stats().models
            # an empty list means "not known yet" (a remote replica before its first poll)
            if model is not None and served and model not in served:
                continue
            candidates.append(i)
        start = self._rr
        self._rr = (self._rr + 1) % n
        return sorted(candidates, key=lambda i: (self._load_of(i), (i - start) % n))

    def submit(self, request: GenerationRequest) -> RequestHandle:
        last_exc: EngineError | None = None
        with self._lock:
            order = self._order(request.model)
            if not order:
                loaded = sorted({m for r in self.replicas for m in r.stats().models})
                raise ModelNotFoundError(f"model {request.model!r} is not loaded on any replica "
                                         f"(loaded: {', '.join(loaded) or 'none'})",
                                         param="model")
        for i in order:
            with self._lock:
                self._outstanding[i] += 1  # claim the slot before the (slower) submit
            try:
                handle = self.replicas[i].submit(request)
            except (QueueFullError, EngineStoppedError) as exc:
                with self._lock:
                    self._outstanding[i] -= 1
                last_exc = exc  # try the next replica
                continue
            except BaseException:
                with self._lock:
                    self._outstanding[i] -= 1
                raise
            with self._lock:
                self._where[handle.request_id] = i
                self._submitted[i] += 1
            self._track(handle, i)
            return handle
        assert last_exc is not None
        raise last_exc

    def _track(self, handle: Any, i: int) -> None:
        def done(events: list) -> None:
            if any(isinstance(e, FinishEvent) for e in events):
                with self._lock:
                    if self._where.pop(handle.request_id, None) is not None:
                        self._outstanding[i] -= 1

        add = getattr(handle, "add_callback", None)
        if add is not None:
            add(done)

    def replica_of(self, request_id: str) -> str | None:
        with self._lock:
            i = self._where.get(request_id)
        return None if i is None else self.labels[i]

    # ---------------------------------------------------------------- the rest of the contract
    def cancel(self, request_id: str) -> None:
        with self._lock:
            i = self._where.get(request_id)
        if i is not None:
            self.replicas[i].cancel(request_id)

    def replica_stats(self) -> list[ReplicaStats]:
        with self._lock:
            outstanding, submitted = list(self._outstanding), list(self._submitted)
        return [ReplicaStats(label, r.stats(), outstanding[i], submitted[i])
                for i, (r, label) in enumerate(zip(self.replicas, self.labels))]

    def stats(self) -> EngineStats:
        parts = [r.stats() for r in self.replicas]
        states = {s.state for s in parts}
        state = ("ready" if "ready" in states else "loading" if "loading" in states
                 else "error" if "error" in states else parts[0].state)
        models: list[str] = []
        for s in parts:
            models.extend(m for m in s.models if m not in models)
        gen = sum(s.generation_tokens_per_s for s in parts)
        prompt = sum(s.prompt_tokens_per_s for s in parts)
        weights = [s.prompt_tokens_per_s for s in parts]
        hit = (sum(s.prefix_hit_rate * w for s, w in zip(parts, weights)) / sum(weights)
               if sum(weights) else 0.0)
        return EngineStats(
            state=state, running=sum(s.running for s in parts),
            waiting=sum(s.waiting for s in parts),
            max_running=sum(s.max_running for s in parts),
            max_waiting=sum(s.max_waiting for s in parts),
            kv_used_tokens=sum(s.kv_used_tokens for s in parts),
            kv_total_tokens=sum(s.kv_total_tokens for s in parts), prefix_hit_rate=hit,
            prompt_tokens_per_s=prompt, generation_tokens_per_s=gen,
            steps=sum(s.steps for s in parts),
            requests_finished=sum(s.requests_finished for s in parts),
            requests_failed=sum(s.requests_failed for s in parts), models=tuple(models),
            loading=next((s.loading for s in parts if s.loading), None),
            last_error=next((s.last_error for s in parts if s.last_error), None))

    def models(self) -> list[ModelInfo]:
        seen: dict[str, ModelInfo] = {}
        for r in self.replicas:
            for m in r.models():
                seen.setdefault(m.name, m)
        return list(seen.values())

    def replica_models(self) -> list[tuple[str, list[ModelInfo]]]:
        return [(label, r.models()) for r, label in zip(self.replicas, self.labels)]

    def add_listener(self, callback: Callable) -> Callable[[], None]:
        """Engine-step listener on every replica that has them (each calls from its own thread)."""
        removers = [r.add_listener(callback) for r in self.replicas if hasattr(r, "add_listener")]

        def remove() -> None:
            for rm in removers:
                rm()
        return remove

    def shutdown(self, timeout: float = 5.0) -> None:
        for r in self.replicas:
            r.shutdown(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
