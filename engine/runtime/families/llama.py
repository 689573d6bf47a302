"""Llama (and every Llama body: Llama 2/3 with their rope scaling, DeepSeek-R1-Distill-Llama,
SmolLM): the base decoder as it is."""

from .base import DecoderFamily

ARCHITECTURES = ("LlamaForCausalLM",)


class Family(DecoderFamily):
    name = "llama"
