"""Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention (q/k norm) with a sparse MLP of top-k
routed experts, no shared expert (the model's own block)."""

from . import moe
from .base import DecoderFamily

ARCHITECTURES = ("Qwen3MoeForCausalLM",)


class Family(DecoderFamily):
    name = "qwen3_moe"
    native_decode = False

    def layer_linears(self, layer) -> list:
        return moe.layer_linears(layer)

    def layer_calls(self, layer, native: bool) -> tuple:
        return moe.layer_calls(layer, native)
