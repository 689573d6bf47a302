"""Qwen3: Llama with an RMSNorm on each query and key head before rotary (q_norm / k_norm,
which the base decoder applies when the attention module has them)."""

from .base import DecoderFamily

ARCHITECTURES = ("Qwen3ForCausalLM",)


class Family(DecoderFamily):
    name = "qwen3"

    def check(self) -> str:
        if not self.has_qk_norm:
            return "Qwen3 attention without q_norm / k_norm"
        return super().check()
