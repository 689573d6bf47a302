"""The command that serves a console-quantized export on another engine.

`npu-console quantize --format msmodelslim` writes msModelSlim's layout (quant_model_weight*.
safetensors + quant_model_description*.json), which vllm-ascend loads with `--quantization
ascend`; `--format compressed-tensors` writes config.json's quantization_config with
quant_method "compressed-tensors", which vLLM detects by itself. A float folder serves as is.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

TARGETS = ("vllm-ascend", "vllm", "npu-console")


class LaunchError(ValueError):
    """The export cannot be served by the asked target; the message says what would work."""


def export_format(export_dir: str | Path) -> str:
    """"msmodelslim", "compressed-tensors" or "float" (an unquantized HF folder)."""
    d = Path(export_dir)
    if not (d / "config.json").is_file():
        raise LaunchError(f"{d}: not a model folder (no config.json)")
    if any(d.glob("quant_model_description*.json")):
        return "msmodelslim"
    try:
        cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LaunchError(f"{d}/config.json is unreadable: {exc}") from None
    qc = cfg.get("quantization_config") or cfg.get("compression_config") or {}
    method = str(qc.get("quant_method") or qc.get("format") or "").lower()
    if method in ("compressed-tensors", "compressed_tensors"):
        return "compressed-tensors"
    if qc:
        raise LaunchError(f"{d}: quantization {method or 'of an unknown kind'} is neither an "
                          "msModelSlim nor a compressed-tensors export")
    return "float"


def launch_command(export_dir: str | Path, target: str, *, served_model_name: str | None = None,
                   host: str = "0.0.0.0", port: int = 8000, max_model_len: int | None = None,
                   tensor_parallel_size: int = 1) -> str:
    """A shell command line that serves `export_dir` with `target` (see TARGETS)."""
    if target not in TARGETS:
        raise LaunchError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    d = Path(export_dir).expanduser().resolve()
    fmt = export_format(d)
    name = served_model_name or d.name
    q = shlex.quote
    if target == "npu-console":
        if fmt == "msmodelslim":
            raise LaunchError("npu-console serves its own and compressed-tensors exports; an "
                              "msModelSlim export is for vllm-ascend or MindIE")
        args = ["npu-console", "serve", "--model", q(str(d)), "--name", q(name),
                "--host", q(host), "--port", str(port)]
        if host not in ("127.0.0.1", "localhost", "::1"):
            args.append("--api-key \"$NPU_CONSOLE_API_KEY\"")
        return " ".join(args)
    args = ["vllm", "serve", q(str(d)), "--served-model-name", q(name), "--host", q(host),
            "--port", str(port)]
    if target == "vllm-ascend":
        if fmt == "compressed-tensors":
            # vllm-ascend reads compressed-tensors W8A8 too, without the ascend flag
            pass
        elif fmt == "msmodelslim":
            args += ["--quantization", "ascend"]
    elif fmt == "msmodelslim":
        raise LaunchError("an msModelSlim export runs on vllm-ascend (Ascend NPUs) only; "
                          "export with --format compressed-tensors for vLLM on GPUs")
    if max_model_len:
        args += ["--max-model-len", str(max_model_len)]
    if tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(tensor_parallel_size)]
    return " ".join(args)
