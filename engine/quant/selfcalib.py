"""Calibration text the model writes itself: sampled continuations of BOS and of a few neutral
chat prompts. A model's own text matches its own distribution (language, style, chat format)
better than any fixed file, and needs no data set. Token ids are cached per model folder, so
a second quantization of the same model skips the generation.

The samples must not depend on the CPU (issue 32): float kernels of two CPUs (AVX2 and
AVX512, MKL's paths on Intel and AMD) round differently, and torch's own sampler draws its
random numbers through vectorized code that differs between CPU builds, so samples drawn the
usual way diverged after a few tokens and the static ranges followed them. Here the model that
writes runs in float64 where it fits in memory (two CPUs' float64 logits differ by ~1e-13,
far below any gap the draw can fall into), the draw is an inverse-CDF lookup on float64
probabilities with a uniform number from Python's own Mersenne Twister (the same sequence on
every machine), and ties sort by token id. tests/test_selfcalib_determinism.py compares the
samples' hash between this CPU's build and an AVX2-held one."""

from __future__ import annotations

import copy
import hashlib
import json
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .calib import Cancelled, Progress

# neutral requests: no domain, no language other than the one the model answers in
PROMPTS = ("Tell me about something you find interesting.",
           "Write a short story.",
           "Explain how something in everyday life works.",
           "Describe a place you know well.")
# static W8A8 adds these (engine.quant.auto.self_prompts_for): its input ranges are fixed by
# the calibration text, and code's punctuation and indentation ran past ranges calibrated on
# the neutral requests alone, by up to 4.4x (docs/quantization.md)
CODE_PROMPTS = ("Write a short Python program and explain how it works.",
                "Show how to solve a small programming task, with code.")
VERSION = 2  # bump when the sampling changes, so cached samples are not reused
TOP_P = 0.95
# a float64 copy of the model writes the samples when it takes at most this share of free
# memory; beyond it float32 writes them and the description says so
FLOAT64_SHARE = 0.25


@dataclass(frozen=True)
class SelfCalibration:
    samples: list[torch.Tensor]  # (1, T) token ids each, prompt included
    prompt_lens: list[int]  # tokens of each sample that came from the prompt
    description: str
    cached: bool = False


def _starts(tokenizer: Any, n: int, prompts: tuple[str, ...] = PROMPTS) -> list[list[int]]:
    """n prompts: every other one BOS alone (free text), the rest chat requests from `prompts`
    in turn."""
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    free = [bos] if bos is not None else tokenizer("The", add_special_tokens=False)["input_ids"]
    chats = []
    if getattr(tokenizer, "chat_template", None):
        for p in prompts:
            try:
                ids = tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                                    add_generation_prompt=True, tokenize=True)
            except Exception:  # noqa: BLE001 - a template that wants other roles: free text only
                chats = []
                break
            if hasattr(ids, "keys"):  # a BatchEncoding in newer transformers
                ids = ids["input_ids"]
            chats.append(list(ids))
    return [chats[(i // 2) % len(chats)] if chats and i % 2 else list(free) for i in range(n)]


def _cache_path(model_dir: str | Path, n: int, new_tokens: int, seed: int,
                prompts: tuple[str, ...] = PROMPTS) -> Path:
    from ..paths import cache_dir

    p = Path(model_dir).resolve()
    # the GGUF cache's meta.json is touched on every use (its eviction order), so its mtime
    # would throw the samples away each time the converted model is loaded
    weights = sorted(f for f in (p.iterdir() if p.is_dir() else [p])
                     if f.suffix in (".safetensors", ".bin", ".gguf", ".json")
                     and f.name != "meta.json")
    ident = [str(p), VERSION, n, new_tokens, seed,
             [(f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in weights]]
    if prompts != PROMPTS:  # the neutral set keeps the keys that caches already hold
        ident.append(list(prompts))
    key = hashlib.sha1(json.dumps(ident).encode()).hexdigest()[:16]
    return cache_dir() / "selfcalib" / f"{p.name}-{key}.json"


def _describe(n: int, new_tokens: int, seed: int, writer: str,
              prompts: tuple[str, ...] = PROMPTS) -> str:
    code = len([p for p in prompts if p in CODE_PROMPTS])
    kinds = f"{len(prompts) - code} neutral" + (f" and {code} programming" if code else "")
    return (f"self-generated: {n} samples of {new_tokens} tokens sampled from the model "
            f"in {writer} (BOS and {kinds} prompts, temperature 1, "
            f"top-p {TOP_P}, seed {seed})")


def _draw(probs: torch.Tensor, u: float) -> int:
    """Top-p then inverse CDF at u, on the float64 probabilities of one row; ties by token id
    (a stable sort of the negated values keeps lower ids first)."""
    idx = torch.sort(-probs, stable=True).indices
    sp = probs[idx]
    csum = sp.cumsum(0)
    keep = max(1, int((csum - sp < TOP_P).sum().item()))  # the smallest set reaching TOP_P
    kept = csum[:keep]
    target = torch.tensor([u * kept[-1].item()], dtype=kept.dtype)
    pos = int(torch.searchsorted(kept, target, right=True).item())
    return int(idx[min(pos, keep - 1)].item())


def _writer(model: Any) -> tuple[Any, str]:
    """The model that writes the samples: a float64 copy where it fits (see the docstring)."""
    import psutil

    dev = next(model.parameters()).device
    size = sum(p.numel() for p in model.parameters()) * 8
    if dev.type == "cpu" and size <= FLOAT64_SHARE * psutil.virtual_memory().available:
        return copy.deepcopy(model).to(torch.float64), "float64"
    return model, str(next(model.parameters()).dtype).replace("torch.", "")


@torch.inference_mode()
def _sample(model: Any, starts: list[list[int]], new_tokens: int, seed: int,
            progress: Progress | None, cancel: threading.Event | None) -> list[list[int]]:
    """Batched top-p sampling with the model's KV cache; prompts left-padded."""
    rng = random.Random(seed)
    width = max(len(s) for s in starts)
    dev = next(model.parameters()).device
    ids = torch.tensor([[0] * (width - len(s)) + s for s in starts], device=dev)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in starts], device=dev)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    out = [list(s) for s in starts]
    cache, step_in = None, ids
    for t in range(new_tokens):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        res = model(input_ids=step_in, attention_mask=mask, position_ids=pos,
                    past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = res.past_key_values
        probs = torch.softmax(res.logits[:, -1].cpu().double(), -1)
        nxt = [_draw(probs[r], rng.random()) for r in range(probs.shape[0])]
        for row, tok in zip(out, nxt):
            row.append(tok)
        step_in = torch.tensor(nxt, device=dev)[:, None]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], -1)
        pos = pos[:, -1:] + 1
        if progress:
            progress("generate calibration", t + 1, new_tokens)
    return out


def self_calibration(model: Any, tokenizer: Any, n: int = 16, new_tokens: int = 128,
                     seed: int = 0, model_dir: str | Path | None = None,
                     progress: Progress | None = None,
                     cancel: threading.Event | None = None,
                     prompts: tuple[str, ...] = PROMPTS) -> SelfCalibration:
    """n samples of `new_tokens` sampled tokens each (after their prompt: BOS alone or one of
    `prompts`); cached under the cache dir when `model_dir` names the model's files."""
    path = (_cache_path(model_dir, n, new_tokens, seed, prompts) if model_dir is not None
            else None)
    if path is not None and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return SelfCalibration([torch.tensor([r]) for r in data["samples"]],
                                   data["prompt_lens"],
                                   _describe(n, new_tokens, seed, data["writer"], prompts),
                                   cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache file: generate again
    starts = _starts(tokenizer, n, prompts)
    writer, precision = _writer(model)
    rows = _sample(writer, starts, new_tokens, seed, progress, cancel)
    del writer
    lens = [len(s) for s in starts]
    desc = _describe(n, new_tokens, seed, precision, prompts)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"samples": rows, "prompt_lens": lens,
                                       "writer": precision}), encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass  # a read-only cache only costs the next run the generation
    return SelfCalibration([torch.tensor([r]) for r in rows], lens, desc)
