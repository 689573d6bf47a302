"""Tiny random-weight models of the real transformers classes (no download), for the tests of
the batched runner and the native decode: each family of the batched path, a wider variant whose
products qualify for the native kernels, and the three things the runner reads of a sequence."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

COMMON = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
          "max_position_embeddings": 256}

# wide enough that every product but k/v (128 x 256) qualifies for the native fp32 kernel
WIDE = {"hidden_size": 256, "intermediate_size": 512}


def tiny(family: str, **overrides):
    import transformers as tf
    from npu_console.engine.models.loader import LoadedModel

    cls = {"llama": tf.LlamaConfig, "qwen2": tf.Qwen2Config, "qwen3": tf.Qwen3Config,
           "mistral": tf.MistralConfig}[family]
    extra = {"head_dim": 16} if family == "qwen3" else {}
    cfg = cls(**{**COMMON, **extra, **overrides})
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    tok = _tokenizer(cfg.vocab_size)
    return LoadedModel(name=family, path=Path(family), model=model, tokenizer=tok, config=cfg,
                       device="cpu", dtype="float32", architecture=type(model).__name__)


def _tokenizer(vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="w0")


def wide(family):
    """A WIDE tiny model whose biases (Qwen2's q/k/v) are not the zeros HF initialises."""
    loaded = tiny(family, **WIDE)
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for m in loaded.model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.5)
    return loaded


class RunnerSeq:
    """The three things the runner reads of a sequence."""

    def __init__(self, ids, slot):
        self.ids, self.slot = list(ids), slot

    def token_slice(self, a, b):
        return self.ids[a:b]

    @property
    def num_tokens(self):
        return len(self.ids)


@functools.cache
def _native_missing() -> str | None:
    """Why the native kernels are unavailable, asked once per session (a failed build is not
    tried again for every test)."""
    from npu_console.engine.kernels import native

    return None if native.available() else native.build().reason


def needs_native():
    """Skip the calling test where the native kernels cannot be built on this machine (in CI
    that fails instead: tests/conftest.py)."""
    reason = _native_missing()
    if reason is not None:
        pytest.skip(f"native kernels unavailable: {reason}")
