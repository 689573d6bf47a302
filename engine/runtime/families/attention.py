"""The shared attention piece of the family modules: one step's layout (which rows decode, which
are prefill chunks, their slots and positions), rotary embeddings (full or partial), and
attention against the slot KV cache with GQA / MQA, sliding windows and logit soft-capping.

Decode rows attend as two batched matmuls in slot order with the query heads of one KV head
grouped (no repeated K/V; several times faster on CPU than SDPA's kernel for one query row);
each prefill chunk attends through SDPA with a causal (or windowed) mask against its slot,
or through explicit matmuls when the scores are soft-capped (SDPA has no cap).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary on x [N, heads, hd] with cos / sin [N, 1, rd]; when rd < hd (partial
    rotary, Phi-3's partial_rotary_factor) only the first rd dimensions turn."""
    rd = cos.shape[-1]
    if rd == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    rot, rest = x[..., :rd], x[..., rd:]
    return torch.cat((rot * cos + rotate_half(rot) * sin, rest), dim=-1)


@dataclass
class StepLayout:
    """Where each row of a step's flat batch goes: rows [0, decode_count) decode one token each,
    the rest are prefill chunks `pre` = [(row offset, rows, slot, start position)]."""

    n_tok: int
    pos_t: torch.Tensor
    slot_t: torch.Tensor
    decode_count: int
    dec_view: tuple | None = None  # (first slot, count, lmax) or (slot index tensor, None, lmax)
    dec_lens: torch.Tensor | None = None  # each decode row's context length, in slot order
    dec_perm: torch.Tensor | None = None
    dec_unperm: torch.Tensor | None = None
    pre: list = field(default_factory=list)
    _masks: dict = field(default_factory=dict)

    @classmethod
    def build(cls, items: list, decode_count: int, pos: list[int], slots: list[int],
              device: Any) -> StepLayout:
        lay = cls(len(pos), torch.tensor(pos, dtype=torch.long, device=device),
                  torch.tensor(slots, dtype=torch.long, device=device), decode_count)
        dec = items[:decode_count]
        if dec:
            # attention runs in slot order: when the running sequences fill a range of slots
            # (the usual case under load) K/V are a view of the cache, not a gathered copy
            order = sorted(range(decode_count), key=lambda i: dec[i].seq.slot)
            if order != list(range(decode_count)):
                lay.dec_perm = torch.tensor(order, device=device)
                lay.dec_unperm = torch.argsort(lay.dec_perm)
            dec_slots = [dec[i].seq.slot for i in order]
            dec_len = [dec[i].start + 1 for i in order]
            lmax = max(dec_len)
            s0 = dec_slots[0]
            contiguous = dec_slots == list(range(s0, s0 + len(dec_slots)))
            lay.dec_view = (s0, len(dec_slots), lmax) if contiguous else (
                torch.tensor(dec_slots, device=device), None, lmax)
            lay.dec_lens = torch.tensor(dec_len, device=device)
        off = decode_count
        for it in items[decode_count:]:
            lay.pre.append((off, it.num_tokens, it.seq.slot, it.start))
            off += it.num_tokens
        return lay

    def decode_mask(self, window: int | None) -> torch.Tensor:
        """True where a decode row must not see a key: beyond its length, or (with a sliding
        window) at least `window` positions behind its query."""
        key = ("dec", window)
        if key not in self._masks:
            lmax = self.dec_view[2]
            j = torch.arange(lmax, device=self.dec_lens.device)[None, :]
            mask = j >= self.dec_lens[:, None]
            if window:
                mask = mask | (j < (self.dec_lens[:, None] - window))
            self._masks[key] = mask[:, None, None, :]
        return self._masks[key]

    def prefill_mask(self, i: int, window: int | None) -> torch.Tensor | None:
        """The keys a prefill chunk may see (True = attend), None for a plain causal chunk from
        position 0 (SDPA's is_causal)."""
        _off, n, _slot, start = self.pre[i]
        if start == 0 and not window:
            return None
        key = ("pre", i, window)
        if key not in self._masks:
            dev = self.pos_t.device
            q = torch.arange(start, start + n, device=dev)[:, None]
            j = torch.arange(start + n, device=dev)[None, :]
            mask = j <= q
            if window:
                mask = mask & (j > q - window)
            self._masks[key] = mask
        return self._masks[key]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
           v_cache: torch.Tensor, step: StepLayout, scaling: float,
           window: int | None = None, softcap: float | None = None) -> torch.Tensor:
    """Write this step's k / v [N, kvh, hd] into one layer's cache [slots, kvh, L, hd] and
    attend q [N, nh, hd] against it. Returns [N, nh * hd] in the cache's dtype, or in fp32 for
    an fp16 cache on CPU: there the cache only stores (half the bytes attention reads, as in
    the native step), and the products run in fp32 (CPU matmuls in fp16 are slow and round
    every sum)."""
    _, nh, hd = q.shape
    kvh = k.shape[1]
    groups = nh // kvh
    store = k_cache.dtype
    k_cache[step.slot_t, :, step.pos_t] = k.to(store)
    v_cache[step.slot_t, :, step.pos_t] = v.to(store)
    kdt = torch.float32 if store == torch.float16 and k_cache.device.type == "cpu" else store
    outs = []
    dc = step.decode_count
    if dc:
        a, b, lmax = step.dec_view
        if b is not None:
            kk, vv = k_cache[a:a + b, :, :lmax], v_cache[a:a + b, :, :lmax]
        else:  # gather only the first lmax rows of the scattered slots
            kk = k_cache[:, :, :lmax].index_select(0, a)
            vv = v_cache[:, :, :lmax].index_select(0, a)
        kk, vv = kk.to(kdt), vv.to(kdt)
        qd = q[:dc]
        if step.dec_perm is not None:
            qd = qd.index_select(0, step.dec_perm)
        qd = qd.to(kdt).view(dc, kvh, groups, hd)
        scores = torch.matmul(qd, kk.transpose(-1, -2)) * scaling
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        scores = scores.masked_fill(step.decode_mask(window), float("-inf"))
        o = torch.matmul(torch.softmax(scores, dim=-1), vv).reshape(dc, nh * hd)
        outs.append(o if step.dec_unperm is None else o.index_select(0, step.dec_unperm))
    for i, (o0, n, slot, start) in enumerate(step.pre):
        ctx = start + n
        qp = q[o0:o0 + n].to(kdt).transpose(0, 1)[None]  # [1, nh, n, hd]
        if start == 0:
            # a chunk from position 0 sees only its own keys: this step's k / v as computed,
            # so a half cache rounds nothing before the first token
            kk = k[o0:o0 + n].to(kdt).transpose(0, 1)[None]
            vv = v[o0:o0 + n].to(kdt).transpose(0, 1)[None]
        else:
            kk = k_cache[slot:slot + 1, :, :ctx].to(kdt)
            vv = v_cache[slot:slot + 1, :, :ctx].to(kdt)
        mask = step.prefill_mask(i, window)
        if softcap:
            o = _capped_attention(qp, kk, vv, mask, ctx, scaling, softcap, groups)
        else:
            o = F.scaled_dot_product_attention(qp, kk, vv, attn_mask=mask,
                                               is_causal=mask is None, scale=scaling,
                                               enable_gqa=True)
        outs.append(o[0].transpose(0, 1).reshape(n, nh * hd))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)


def _capped_attention(q, k, v, mask, ctx, scaling, softcap, groups):
    """Attention with tanh soft-capped scores (Gemma 2), explicit: SDPA cannot cap."""
    n = q.shape[2]
    if mask is None:
        mask = torch.ones(n, ctx, dtype=torch.bool, device=q.device).tril(ctx - n)
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling
    scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)
