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

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from npu_console.engine.models import gguf
from npu_console.engine.runtime.types import Cancelled

ProgressFn = Callable[[float, str], None]
DONE = "meta.json"  # written last: a folder without it is not a finished conversion


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
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
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
    """The finished cache entry of this GGUF, or None."""
    entry = gguf.entry_dir(path)
    return entry if (entry / DONE).is_file() else None


def ensure_converted(path: Path, progress: ProgressFn | None = None,
                     cancel: threading.Event | None = None) -> Path:
    """The cached Hugging Face folder of `path`, converting it first when needed."""
    done = converted_folder(path)
    if done is not None:
        return done
    final = gguf.entry_dir(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TQDM_DISABLE="1")
    proc = subprocess.Popen([sys.executable, "-m", "npu_console.engine.models.gguf_convert", str(path),
                             str(tmp)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, text=True, env=env)
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
            time.sleep(0.05)
        errors = [ln.strip()[6:] for ln in lines if ln.startswith("error ")]
        if proc.returncode != 0 or not (tmp / DONE).is_file():
            why = errors[0] if errors else f"the converter exited with status {proc.returncode}"
            raise ConvertError(f"{path}: cannot convert: {why}")
        try:
            os.rename(tmp, final)
        except OSError:
            if converted_folder(path) is None:  # not a concurrent conversion that won
                raise
        return final
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
