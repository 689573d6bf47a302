"""Model code, one module per family (as vLLM keeps model_executor/models/): the registry from
a Hugging Face architecture name to the module whose `Family` computes that model's batched
forward from the shared pieces (attention.py: GQA / MQA, rotary incl. partial, sliding windows,
soft-caps; base.py: the decoder skeleton, scaled / tied embeddings, final norm and head).

The runner schedules; the family computes. Adding a family is one module here (its
ARCHITECTURES and a `Family` class) plus one test (tests/test_model_families.py). A model whose
architecture is not here runs through its own transformers forward, one sequence at a time
(runner.FallbackRunner), and the engine says so (`unbatched_reason`).
"""

from __future__ import annotations

import importlib
from typing import Any

# one module per family, in the order they were added
MODULES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "qwen2_moe",
           "qwen3_moe")


def _registry() -> dict[str, Any]:
    out = {}
    for name in MODULES:
        mod = importlib.import_module(f"{__name__}.{name}")
        for arch in mod.ARCHITECTURES:
            out[arch] = mod
    return out


def architectures() -> tuple[str, ...]:
    return tuple(_registry())


def architecture_of(model: Any) -> str:
    """The HF architecture name: the model class, else config.architectures[0]."""
    name = type(model).__name__
    if name in _registry():
        return name
    archs = getattr(getattr(model, "config", None), "architectures", None) or [name]
    return archs[0]


def module_for(model: Any):
    return _registry().get(architecture_of(model))


def build(model: Any, max_len: int):
    """(the family object, "") or (None, why this model has no batched path)."""
    mod = module_for(model)
    if mod is None:
        return None, f"no native support for {architecture_of(model)}"
    if not hasattr(model, "model") or not hasattr(model, "lm_head"):
        return None, f"{architecture_of(model)} lacks model.model / lm_head"
    try:
        fam = mod.Family(model, max_len)
    except AttributeError as exc:  # a checkpoint whose modules are not laid out as expected
        return None, f"{architecture_of(model)}: {exc}"
    why = fam.check()
    return (None, why) if why else (fam, "")
