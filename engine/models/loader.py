"""Load a validated Hugging Face model folder onto a device, in a dtype.

Validation runs first (engine.models.folder), so a broken folder fails with one plain sentence
naming the file instead of a transformers traceback. Loading reports coarse progress and can be
cancelled between stages. Nothing here touches the network: a model id that is not a folder
is refused unless the caller explicitly allows a hub download.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime.types import Cancelled
from .folder import (
    ModelFolderError,
    ModelFolderReport,
    validate_model_folder,
)
from .memory import estimate_memory, fits_message, planned_kv_dtype

ProgressFn = Callable[[float, str], None]

# transformers' from_pretrained patches module-global state while it builds a model (empty-weight
# init on the meta device), so two loads on two threads corrupt each other ("Cannot copy out of
# meta tensor"). Loads are rare and slow anyway: one at a time per process.
MODEL_BUILD_LOCK = threading.Lock()


LOAD_AS = ("float", "int8")  # the forms a model's weights can be loaded in (--load-as)

# the engine's one cancellation exception, under the name loaders have always used
LoadCancelled = Cancelled


class ModelLoadError(Exception):
    """Loading failed for a reason that is not the folder's layout (memory, device, dtype)."""


@dataclass
class LoadedModel:
    """A model ready for the engine: torch module in eval mode plus its tokenizer."""

    name: str
    path: Path
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    config: Any
    device: str
    dtype: str  # "float32", "bfloat16", "float16"
    architecture: str
    quantization: str | None = None
    report: ModelFolderReport | None = None
    # the folder that holds the model's Hugging Face files (config, tokenizer): `path` itself,
    # or the converted cache entry of a GGUF file
    files_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.files_dir is None:
            self.files_dir = self.path


def resolve_model_path(spec: str | Path, allow_download: bool = False,
                       cache_dir: str | Path | None = None) -> Path:
    """A local folder as is; a hub id ("org/name") only when the user asked for a download."""
    path = Path(spec).expanduser()
    if path.exists() or not allow_download:
        return path
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - shipped with transformers
        raise ModelLoadError(f"cannot download {spec}: huggingface_hub is not installed") from exc
    try:
        return Path(snapshot_download(repo_id=str(spec), cache_dir=cache_dir))
    except Exception as exc:  # noqa: BLE001 - network errors come in many types; report one line
        raise ModelLoadError(f"download of {spec} failed: {str(exc).splitlines()[0]}") from None


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise LoadCancelled("loading cancelled")


def load_steps(progress: ProgressFn | None,
               cancel: threading.Event | None) -> Callable[[float, str], None]:
    """step(fraction, what) for a loader: LoadCancelled once `cancel` is set, else reported."""
    def step(fraction: float, what: str) -> None:
        _check(cancel)
        if progress is not None:
            progress(fraction, what)
    return step


def load_model(path: str | Path, device: str = "cpu", dtype: str = "float32",
               name: str | None = None, progress: ProgressFn | None = None,
               cancel: threading.Event | None = None, check_memory: bool = True,
               context: int | None = None, load_as: str = "float") -> LoadedModel:
    """Validate, check memory, then load. Raises ModelFolderError (folder problems),
    ModelLoadError (memory / device / dtype) or LoadCancelled. `load_as`: "float" (weights in
    `dtype`) or "int8" (a GGUF file straight into INT8 weights, engine.quant.gguf_load;
    `dtype` is then the float parts' and the activations')."""
    from ..devices import get_device, import_torch

    step = load_steps(progress, cancel)
    path = Path(path).expanduser()
    step(0.02, "checking the folder")
    report = validate_model_folder(path)
    if load_as not in LOAD_AS:
        raise ModelLoadError(f"unknown load form {load_as!r}: choose {' or '.join(LOAD_AS)}")
    if load_as == "int8":
        return _load_gguf_int8(report, device=device, dtype=dtype, name=name, progress=progress,
                               cancel=cancel, check_memory=check_memory, context=context)
    if report.source_format == "gguf":
        return _load_gguf(report, device=device, dtype=dtype, name=name, progress=progress,
                          cancel=cancel, check_memory=check_memory, context=context)
    try:
        dev = get_device(device)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ModelLoadError(f"unsupported dtype {dtype!r}: choose float32, float16 or bfloat16")
    if check_memory:
        est = estimate_memory(report, dtype, context=context or min(report.max_context or 2048, 4096),
                              kv_dtype=planned_kv_dtype(dtype, dev.torch_device))
        msg = fits_message(est, dev.free_memory, dev.label)
        if msg:
            raise ModelLoadError(msg)

    if report.quantization:
        step(0.1, "loading the quantized checkpoint")
        from .formats import lookup

        load_quantized = lookup("int8", "load")  # engine.quant.io, found without importing it
        return load_quantized(path, device=dev.torch_device, dtype=dtype, name=name,
                              progress=progress, cancel=cancel)

    torch = import_torch()
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    step(0.1, "loading the tokenizer")
    try:
        tokenizer = load_tokenizer(path)
    except Exception as exc:  # noqa: BLE001 - tokenizers raise many types for a bad file
        raise ModelFolderError(_single_problem(report, "tokenizer", exc)) from None
    step(0.25, "loading the weights")
    try:
        with MODEL_BUILD_LOCK:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype))
    except Exception as exc:  # noqa: BLE001 - reported as a folder problem, in one line
        raise ModelFolderError(_single_problem(report, "weights", exc)) from None
    step(0.85, f"moving to {dev.torch_device}")
    model.to(dev.torch_device).eval()
    step(1.0, "ready")
    arch = (model.config.architectures or [type(model).__name__])[0]
    return LoadedModel(name=name or path.name, path=path, model=model, tokenizer=tokenizer,
                       config=model.config, device=dev.torch_device, dtype=dtype,
                       architecture=arch, report=report)


def _load_gguf_int8(report: ModelFolderReport, *, device: str, dtype: str, name: str | None,
                    progress: ProgressFn | None, cancel: threading.Event | None,
                    check_memory: bool, context: int | None) -> LoadedModel:
    """A GGUF file straight into INT8 weights (no float copy, no conversion cache); the memory
    plan comes from its tensor table before anything is read."""
    from ..devices import get_device
    from .formats import lookup
    from .memory import GGUF_INT8

    if report.source_format != "gguf":
        raise ModelLoadError(f"{report.path}: loading as int8 reads GGUF files; quantize a "
                             "Hugging Face folder with `npu-console quantize` instead")
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ModelLoadError(f"unsupported dtype {dtype!r}: choose float32, float16 or bfloat16")
    try:
        dev = get_device(device)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    if check_memory:
        est = estimate_memory(report, dtype, context=context or min(report.max_context or 2048,
                                                                    4096),
                              quantization=GGUF_INT8,
                              kv_dtype=planned_kv_dtype(dtype, dev.torch_device))
        msg = fits_message(est, dev.free_memory, dev.label)
        if msg:
            raise ModelLoadError(msg)
    loaded = lookup("gguf-int8", "load")(report.path, device=dev.torch_device, dtype=dtype,
                                         name=name, progress=progress, cancel=cancel)
    loaded.report = report
    return loaded


def _load_gguf(report: ModelFolderReport, *, device: str, dtype: str, name: str | None,
               progress: ProgressFn | None, cancel: threading.Event | None, check_memory: bool,
               context: int | None) -> LoadedModel:
    """A GGUF file: convert it once into the cache (engine.models.gguf_convert), then load that
    folder like any other. The model keeps the GGUF's name, path and header report."""
    from .gguf_convert import (
        ConvertError,
        converted_folder,
        ensure_converted,
    )

    gguf = report.path
    cached = converted_folder(gguf)
    share = 0.0 if cached is not None else 0.7  # of the progress bar, for the conversion

    def part(lo: float, hi: float) -> ProgressFn:
        def report_(fraction: float, what: str) -> None:
            _check(cancel)
            if progress is not None:
                progress(lo + (hi - lo) * fraction, what)
        return report_

    if cached is None:
        try:
            if check_memory:  # from the header, before a child dequantizes anything
                from .gguf import cached_header
                from .gguf_convert import preflight

                preflight(gguf, cached_header(gguf))
            cached = ensure_converted(gguf, progress=part(0.02, share), cancel=cancel)
        except ConvertError as exc:
            raise ModelLoadError(str(exc)) from None
    loaded = load_model(cached, device=device, dtype=dtype, name=name or gguf.stem,
                        progress=part(share, 1.0), cancel=cancel, check_memory=check_memory,
                        context=context)
    loaded.path, loaded.report, loaded.files_dir = gguf, report, cached
    return loaded


GENERIC_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(path: Path) -> Any:
    """The folder's tokenizer. A folder that declares a plain tokenizer.json (tokenizer_class
    PreTrainedTokenizerFast / TokenizersBackend) gets exactly that: transformers 5 would
    otherwise rebuild it as the model type's own class (a qwen2 folder as Qwen2Tokenizer's
    byte-level BPE), which tokenizes a custom vocabulary into nothing."""
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    declared = None
    cfg_file = Path(path) / "tokenizer_config.json"
    if cfg_file.is_file() and (Path(path) / "tokenizer.json").is_file():
        try:
            declared = json.loads(cfg_file.read_text(encoding="utf-8")).get("tokenizer_class")
        except (OSError, ValueError, AttributeError):
            declared = None  # AutoTokenizer reports the broken file
    if declared in GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _single_problem(report: ModelFolderReport, what: str, exc: Exception) -> ModelFolderReport:
    from .folder import Problem

    files = report.tokenizer_files if what == "tokenizer" else report.weight_files
    where = files[0] if files else "."
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    report.problems.append(Problem(where, f"{what} could not be read: {reason}"))
    return report
