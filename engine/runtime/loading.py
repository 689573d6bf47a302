"""Model loading into the engine, one path (LocalEngine.load / add_model / swap; the console's
EngineHost uses load): a loader thread produces a LoadedModel (engine.models.load_model, or one
the caller loaded: the CLI loads on a short-lived thread, engine.runtime.threads, and hands it
to add_model), the variant (runner, KV cache, scheduler) is built there too, and the engine
thread adds it. The Job carries progress and cancel; a cancelled load raises
engine.runtime.types.Cancelled."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .handle import Job
from .types import Cancelled, EngineError, InvalidRequestError
from .variant import build_variant


def folder_loader(path: str | Path, name: str, device: str,
                  dtype: str, load_as: str = "float") -> Callable[[Job], Any]:
    """A producer for start_load: loads `path` (a folder or a GGUF file), reporting progress to
    the job (up to 0.75; the KV cache comes after) and stopping when the job is cancelled."""

    def produce(job: Job) -> Any:
        from ..models import ModelFolderError, ModelLoadError, load_model

        try:
            return load_model(path, device=device, dtype=dtype, name=name,
                              progress=lambda f, what: job._report(0.75 * f, what),
                              cancel=job._cancelled, load_as=load_as)
        except Cancelled:
            raise Cancelled(f"loading {name} was cancelled") from None
        except (ModelFolderError, ModelLoadError) as exc:
            raise EngineError(str(exc)) from None

    return produce


def start_load(core: Any, name: str, produce: Callable[[Job], Any], default: bool,
               replace: bool, force_fallback: bool) -> Job:
    """Run `produce(job)` and build its variant on a loader thread, then post it to the
    engine thread (`core`: engine.runtime.core.EngineCore). The Job's result is its ModelInfo."""
    core.check_open()
    job = Job(f"load {name}")
    with core.lock:
        if name in core.variants and not replace:
            raise InvalidRequestError(f"a model named {name!r} is already loaded; unload it "
                                      "or use swap", param="name")
        if name in core.loading:
            raise InvalidRequestError(f"{name!r} is already loading", param="name")
        core.loading.append(name)

    def work() -> None:
        try:
            loaded = produce(job)
            if job.cancelled:
                raise Cancelled(f"loading {name} was cancelled")
            job._report(0.8, "allocating the KV cache")
            variant = build_variant(loaded, name, core.config, force_fallback=force_fallback)
            if job.cancelled:
                raise Cancelled(f"loading {name} was cancelled")
            with core.lock:
                core.check_open()
                core.post(("add", variant, job, default, replace))
        except BaseException as exc:  # noqa: BLE001 - reported through the job
            with core.lock:
                if name in core.loading:
                    core.loading.remove(name)
            err = exc if isinstance(exc, EngineError) else EngineError(
                f"could not load {name}: {exc}")
            core.last_error = err.message
            job._finish(error=err)

    threading.Thread(target=work, name=f"load-{name}", daemon=True).start()
    return job
