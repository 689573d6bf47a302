"""Quality and cost of a (quantized) model: perplexity, KL vs float, greedy agreement, memory,
speed."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .calib import Cancelled


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _max_len(model: Any, default: int = 2048) -> int:
    return int(getattr(model.config, "max_position_embeddings", default) or default)


@dataclass(frozen=True)
class PerplexityResult:
    perplexity: float
    nll: float
    tokens: int

    def to_dict(self) -> dict:
        return asdict(self)


@torch.inference_mode()
def perplexity(model: Any, ids: torch.Tensor | list[int], window: int | None = None,
               stride: int | None = None, progress: Callable[[int, int], None] | None = None,
               cancel: threading.Event | None = None) -> PerplexityResult:
    """Sliding-window perplexity: each window of `window` tokens scores only the tokens not
    scored by the previous one, with up to window - stride tokens of context before them."""
    ids = torch.as_tensor(ids).reshape(-1)
    if ids.numel() < 2:
        raise ValueError("perplexity needs at least 2 tokens")
    window = min(window or _max_len(model), _max_len(model))
    stride = min(stride or window, window)
    dev = _device(model)
    nll_sum, counted, prev_end = 0.0, 0, 0
    n = ids.numel()
    starts = list(range(0, n - 1, stride))
    for i, begin in enumerate(starts):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        end = min(begin + window, n)
        chunk = ids[begin:end].unsqueeze(0).to(dev)
        logits = model(input_ids=chunk, use_cache=False).logits[0, :-1].float()
        targets = chunk[0, 1:]
        # score only targets at absolute positions >= prev_end (not yet scored)
        first = max(prev_end - begin - 1, 0)
        if first < targets.numel():
            nll_sum += F.cross_entropy(logits[first:], targets[first:], reduction="sum").item()
            counted += targets.numel() - first
        prev_end = end
        if progress:
            progress(i + 1, len(starts))
        if end == n:
            break
    nll = nll_sum / counted
    return PerplexityResult(perplexity=math.exp(nll), nll=nll, tokens=counted)


@torch.inference_mode()
def kl_divergence(ref_model: Any, model: Any, samples: list[torch.Tensor]) -> float:
    """Mean KL(P_ref || P_model) of the next-token distributions over every position."""
    total, count = 0.0, 0
    for ids in samples:
        ids = ids.reshape(1, -1)
        p = ref_model(input_ids=ids.to(_device(ref_model)), use_cache=False).logits.float()
        q = model(input_ids=ids.to(_device(model)), use_cache=False).logits.float()
        lp = F.log_softmax(p, -1)
        lq = F.log_softmax(q.to(lp.device), -1)
        total += (lp.exp() * (lp - lq)).sum(-1).sum().item()
        count += ids.shape[1]
    return total / max(count, 1)


@torch.inference_mode()
def greedy_tokens(model: Any, prompt_ids: list[int], n: int) -> list[int]:
    """Greedy continuation with the model's own KV cache (no sampling, no stop)."""
    dev = _device(model)
    out = model(input_ids=torch.tensor([prompt_ids], device=dev), use_cache=True)
    past, toks = out.past_key_values, []
    nxt = int(out.logits[0, -1].argmax())
    for _ in range(n):
        toks.append(nxt)
        if len(toks) == n:
            break
        out = model(input_ids=torch.tensor([[nxt]], device=dev), past_key_values=past,
                    use_cache=True)
        past = out.past_key_values
        nxt = int(out.logits[0, -1].argmax())
    return toks


def greedy_agreement(ref: list[list[int]], got: list[list[int]]) -> float:
    """Share of positions where two greedy continuations agree (position by position)."""
    same = sum(sum(a == b for a, b in zip(r, g)) for r, g in zip(ref, got))
    total = sum(len(r) for r in ref)
    return same / total if total else 1.0


@torch.inference_mode()
def top1_agreement(model: Any, prompts: list[list[int]], ref: list[list[int]]) -> float:
    """Teacher-forced top-1 agreement: fed the prompt and the reference's own greedy
    continuation, the share of positions where the model's argmax is the reference's token.
    Unlike greedy_agreement, one flipped near-tie does not drag the rest of a continuation
    with it, so it measures how often the model disagrees rather than where it first did."""
    same = total = 0
    dev = _device(model)
    for p, r in zip(prompts, ref):
        if not r:
            continue
        ids = torch.tensor([list(p) + list(r[:-1])], device=dev)
        pred = model(input_ids=ids, use_cache=False).logits[0, len(p) - 1:].argmax(-1)
        same += sum(int(a) == b for a, b in zip(pred.tolist(), r))
        total += len(r)
    return same / total if total else 1.0


def weight_bytes(model: Any) -> int:
    """Bytes of every parameter and buffer (int8 weights, scales, float parts), counted once
    even when tied; packed kernel copies are counted in place of released plain weights."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() in seen or t.numel() == 0:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    from .qlinear import QuantLinear

    for m in model.modules():
        if isinstance(m, QuantLinear) and m.weight.numel() == 0:
            packed = getattr(m, "packed", None)
            if packed is not None:  # the packed copy holds the int8 weight and its scales
                total += packed.weight.nbytes + packed.scale.nbytes
            else:
                total += m.in_features * m.out_features  # another backend's int8 copy
    return total


@dataclass(frozen=True)
class SpeedResult:
    batch: int
    prompt_tokens: int
    new_tokens: int
    ttft_s: float
    decode_tok_s: float  # generated tokens per second over all sequences, after the first

    def to_dict(self) -> dict:
        return asdict(self)


@torch.inference_mode()
def decode_speed(model: Any, batch: int = 1, prompt_len: int = 32, new_tokens: int = 64,
                 vocab: int | None = None, seed: int = 0) -> SpeedResult:
    """Prefill a random prompt and decode greedily with the HF cache (our own loop; the engine
    path is engine.runtime when that is available)."""
    dev = _device(model)
    vocab = vocab or model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, prompt_len), generator=g).to(dev)
    t0 = time.perf_counter()
    out = model(input_ids=ids, use_cache=True)
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    ttft = time.perf_counter() - t0
    past = out.past_key_values
    t1 = time.perf_counter()
    for _ in range(new_tokens - 1):
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    dt = time.perf_counter() - t1
    return SpeedResult(batch=batch, prompt_tokens=prompt_len, new_tokens=new_tokens,
                       ttft_s=ttft, decode_tok_s=batch * (new_tokens - 1) / dt)
