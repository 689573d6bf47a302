"""What LocalEngine.load runs on its loader thread: a model folder -> LoadedModel, with the
loader's errors turned into the engine's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.runtime.handle import Job
from engine.runtime.types import EngineError


class LoadCancelled(EngineError):
    pass


def folder_loader(path: str | Path, name: str, device: str,
                  dtype: str) -> Callable[[Job], Any]:
    """A producer for LocalEngine._start_load: loads `path`, reporting progress to the job
    (up to 0.75; the KV cache comes after) and stopping when the job is cancelled."""

    def produce(job: Job) -> Any:
        from engine.models import LoadCancelled as LoaderCancelled
        from engine.models import ModelFolderError, ModelLoadError, load_model

        try:
            return load_model(path, device=device, dtype=dtype, name=name,
                              progress=lambda f, what: job._report(0.75 * f, what),
                              cancel=job._cancelled)
        except LoaderCancelled:
            raise LoadCancelled(f"loading {name} was cancelled") from None
        except (ModelFolderError, ModelLoadError) as exc:
            raise EngineError(str(exc)) from None

    return produce
