"""Routed experts as one nn.Linear per expert and projection, so that INT8 reaches them.

transformers keeps a sparse block's experts as two 3-D tables (gate_up_proj [E, 2I, H],
down_proj [E, H, I]) behind one module. Nothing that quantizes, calibrates or exports works on
such a table: every piece of engine.quant works on nn.Linear. `unroll_experts` replaces each
such module with `LinearExperts`, a list of small gated MLPs (gate_proj, up_proj, down_proj)
whose weights are views of the tables (no copy), named as the hub's checkpoints and vLLM's
loaders name them (`mlp.experts.3.down_proj`). Its forward is transformers' expert-by-expert
loop: each expert's weights are read once per step for all the rows routed to it, and an INT8
expert is one Int8Linear product per projection.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ExpertMLP(nn.Module):
    """One routed expert: down(act(gate(x)) * up(x))."""

    def __init__(self, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor, act: Any):
        super().__init__()
        self.gate_proj = _linear(gate)
        self.up_proj = _linear(up)
        self.down_proj = _linear(down)
        self.act_fn = act
        # which rows of the step this expert was given last (set by LinearExperts): for
        # calibration hooks, whose per-token bookkeeping sees only the routed rows
        self.rows: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _linear(weight: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    lin.weight = nn.Parameter(weight, requires_grad=False)
    return lin


class LinearExperts(nn.ModuleList):
    """The experts of one sparse block, called as transformers calls its experts module:
    (hidden [T, H], top_k_index [T, k], top_k_weights [T, k]) -> [T, H]."""

    def forward(self, hidden: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(hidden)
        k = top_k_index.shape[-1]
        flat = top_k_index.reshape(-1)
        # rows grouped by expert, in expert order (as transformers walks them, so that the
        # float sums come out in the same order); a stable sort keeps rows ascending
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=len(self)).tolist()
        weights = top_k_weights.reshape(-1)
        start = 0
        for e, n in enumerate(counts[:len(self)]):
            if not n:
                continue
            picks = order[start:start + n]
            start += n
            rows = picks // k
            self[e].rows = rows
            y = self[e](hidden[rows]) * weights[picks, None].to(hidden.dtype)
            out.index_add_(0, rows, y.to(out.dtype))
        return out


def expert_tables(mod: nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(gate_up [E, 2I, H], down [E, H, I]) of a transformers experts module in the layout
    unroll_experts takes (gated, concatenated, not transposed, no biases, no norm); else None."""
    gu, down = getattr(mod, "gate_up_proj", None), getattr(mod, "down_proj", None)
    if not (isinstance(gu, torch.Tensor) and isinstance(down, torch.Tensor)):
        return None
    if (gu.dim() != 3 or down.dim() != 3 or not getattr(mod, "has_gate", True)
            or getattr(mod, "has_bias", False) or getattr(mod, "is_transposed", False)
            or not getattr(mod, "is_concatenated", True)
            or getattr(mod, "has_post_expert_norm", False)):
        return None
    e, two_i, h = gu.shape
    if two_i % 2 or down.shape != (e, h, two_i // 2) or not hasattr(mod, "act_fn"):
        return None
    return gu, down


def unroll(mod: nn.Module) -> LinearExperts:
    gu, down = expert_tables(mod)
    i = gu.shape[1] // 2
    return LinearExperts(ExpertMLP(gu.data[e, :i], gu.data[e, i:], down.data[e], mod.act_fn)
                         for e in range(gu.shape[0]))


def unroll_experts(model: nn.Module) -> int:
    """Replace every experts module in expert_tables' layout with its LinearExperts, in place
    (idempotent); returns how many were replaced. The model computes the same."""
    found = [(name, mod) for name, mod in model.named_modules()
             if expert_tables(mod) is not None]
    for name, mod in found:
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, unroll(mod))
    return len(found)
