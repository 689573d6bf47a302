"""Held-out and calibration text for the quantization tests, sampled from the real stories260K
model (a tiny Llama trained on TinyStories) so that its perplexity is meaningful.

The shipped calibration set (assets/calib) is written for the demo model's vocabulary; these
samples stand in for it on stories260K. Generation is seeded and cached per process.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch


@functools.lru_cache(maxsize=8)
def _model(model_dir: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return model, tok


def load_float(model_dir: str | Path):
    """A fresh float copy (tests quantize in place)."""
    import copy

    model, tok = _model(str(model_dir))
    return copy.deepcopy(model), tok


@functools.lru_cache(maxsize=8)
def sampled_ids(model_dir: str, seed: int, n: int = 8, length: int = 200) -> torch.Tensor:
    """(n, length + 1) token ids: BOS then temperature-1 samples, with the KV cache."""
    model, tok = _model(model_dir)
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((n, 1), tok.bos_token_id)
    threads = torch.get_num_threads()
    # tiny matmuls: one thread avoids OpenMP spin-waits on the shared 2-core machines (20x here)
    torch.set_num_threads(1)
    try:
        return _sample(model, ids, g, length)
    finally:
        torch.set_num_threads(threads)


def _sample(model, ids, g, length):
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
        for _ in range(length):
            p = torch.softmax(out.logits[:, -1].float(), -1)
            nxt = torch.multinomial(p, 1, generator=g)
            ids = torch.cat([ids, nxt], 1)
            out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    return ids


def sampled_text(model_dir: str | Path, seed: int, n: int = 8, length: int = 200) -> list[str]:
    _, tok = _model(str(model_dir))
    return [tok.decode(row[1:], skip_special_tokens=True) for row in
            sampled_ids(str(model_dir), seed, n, length)]


def write_text_file(path: Path, texts: list[str]) -> Path:
    path.write_text("\n\n".join(t.replace("\n\n", "\n") for t in texts) + "\n", encoding="utf-8")
    return path


PROMPTS = ["Once upon a time", "The cat", "Lily wanted", "One day, a little", "Tom and his mom",
           "The sun was", "A big dog", "She saw a bird", "They went to the park", "He was very",
           "The little girl", "Ben had a", "In the garden", "Mom said", "The boy liked",
           "There was a", "Sue found a", "The tree", "A small fish", "They played"]
