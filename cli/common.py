"""Arguments and model loading shared by the commands that run a model."""

from __future__ import annotations

import sys
from pathlib import Path

from .errors import CliError


def add_sampling_args(p, max_tokens: int, temperature: float, top_p: float) -> None:
    """The sampling flags `generate` and `chat` share; each command keeps its own defaults."""
    p.add_argument("--max-tokens", type=int, default=max_tokens)
    p.add_argument("--temperature", type=float, default=temperature,
                   help="0 = greedy" + (" (default)" if temperature == 0 else ""))
    p.add_argument("--top-p", type=float, default=top_p)
    p.add_argument("--seed", type=int, default=None)


def add_model_args(p, device: bool = True) -> None:
    from ..engine.paths import DEMO_MODEL_DIR

    p.add_argument("--model", default=str(DEMO_MODEL_DIR),
                   help="model folder (Hugging Face layout); default: the built-in demo model")
    p.add_argument("--download", action="store_true",
                   help="if --model is a hub id rather than a folder, download it first (needs network)")
    if device:
        p.add_argument("--device", default="auto", help="auto, cpu, npu[:N] or cuda[:N]")
        p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
        p.add_argument("--load-as", default="float", choices=["float", "int8"],
                       help="float: weights in --dtype (a GGUF is converted to a cached float "
                            "folder first); int8: a GGUF file straight into INT8 weights, "
                            "Q8_0 exactly, other types rounded per group of 32, with no float "
                            "copy (--dtype is then the activations')")


def add_reasoning_arg(p) -> None:
    from ..engine.runtime.reasoning import PARSER_CHOICES

    p.add_argument("--reasoning-parser", default="auto", choices=PARSER_CHOICES,
                   help="how a reasoning model's chat replies are split into reasoning "
                        "(<think> ... </think>) and answer: auto (chosen from the chat "
                        "template), deepseek_r1, qwen3, or none (raw text, tags included)")


def resolve_device_dtype(args) -> tuple[str, str]:
    from ..engine.devices import default_dtype, get_device

    try:
        dev = get_device(args.device)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    dtype = default_dtype(dev) if args.dtype == "auto" else args.dtype
    return dev.torch_device, dtype


def load_for_cli(args, quiet: bool = False):
    """Load --model with plain-word errors; progress goes to stderr."""
    from ..engine.models import (
        LoadCancelled,
        ModelFolderError,
        ModelLoadError,
        add_recent_model,
        load_model,
    )
    from ..engine.models.loader import resolve_model_path
    from ..engine.runtime.threads import run_in_fresh_thread

    device, dtype = resolve_device_dtype(args)
    try:
        path = resolve_model_path(args.model, allow_download=getattr(args, "download", False))
        if not Path(path).exists() and "/" in str(args.model) and not str(args.model).startswith(("/", ".")):
            raise CliError(f"{args.model}: no such folder; to fetch it from the hub add --download")

        def progress(fraction: float, what: str) -> None:
            if not quiet and sys.stderr.isatty():
                print(f"\r[{fraction * 100:3.0f}%] {what:<40}", end="", file=sys.stderr, flush=True)

        # on a thread that ends: the main thread must not keep an OpenMP team beside the
        # engine's (engine.runtime.threads)
        loaded = run_in_fresh_thread(load_model, path, device=device, dtype=dtype,
                                     progress=progress, name="load",
                                     load_as=getattr(args, "load_as", "float"))
        if not quiet and sys.stderr.isatty():
            print("\r" + " " * 50 + "\r", end="", file=sys.stderr)
    except (ModelFolderError, ModelLoadError, LoadCancelled) as exc:
        # a path that does not exist is a usage error (2); a model that exists but cannot be
        # loaded (a corrupt or unsupported file) is a failure of the run (1)
        raise CliError(str(exc), code=1 if Path(path).exists() else 2) from None
    add_recent_model(path)
    return loaded
