"""One request's state inside the engine (pure Python: the scheduler and its tests use it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .types import SamplingParams


class SeqState(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """Prompt + generated tokens and how far the KV cache has caught up with them.

    `num_computed` counts tokens whose K/V rows are written in the slot; the tokens still to run
    through the model are `token_ids[num_computed:]` (the rest of the prompt while prefilling, the
    last sampled token while decoding).
    """

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    arrival: float = field(default_factory=time.time)  # wall clock, reported to callers
    arrival_mono: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    state: SeqState = SeqState.WAITING
    slot: int | None = None
    num_computed: int = 0
    num_cached: int = 0  # prompt tokens whose KV came from the prefix cache
    copy_from: tuple[int, int] | None = None  # (source slot, rows) for the runner to copy first
    first_scheduled: float | None = None  # monotonic
    token_times: list[float] = field(default_factory=list)  # monotonic time of each new token
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    error: str | None = None
    cancel_requested: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # runner / detokenizer state

    @property
    def token_ids(self) -> list[int]:
        # callers needing both often: avoid rebuilding a long list every step
        return self.prompt_ids + self.output_ids if self.output_ids else self.prompt_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_pending(self) -> int:
        """Tokens not yet run through the model."""
        return self.num_tokens - self.num_computed

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed < len(self.prompt_ids)

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt_ids) + self.params.max_tokens

    def token_slice(self, start: int, stop: int) -> list[int]:
        n = len(self.prompt_ids)
        if stop <= n:
            return self.prompt_ids[start:stop]
        return self.token_ids[start:stop]
