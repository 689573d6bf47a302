"""Gemma 3 (text): Gemma 2's layer (sandwich norms, (1 + w) RMSNorm, GeGLU, scaled embeddings)
with q/k norms instead of the attention soft-cap, five sliding-window layers to one global one
(config.layer_types), and a rotary table per layer type (local theta 10k, global 1M with its
own scaling)."""

from __future__ import annotations

from functools import cached_property

import torch

from . import gemma2

ARCHITECTURES = ("Gemma3ForCausalLM",)


class Family(gemma2.Family):
    name = "gemma3"

    def check(self) -> str:
        if getattr(self.cfg, "use_bidirectional_attention", False):
            return "bidirectional attention (an embedding model, not a causal LM)"
        return super().check()

    def _kinds(self) -> list[str]:
        return sorted(set(self.cfg.layer_types))

    def rotary_tables(self, h: torch.Tensor, pos_t: torch.Tensor) -> list[tuple]:
        out = []
        for kind in self._kinds():
            cos, sin = self.rope_rows(h, pos_t, kind)
            out.append((cos[:, None, :], sin[:, None, :]))
        return out

    @cached_property
    def rope_table_of(self) -> list[int]:
        kinds = self._kinds()
        return [kinds.index(self.cfg.layer_types[li]) for li in range(len(self.layers))]
