"""Mistral: Llama with sliding-window attention (config.sliding_window on every layer). The
window is a mask over the slot's keys (attention.StepLayout); the native decode step has no
window, so a model whose window is shorter than a slot decodes on the PyTorch path."""

from .base import DecoderFamily

ARCHITECTURES = ("MistralForCausalLM",)


class Family(DecoderFamily):
    name = "mistral"
