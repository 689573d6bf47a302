"""Qwen2 / Qwen2.5 (and DeepSeek-R1-Distill-Qwen): Llama with biases on q/k/v. The biases live in
the projection modules, so the base decoder computes them; the native step reads them too."""

from .base import DecoderFamily

ARCHITECTURES = ("Qwen2ForCausalLM",)


class Family(DecoderFamily):
    name = "qwen2"
