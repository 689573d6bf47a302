"""Continuous-batching scheduler: which sequences run how many tokens in the next step.

Pure Python so it can be tested without a model. Each step:
1. every running sequence gets its share first: one token if decoding, the next prompt chunk if
   still prefilling (long prompts are chunked so the others keep getting a token per step);
2. then waiting requests are admitted in arrival order while there is a free KV slot, room under
   `max_running` and token budget left. A request that does not fit waits (refusal, not
   preemption: a slot is sized for prompt + max_tokens, so a running sequence never runs out of
   KV and never needs to be evicted).
Finished and cancelled sequences leave at once (`finish`), freeing their slot for the next step.
The waiting queue has no bound of its own: the engine's `max_waiting` is the one limit, checked
when a request is submitted (so changing it at run time never makes a queued request fail here).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .kv_slots import SlotAllocator
from .sequence import SeqState, Sequence


@dataclass
class ScheduledSeq:
    seq: Sequence
    start: int  # position of the first token to run
    num_tokens: int

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the known tokens, so a new token is sampled."""
        return self.start + self.num_tokens == self.seq.num_tokens


@dataclass
class SchedulerOutput:
    decodes: list[ScheduledSeq] = field(default_factory=list)
    prefills: list[ScheduledSeq] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)

    @property
    def all(self) -> list[ScheduledSeq]:
        return self.decodes + self.prefills

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.decodes) + sum(s.num_tokens for s in self.prefills)

    @property
    def empty(self) -> bool:
        return not self.decodes and not self.prefills


class Scheduler:
    def __init__(self, allocator: SlotAllocator, max_running: int = 16,
                 max_batched_tokens: int = 256):
        if max_batched_tokens < 1 or max_running < 1:
            raise ValueError("budgets must be positive")
        self.allocator = allocator
        self.max_running = min(max_running, allocator.num_slots)
        self.max_batched_tokens = max_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    # ---------------------------------------------------------------- queue
    def add(self, seq: Sequence) -> None:
        seq.state = SeqState.WAITING
        self.waiting.append(seq)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def find(self, request_id: str) -> Sequence | None:
        for seq in self.running:
            if seq.request_id == request_id:
                return seq
        for seq in self.waiting:
            if seq.request_id == request_id:
                return seq
        return None

    # ---------------------------------------------------------------- step
    def schedule(self, now: float | None = None) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_batched_tokens
        # decoding sequences first (one token each), so a long prefill never stalls the streams
        for seq in self.running:
            if budget <= 0:
                break
            if not seq.is_prefilling and seq.num_pending > 0:
                out.decodes.append(ScheduledSeq(seq, seq.num_computed, seq.num_pending))
                budget -= seq.num_pending
        for seq in self.running:
            if budget <= 0:
                break
            if seq.is_prefilling:
                n = min(seq.num_pending, budget)
                out.prefills.append(ScheduledSeq(seq, seq.num_computed, n))
                budget -= n
        while (self.waiting and budget > 0 and len(self.running) < self.max_running
               and self.allocator.can_allocate(self.waiting[0])):
            seq = self.waiting.popleft()
            self.allocator.allocate(seq)
            seq.state = SeqState.RUNNING
            seq.first_scheduled = now
            self.running.append(seq)
            out.admitted.append(seq)
            n = min(seq.num_pending, budget)
            out.prefills.append(ScheduledSeq(seq, seq.num_computed, n))
            budget -= n
        # decode slots in slot order so the runner can often use a contiguous view of the cache
        out.decodes.sort(key=lambda s: s.seq.slot)
        return out

    def advance(self, item: ScheduledSeq) -> None:
        """Record that the runner wrote KV for the scheduled tokens."""
        item.seq.num_computed = item.start + item.num_tokens

    def finish(self, seq: Sequence, reason: str) -> None:
        """Take `seq` out (finished, cancelled or failed) and free its slot now."""
        if seq.state is SeqState.RUNNING:
            try:
                self.running.remove(seq)
            except ValueError:
                pass
            self.allocator.free(seq)
        elif seq.state is SeqState.WAITING:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        seq.state = SeqState.FINISHED
        if seq.finish_reason is None:
            seq.finish_reason = reason
