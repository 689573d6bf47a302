"""Bookkeeping of KV-cache slots and the prefix cache (pure Python, no torch).

The KV cache holds `num_slots` rows of `max_len` positions each. A running sequence owns one slot.
When it leaves, the slot keeps the token ids whose K/V it still holds, so a later request starting
with the same tokens can take that slot over (no copy) or, when the best match is in a slot that is
busy, copy the shared rows into its own slot. Matching is a longest-common-prefix scan over at most
`num_slots` lists, cheap next to one model step.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .sequence import Sequence


def common_prefix_len(a: list[int], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    if n == 0 or a[0] != b[0]:
        return 0
    if a[:n] == b[:n]:  # fast path, compared in C
        return n
    lo, hi = 1, n  # invariant: a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class PrefixMatch:
    slot: int
    cached_tokens: int  # rows reused
    copy_from: int | None  # source slot when rows must be copied, None when reused in place


class SlotAllocator:
    def __init__(self, num_slots: int, max_len: int, prefix_caching: bool = True,
                 min_prefix_tokens: int = 4):
        self.num_slots = num_slots
        self.max_len = max_len
        self.prefix_caching = prefix_caching
        self.min_prefix_tokens = min_prefix_tokens
        self._owner: list[Sequence | None] = [None] * num_slots
        self._cached: list[list[int]] = [[] for _ in range(num_slots)]  # valid rows of free slots
        self._last_used = [0] * num_slots
        self._clock = itertools.count(1)

    # ---------------------------------------------------------------- queries
    @property
    def num_free(self) -> int:
        return sum(1 for o in self._owner if o is None)

    @property
    def total_tokens(self) -> int:
        return self.num_slots * self.max_len

    def used_tokens(self) -> int:
        return sum(o.num_computed for o in self._owner if o is not None)

    def can_allocate(self, seq: Sequence) -> bool:
        return seq.max_total_tokens <= self.max_len and self.num_free > 0

    def owner(self, slot: int) -> Sequence | None:
        return self._owner[slot]

    # ---------------------------------------------------------------- allocate / free
    def allocate(self, seq: Sequence) -> PrefixMatch:
        """Give `seq` a slot, reusing the longest cached prefix of its prompt."""
        if not self.can_allocate(seq):
            raise RuntimeError("no free KV slot")
        prompt = seq.prompt_ids
        # at least one prompt token must run through the model to produce the first logits
        limit = len(prompt) - 1
        best_len, best_slot, best_busy = 0, None, False
        if self.prefix_caching and limit >= self.min_prefix_tokens:
            for s in range(self.num_slots):
                owner = self._owner[s]
                if owner is None:
                    n = common_prefix_len(prompt, self._cached[s], limit)
                    busy = False
                else:
                    n = common_prefix_len(prompt, owner.token_ids, min(limit, owner.num_computed))
                    busy = True
                # prefer an in-place take-over on ties: it costs no copy
                if n > best_len or (n == best_len and n > 0 and best_busy and not busy):
                    best_len, best_slot, best_busy = n, s, busy
        if best_len < self.min_prefix_tokens:
            best_len, best_slot = 0, None
        if best_slot is not None and not best_busy:
            slot, copy_from = best_slot, None
        else:
            slot = self._pick_victim()
            copy_from = best_slot if best_len else None
        self._owner[slot] = seq
        self._cached[slot] = []
        self._last_used[slot] = next(self._clock)
        seq.slot = slot
        seq.num_cached = best_len
        seq.num_computed = best_len
        seq.copy_from = (copy_from, best_len) if copy_from is not None else None
        return PrefixMatch(slot, best_len, copy_from)

    def _pick_victim(self) -> int:
        """A free slot: an empty one first, else the least recently used cached one."""
        free = [s for s in range(self.num_slots) if self._owner[s] is None]
        empty = [s for s in free if not self._cached[s]]
        if empty:
            return empty[0]
        return min(free, key=lambda s: self._last_used[s])

    def free(self, seq: Sequence) -> None:
        """Release `seq`'s slot, keeping the rows it wrote as a prefix-cache entry."""
        slot = seq.slot
        if slot is None or self._owner[slot] is not seq:
            return
        self._owner[slot] = None
        if self.prefix_caching:
            self._cached[slot] = seq.token_ids[: seq.num_computed]
        self._last_used[slot] = next(self._clock)
        seq.slot = None

    def clear_cache(self) -> None:
        self._cached = [[] for _ in range(self.num_slots)]
