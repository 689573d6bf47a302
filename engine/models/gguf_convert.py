"""Turn a GGUF file into a cached Hugging Face folder, once, in a child process.

transformers' own GGUF support does the work (dequantized float weights, tokenizer and chat
template from the metadata); we only save what it built as safetensors + config + tokenizer
files, so every later load of the same file is an ordinary folder load.

Why a child process: dequantizing takes ~20 s for a 135M model on 2 cores and happens inside one
transformers call that cannot be interrupted. In a child it can be cancelled at once (the child
is killed), a crash in the converter never takes the engine or the window down, and its peak
memory (GGUF and float copies) goes back to the system when it exits. The child writes to a
temporary folder that is renamed into place only when complete, so a cancelled or failed
conversion leaves no cache entry behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..runtime.types import Cancelled
from . import gguf

ProgressFn = Callable[[float, str], None]
DONE = "meta.json"  # written last: a folder without it is not a finished conversion
GIB = 1024 ** 3
# limits of the conversion (issue 35); each can be set in the environment
TIMEOUT_ENV = "NPU_CONSOLE_GGUF_TIMEOUT_S"  # the child is killed after this (default 3600)
AS_ENV = "NPU_CONSOLE_GGUF_AS_GB"  # its address space (default: what it needs + 16 GiB)
CACHE_ENV = "NPU_CONSOLE_GGUF_CACHE_GB"  # converted folders kept (default 20 GiB)
# the interpreter, torch and their thread stacks reserve address space they never touch
AS_HEADROOM = 16 * GIB


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def timeout_s() -> float:
    return _env_float(TIMEOUT_ENV, 3600.0)


def cache_limit_bytes() -> int:
    return int(_env_float(CACHE_ENV, 20.0) * GIB)


def float_bytes(header: dict) -> int:
    """The size of the float weights the conversion writes, from the GGUF header alone."""
    per = {"float32": 4, "float16": 2, "bfloat16": 2}[_save_dtype(header.get("tensor_types")
                                                                   or {})]
    return int(header.get("num_parameters") or 0) * per


def needs(header: dict) -> tuple[int, int]:
    """(memory, disk) bytes a conversion needs: the GGUF mapped, the float model and its
    copy being saved in memory; the float folder on disk."""
    floats = float_bytes(header)
    return int(header.get("file_bytes") or 0) + 2 * floats, floats + 64 * 1024 ** 2


def preflight(path: Path, header: dict) -> None:
    """ConvertError before the child starts when memory or disk is short (the same rule as
    for folders: refuse with the numbers rather than let the system swap or fill up)."""
    import psutil

    memory, disk = needs(header)
    free_mem = psutil.virtual_memory().available
    if memory > free_mem:
        raise ConvertError(f"{path.name}: converting needs about {memory / GIB:.1f} GiB of "
                           f"memory ({float_bytes(header) / GIB:.1f} GiB of float weights); "
                           f"{free_mem / GIB:.1f} GiB is available")
    root = gguf.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    free_disk = shutil.disk_usage(root).free
    if disk > free_disk:
        raise ConvertError(f"{path.name}: converting needs about {disk / GIB:.1f} GiB on disk "
                           f"in {root}; {free_disk / GIB:.1f} GiB is free")


def _address_space_limit(header: dict) -> int:
    gb = _env_float(AS_ENV, 0.0)
    return int(gb * GIB) if gb else needs(header)[0] + AS_HEADROOM


def _limit_child(limit: int) -> Callable[[], None]:
    import resource  # here, not in the child: it runs only setrlimit between fork and exec

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def cache_entries() -> list[tuple[Path, int, float]]:
    """(folder, bytes, last used) of each finished conversion."""
    out = []
    root = gguf.cache_root()
    if not root.is_dir():
        return out
    for entry in root.iterdir():
        if entry.name.startswith(".") or not (entry / DONE).is_file():
            continue
        size = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
        out.append((entry, size, (entry / DONE).stat().st_mtime))
    return out


def evict(limit: int | None = None, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used conversions until the cache is within `limit` bytes
    (never `keep`, the one just made or loaded); returns the folders removed."""
    limit = cache_limit_bytes() if limit is None else limit
    entries = sorted(cache_entries(), key=lambda e: e[2])
    total = sum(size for _, size, _ in entries)
    removed = []
    for entry, size, _ in entries:
        if total <= limit:
            break
        if keep is not None and entry == keep:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        removed.append(entry)
    return removed


def _save_dtype(tensor_types: dict) -> str:
    """The float type that holds the dequantized weights exactly: F16/BF16 files keep their
    type; block-quantized weights (scale x integer) need float32."""
    kinds = set(tensor_types)
    if kinds == {"F16"}:
        return "float16"
    if kinds == {"BF16"}:
        return "bfloat16"
    return "float32"


def _hook_progress(emit: Callable[[float, str], None]) -> None:
    """Report transformers' per-tensor dequantization loop (its tqdm) as progress lines."""
    try:
        import transformers.modeling_gguf_pytorch_utils as conv
    except ImportError:  # pragma: no cover - coarse progress only
        return

    def tracked(iterable, *args, **kwargs):
        items = list(iterable)
        step = max(1, len(items) // 40)
        for i, item in enumerate(items):
            if i % step == 0:
                emit(0.15 + 0.7 * i / max(1, len(items)), "dequantizing the weights")
            yield item

    conv.tqdm = tracked


def convert(src: Path, dst: Path, emit: Callable[[float, str], None]) -> None:
    """Child side: load `src` through transformers and write a Hugging Face folder to `dst`."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    header = gguf.read_header(src)
    emit(0.02, "reading the tokenizer")
    own = gguf.kept_tokenizer(src)  # an INT8 load built it already: read, not rebuilt
    tokenizer = (AutoTokenizer.from_pretrained(str(own)) if own is not None else
                 AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name))
    _hook_progress(emit)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name,
                                                 dtype=torch.float32)
    emit(0.88, "saving the converted weights")
    dtype = getattr(torch, _save_dtype(header["tensor_types"]))
    config = model.config
    config.architectures = [type(model).__name__]
    config.dtype = dtype
    state, seen = {}, {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and getattr(config, "tie_word_embeddings", False):
            continue  # transformers re-ties it on load
        key = (t.data_ptr(), tuple(t.shape))
        state[name] = t.detach().to(dtype).contiguous() if key not in seen else t.clone().to(dtype)
        seen[key] = name
    dst.mkdir(parents=True, exist_ok=True)
    save_file(state, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(dst))
    # the saved weights are plain floats: drop transformers' note that they came from a GGUF
    cfg = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    for key in ("quantization_config", "_model_name_or_path"):
        cfg.pop(key, None)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    if model.generation_config is not None:
        model.generation_config.save_pretrained(str(dst))
    tokenizer.save_pretrained(str(dst))
    emit(0.98, "writing the cache entry")
    meta = {"source": str(src), "header": header, "saved_dtype": str(dtype).split(".")[-1],
            "transformers": transformers.__version__, "created": time.time()}
    (dst / DONE).write_text(json.dumps(meta, indent=1), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """`python -m npu_console.engine.models.gguf_convert SRC DST`: progress and errors as lines on stdout."""
    src, dst = (Path(a) for a in (argv or sys.argv[1:]))

    def emit(fraction: float, what: str) -> None:
        print(f"progress {fraction:.3f} {what}", flush=True)

    try:
        convert(src, dst, emit)
    except Exception as exc:  # noqa: BLE001 - one line for the parent, not a traceback
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error {reason}", flush=True)
        return 1
    return 0


class ConvertError(Exception):
    """The conversion failed; one line naming the file."""


def converted_folder(path: Path) -> Path | None:
    """The finished cache entry of this GGUF, or None (also for one this user does not own
    alone: it is converted again)."""
    entry = gguf.entry_dir(path)
    if not (entry / DONE).is_file() or gguf.cache_problem() or gguf.entry_untrusted(entry):
        return None
    with contextlib.suppress(OSError):
        os.utime(entry / DONE)  # last used: what eviction goes by
    return entry


def ensure_converted(path: Path, progress: ProgressFn | None = None,
                     cancel: threading.Event | None = None) -> Path:
    """The cached Hugging Face folder of `path`, converting it first when needed."""
    done = converted_folder(path)
    if done is not None:
        return done
    problem = gguf.cache_problem()
    if problem:
        raise ConvertError(f"{path}: the GGUF conversion cache is refused: {problem}")
    final = gguf.entry_dir(path)
    if final.exists():  # an entry this user does not trust alone: made again
        shutil.rmtree(final, ignore_errors=True)
    header = gguf.cached_header(path)
    limit = _address_space_limit(header)
    deadline = time.monotonic() + timeout_s()
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TQDM_DISABLE="1")
    proc = subprocess.Popen([sys.executable, "-m", "npu_console.engine.models.gguf_convert", str(path),
                             str(tmp)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, text=True, env=env,
                            # only setrlimit runs between fork and exec (no locks taken)
                            preexec_fn=_limit_child(limit) if os.name == "posix" else None)  # noqa: PLW1509
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True, name="gguf-convert-output")
    reader.start()
    seen = 0
    try:
        while True:
            if cancel is not None and cancel.is_set():
                proc.kill()
                proc.wait()
                raise Cancelled(f"converting {path.name} was cancelled")
            while seen < len(lines):
                kind, _, rest = lines[seen].strip().partition(" ")
                seen += 1
                if kind == "progress" and progress is not None:
                    frac, _, what = rest.partition(" ")
                    progress(float(frac), what)
            if proc.poll() is not None:
                reader.join(timeout=5)
                break
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise ConvertError(f"{path}: cannot convert: it did not finish within "
                                   f"{timeout_s():g} s ({TIMEOUT_ENV})")
            time.sleep(0.05)
        errors = [ln.strip()[6:] for ln in lines if ln.startswith("error ")]
        if proc.returncode != 0 or not (tmp / DONE).is_file():
            why = errors[0] if errors else f"the converter exited with status {proc.returncode}"
            if proc.returncode != 0 and not errors:
                why += (f" (its address space is limited to {limit / GIB:.1f} GiB; "
                        f"raise it with {AS_ENV})")
            raise ConvertError(f"{path}: cannot convert: {why}")
        try:
            os.rename(tmp, final)
        except OSError:
            if converted_folder(path) is None:  # not a concurrent conversion that won
                raise
        evict(keep=final)
        return final
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
