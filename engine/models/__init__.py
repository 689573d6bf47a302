"""Model folders: inspect and validate, estimate memory, load, remember recent ones."""

from .folder import (
    BATCHED_ARCHITECTURES,
    ModelFolderError,
    ModelFolderReport,
    Problem,
    inspect_model_folder,
    validate_model_folder,
)
from .loader import (
    LoadCancelled,
    LoadedModel,
    ModelLoadError,
    load_model,
    resolve_model_path,
)
from .memory import (
    GGUF_INT8,
    MemoryEstimate,
    estimate_memory,
    fits_message,
    format_bytes,
    planned_kv_dtype,
)
from .recent import add_recent_model, forget_recent_model, recent_models

__all__ = [
    "BATCHED_ARCHITECTURES", "GGUF_INT8", "LoadCancelled", "LoadedModel", "MemoryEstimate", "ModelFolderError",
    "ModelFolderReport", "ModelLoadError", "Problem", "add_recent_model", "estimate_memory",
    "fits_message", "forget_recent_model", "format_bytes", "inspect_model_folder", "load_model",
    "planned_kv_dtype", "recent_models", "resolve_model_path", "validate_model_folder",
]
