"""Gemma 2: GeGLU MLP, RMSNorm scaling by (1 + w), a norm before and after both the attention
and the MLP, embeddings scaled by sqrt(hidden), attention scores and final logits soft-capped
with tanh, and sliding-window layers alternating with full ones (config.layer_types). The norms,
the MLP and the scaled embedding are the model's own modules; attention is the shared piece with
the window and the cap switched on. On the native decode step with its norms as 1 + w, the
sandwich norms, GELU and the cap switched on."""

from __future__ import annotations

import torch

from .attention import StepLayout
from .base import DecoderFamily, NativeParts

ARCHITECTURES = ("Gemma2ForCausalLM",)


class Family(DecoderFamily):
    name = "gemma2"
    norm_offset = 1.0

    def layer(self, li: int, h: torch.Tensor, step: StepLayout, rope: tuple,
              kv: tuple) -> torch.Tensor:
        """Sandwich norms: h + post_norm(attn(pre_norm(h))), then the same around the MLP."""
        layer = self.layers[li]
        a = self.attention(li, layer.input_layernorm(h), step, rope, kv)
        h = h + layer.post_attention_layernorm(a)
        m = self.calls[li][4](layer.pre_feedforward_layernorm(h))
        return h + layer.post_feedforward_layernorm(m)

    def native_parts(self, layer) -> NativeParts:
        a, mlp = layer.self_attn, layer.mlp
        return NativeParts(*((m, None) for m in (a.q_proj, a.k_proj, a.v_proj, a.o_proj,
                                                 mlp.gate_proj, mlp.up_proj, mlp.down_proj)),
                           in_norm=layer.input_layernorm,
                           post_norm=layer.pre_feedforward_layernorm, act=mlp.act_fn,
                           attn_out_norm=layer.post_attention_layernorm,
                           mlp_out_norm=layer.post_feedforward_layernorm)
