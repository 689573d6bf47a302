"""Phi-3 / Phi-3.5 / Phi-4-mini: Llama with q, k and v in one fused projection (qkv_proj), gate
and up in one (gate_up_proj, the module's own SwiGLU), and partial rotary (only the first
partial_rotary_factor of each head turns; attention.apply_rope). On the native decode step
the fused projections are handed over as row ranges of their weights."""

from __future__ import annotations

import torch

from .. import cpu_linear
from .base import DecoderFamily, NativeParts

ARCHITECTURES = ("Phi3ForCausalLM",)


class Family(DecoderFamily):
    name = "phi3"

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

    def native_parts(self, layer) -> NativeParts:
        a, mlp = layer.self_attn, layer.mlp
        nq, nk = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        inter = mlp.down_proj.in_features
        return NativeParts((a.qkv_proj, 0), (a.qkv_proj, nq), (a.qkv_proj, nq + nk),
                           (a.o_proj, None), (mlp.gate_up_proj, 0), (mlp.gate_up_proj, inter),
                           (mlp.down_proj, None), in_norm=layer.input_layernorm,
                           post_norm=layer.post_attention_layernorm, act=mlp.activation_fn)
