"""Phi-3 / Phi-3.5 / Phi-4-mini: Llama with q, k and v in one fused projection (qkv_proj), gate
and up in one (gate_up_proj, the module's own SwiGLU), and partial rotary (only the first
partial_rotary_factor of each head turns; attention.apply_rope). Not on the native decode
step (its kernel reads separate q/k/v and gate/up weights)."""

from __future__ import annotations

import torch

from .. import cpu_linear
from .base import DecoderFamily

ARCHITECTURES = ("Phi3ForCausalLM",)


class Family(DecoderFamily):
    name = "phi3"
    native_decode = False

    def layer_linears(self, layer) -> list:
        a, mlp = layer.self_attn, layer.mlp
        return [a.qkv_proj, a.o_proj, mlp.gate_up_proj, mlp.down_proj]

    def layer_calls(self, layer, native: bool) -> tuple:
        a = layer.self_attn
        return (cpu_linear.linear_fn(a.qkv_proj, native), None, None,
                cpu_linear.linear_fn(a.o_proj, native), layer.mlp)

    def qkv(self, li: int, x: torch.Tensor, n_tok: int) -> tuple:
        qkv = self.calls[li][0](x).view(n_tok, -1)
        nq, nk = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return (qkv[:, :nq].reshape(n_tok, self.num_heads, self.head_dim),
                qkv[:, nq:nq + nk].reshape(n_tok, self.num_kv_heads, self.head_dim),
                qkv[:, nq + nk:].reshape(n_tok, self.num_kv_heads, self.head_dim))
