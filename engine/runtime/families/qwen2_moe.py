"""Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention (q/k/v bias) with a sparse MLP of
top-k routed experts plus a shared expert behind a sigmoid gate (the model's own block)."""

from . import moe
from .base import DecoderFamily

ARCHITECTURES = ("Qwen2MoeForCausalLM",)


class Family(DecoderFamily):
    name = "qwen2_moe"
    native_decode = False

    def layer_linears(self, layer) -> list:
        return moe.layer_linears(layer)

    def layer_calls(self, layer, native: bool) -> tuple:
        return moe.layer_calls(layer, native)
