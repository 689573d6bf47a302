"""Batched token sampling with per-request seeds.

Each row of the logits belongs to one sequence with its own SamplingParams. Penalties,
temperature, top-k, top-p and min-p are applied as tensor ops over the whole batch; the only
per-row work is drawing one uniform number from the request's own torch.Generator, which makes a
seeded request reproducible whatever else shares its batch (inverse-CDF sampling consumes exactly
one draw per token).
"""

from __future__ import annotations

import os

import torch

from .sequence import Sequence


class SamplingError(Exception):
    pass


def generator_for(seq: Sequence) -> torch.Generator:
    gen = seq.extra.get("generator")
    if gen is None:
        seed = seq.params.seed
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
        gen = torch.Generator()
        gen.manual_seed(int(seed))
        seq.extra["generator"] = gen
    return gen


def _seen_ids(seq: Sequence, vocab: int) -> list[int]:
    """The distinct ids (in the vocabulary) of the sequence's prompt and output so far, kept on
    the sequence and grown by the tokens added since the last step: rebuilding the set from
    every token each step cost more than the rest of sampling on long contexts."""
    cache = seq.extra.get("seen_ids")
    if cache is None:
        cache = seq.extra["seen_ids"] = (set(), [], [0, 0])
    seen, order, done = cache
    for part, src in ((0, seq.prompt_ids), (1, seq.output_ids)):
        for t in src[done[part]:]:
            if 0 <= t < vocab and t not in seen:
                seen.add(t)
                order.append(t)
        done[part] = len(src)
    return order


def _apply_penalties(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    vocab = logits.shape[-1]
    # repetition penalty (HF semantics over prompt + output: shrink positive logits, push
    # negative ones down), every row at once: one gather and one scatter for the batch
    rows = [r for r, seq in enumerate(seqs) if seq.params.repetition_penalty != 1.0]
    if rows:
        ids = [_seen_ids(seqs[r], vocab) for r in rows]
        counts = torch.tensor([len(i) for i in ids])
        tok = torch.tensor([t for i in ids for t in i], dtype=torch.long)
        if len(tok):
            row = torch.repeat_interleave(torch.tensor(rows), counts)
            pen = torch.repeat_interleave(
                torch.tensor([seqs[r].params.repetition_penalty for r in rows],
                             dtype=logits.dtype), counts)
            vals = logits[row, tok]
            logits[row, tok] = torch.where(vals > 0, vals / pen, vals * pen)
    for r, seq in enumerate(seqs):
        p = seq.params
        if (p.presence_penalty or p.frequency_penalty) and seq.output_ids:
            # OpenAI semantics over generated tokens only
            out = torch.tensor([t for t in seq.output_ids if 0 <= t < vocab], dtype=torch.long)
            counts = torch.bincount(out, minlength=vocab).to(logits.dtype)
            logits[r] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(
                logits.dtype)
    return logits


def _argmax_rows(x: torch.Tensor) -> list[int]:
    """Each row's first maximum (a NaN counts as the maximum). On CPU through numpy, whose
    vectorized argmax takes 0.02 ms over a 152K vocabulary where torch's takes 0.36 (1.5 % of
    an INT8 decode step of Qwen2.5-0.5B here), with the same answer."""
    if x.device.type == "cpu":
        return x.numpy().argmax(axis=-1).tolist()
    return x.argmax(dim=-1).tolist()


def sample(logits: torch.Tensor, seqs: list[Sequence]) -> tuple[list[int | None], dict[int, str]]:
    """Pick one token per row. Returns (tokens, {row: error}) with None for failed rows."""
    logits = logits.float()
    if any(s.params.repetition_penalty != 1.0 or s.params.presence_penalty
           or s.params.frequency_penalty for s in seqs):
        logits = _apply_penalties(logits.clone(), seqs)
    n = len(seqs)
    tokens: list[int | None] = [None] * n
    errors: dict[int, str] = {}
    greedy = [i for i, s in enumerate(seqs) if s.params.greedy]
    if greedy:
        picked = _argmax_rows(logits[greedy] if len(greedy) < n else logits)
        for i, t in zip(greedy, picked):
            tokens[i] = int(t)
    rows = [i for i, s in enumerate(seqs) if not s.params.greedy]
    if not rows:
        return tokens, errors
    sub = logits[rows] if len(rows) < n else logits
    ps = [seqs[i].params for i in rows]
    temp = torch.tensor([p.temperature for p in ps], dtype=sub.dtype)[:, None]
    sub = sub / temp
    vocab = sub.shape[-1]
    if any(p.top_k > 0 for p in ps):
        kmax = min(max(p.top_k for p in ps), vocab)
        top_vals = torch.topk(sub, kmax, dim=-1).values
        kth = torch.tensor([min(p.top_k, vocab) - 1 if p.top_k > 0 else kmax - 1 for p in ps])
        thresh = top_vals.gather(1, kth[:, None])
        off = torch.tensor([p.top_k <= 0 for p in ps])[:, None]
        sub = torch.where((sub < thresh) & ~off, torch.full_like(sub, float("-inf")), sub)
    probs = torch.softmax(sub, dim=-1)
    if any(p.min_p > 0 for p in ps):
        min_p = torch.tensor([p.min_p for p in ps], dtype=probs.dtype)[:, None]
        probs = torch.where(probs < min_p * probs.max(dim=-1, keepdim=True).values,
                            torch.zeros_like(probs), probs)
    if any(p.top_p < 1.0 for p in ps):
        top_p = torch.tensor([p.top_p for p in ps], dtype=probs.dtype)[:, None]
        sorted_p, order = probs.sort(dim=-1, descending=True)
        before = sorted_p.cumsum(dim=-1) - sorted_p  # mass strictly before each token
        sorted_p = torch.where(before >= top_p * sorted_p.sum(-1, keepdim=True),
                               torch.zeros_like(sorted_p), sorted_p)
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_p)
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1]
    finite = torch.isfinite(total) & (total > 0)
    u = torch.stack([torch.rand((), generator=generator_for(seqs[i])) for i in rows])
    # right side: the first token whose cumulative mass exceeds the draw, never a zero-mass one
    idx = torch.searchsorted(cdf, (u.to(cdf.dtype) * total)[:, None].contiguous(), right=True)
    idx = idx.squeeze(1)
    idx = idx.clamp_(max=vocab - 1).tolist()
    finite_l = finite.tolist()
    for j, i in enumerate(rows):
        if not finite_l[j]:
            errors[i] = ("sampling failed: the probabilities are not finite (temperature "
                         f"{ps[j].temperature} overflows the logits)")
            continue
        tokens[i] = int(idx[j])
    return tokens, errors


def sample_contained(logits: torch.Tensor, seqs: list[Sequence]):
    """sample(), but a row that breaks it fails alone: (tokens, {row: error message})."""
    try:
        return sample(logits, seqs)
    except Exception:  # noqa: BLE001 - find the row that breaks it
        tokens, errors = [None] * len(seqs), {}
        for r, seq in enumerate(seqs):
            try:
                t, e = sample(logits[r:r + 1], [seq])
                tokens[r] = t[0]
                if e:
                    errors[r] = e[0]
            except Exception as exc:  # noqa: BLE001
                errors[r] = f"sampling failed: {type(exc).__name__}: {exc}"
        return tokens, errors
