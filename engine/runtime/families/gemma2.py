"""Gemma 2: GeGLU MLP, RMSNorm scaling by (1 + w), a norm before and after both the attention
and the MLP, embeddings scaled by sqrt(hidden), attention scores and final logits soft-capped
with tanh, and sliding-window layers alternating with full ones (config.layer_types). The norms,
the MLP and the scaled embedding are the model's own modules; attention is the shared piece with
the window and the cap switched on. Not on the native decode step (its kernel has neither
(1 + w) norms, GeGLU nor caps)."""

from __future__ import annotations

import torch

from .attention import StepLayout
from .base import DecoderFamily

ARCHITECTURES = ("Gemma2ForCausalLM",)


class Family(DecoderFamily):
    name = "gemma2"
    native_decode = False

    def layer(self, li: int, h: torch.Tensor, step: StepLayout, rope: tuple,
              kv: tuple) -> torch.Tensor:
        """Sandwich norms: h + post_norm(attn(pre_norm(h))), then the same around the MLP."""
        layer = self.layers[li]
        a = self.attention(li, layer.input_layernorm(h), step, rope, kv)
        h = h + layer.post_attention_layernorm(a)
        m = self.calls[li][4](layer.pre_feedforward_layernorm(h))
        return h + layer.post_feedforward_layernorm(m)
