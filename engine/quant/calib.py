"""Calibration: read text, cut it into token windows, record per-channel activation ranges.

The ranges (max |x| per input channel of every linear layer) drive SmoothQuant and the static
per-tensor input scales of w8a8-static.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..runtime.types import Cancelled  # the engine's one; quant raises it
from .config import QuantError

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def shipped_calibration_file() -> Path:
    from ..paths import CALIB_DIR

    return CALIB_DIR / "calibration.txt"


def _chat_text(tokenizer: Any, messages: Any, where: str) -> str:
    """A {"messages": [...]} record as the model reads a conversation: its chat template."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise QuantError(f"{where}: a chat record needs the model's chat template, and this "
                         "model has none (use {\"text\": ...} records)")
    if not (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str) for m in messages)):
        raise QuantError(f'{where}: "messages" must be a list of {{"role", "content"}} objects')
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception as e:  # noqa: BLE001 - a template that refuses these roles
        raise QuantError(f"{where}: the chat template refused this conversation: {e}") from None


def read_texts(path: str | Path | None = None, tokenizer: Any = None) -> list[str]:
    """Documents from a .txt (blank-line separated paragraphs) or .jsonl ({"text": ...} per
    line, or {"messages": [...]} rendered through `tokenizer`'s chat template).

    None means the calibration set the project ships.
    """
    p = Path(path) if path is not None else shipped_calibration_file()
    if not p.is_file():
        if path is None:
            raise QuantError(f"no shipped calibration text at {p}; pass --calib FILE")
        raise QuantError(f"calibration file not found: {p}")
    try:
        raw = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise QuantError(f"calibration file {p} is not UTF-8 text") from None
    if p.suffix.lower() == ".jsonl":
        texts = []
        for i, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise QuantError(f"{p}:{i}: not a JSON object") from None
            if isinstance(obj, dict) and "messages" in obj:
                texts.append(_chat_text(tokenizer, obj["messages"], f"{p}:{i}"))
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise QuantError(f'{p}:{i}: expected an object with a "text" string field '
                                 'or a "messages" list')
            if obj["text"].strip():
                texts.append(obj["text"])
    else:
        texts = [t.strip() for t in raw.split("\n\n") if t.strip()]
    if not texts:
        raise QuantError(f"calibration file {p} contains no text")
    return texts


def build_samples(tokenizer: Any, texts: list[str], n_samples: int, seq_len: int) -> list[torch.Tensor]:
    """Concatenate documents (EOS between them) and cut the stream into `seq_len` windows,
    spread evenly over the stream when it holds more than `n_samples` windows."""
    sep = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    stream: list[int] = []
    for t in texts:
        stream.extend(tokenizer(t, add_special_tokens=False)["input_ids"])
        stream.extend(sep)
        if len(stream) >= n_samples * seq_len * 4:
            break  # plenty: tokenizing a huge file for 64 windows would waste minutes
    if len(stream) < 2:
        raise QuantError("calibration text is too short (fewer than 2 tokens)")
    windows = max(1, len(stream) // seq_len)
    if windows == 1:
        return [torch.tensor([stream[:seq_len]])]
    step = windows / min(n_samples, windows)
    picks = sorted({int(i * step) for i in range(min(n_samples, windows))})
    return [torch.tensor([stream[i * seq_len:(i + 1) * seq_len]]) for i in picks]


@dataclass
class ActStats:
    """Running max |x| per input channel (K,) of one linear layer, fp32 on the CPU."""

    absmax: torch.Tensor

    @property
    def tensor_absmax(self) -> float:
        return float(self.absmax.max())


def collect_stats(model: Any, samples: list[torch.Tensor], names: list[str],
                  progress: Progress | None = None,
                  cancel: threading.Event | None = None) -> dict[str, ActStats]:
    mods = dict(model.named_modules())
    stats: dict[str, ActStats] = {}

    def make_hook(name: str):
        def hook(_mod, args):
            x = args[0].detach()
            m = x.reshape(-1, x.shape[-1]).abs().amax(0).float().cpu()
            if name in stats:
                torch.maximum(stats[name].absmax, m, out=stats[name].absmax)
            else:
                stats[name] = ActStats(m)
        return hook

    # the decoder alone: calibration needs no logits, and a big-vocabulary lm_head is a quarter
    # of a small model's FLOPs (Qwen2.5-0.5B)
    body = getattr(model, "model", None)
    runner = body if isinstance(body, torch.nn.Module) and not any(
        n.startswith("lm_head") for n in names) else model
    run_samples(model, runner, samples, {mods[n]: make_hook(n) for n in names},
                progress=progress, cancel=cancel)
    return stats


def run_samples(model: Any, runner: Any, samples: list[torch.Tensor],
                hooks: dict[torch.nn.Module, Callable], prepare: Callable | None = None,
                progress: Progress | None = None, cancel: threading.Event | None = None) -> None:
    """Every calibration pass: each sample through `runner` (the model or its decoder) with the
    forward pre-hooks {module: hook} in place, removed afterwards also on error or cancel.
    `prepare(ids)` gives the input a sample runs as (default: the sample itself)."""
    handles = [m.register_forward_pre_hook(h) for m, h in hooks.items()]
    device = next(model.parameters()).device
    try:
        with torch.inference_mode():
            for i, ids in enumerate(samples):
                if cancel is not None and cancel.is_set():
                    raise Cancelled()
                x = prepare(ids) if prepare is not None else ids
                runner(input_ids=x.to(device), use_cache=False)
                if progress:
                    progress("calibrate", i + 1, len(samples))
    finally:
        for h in handles:
            h.remove()
