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


# each family's quirks switched on (the sizes stay COMMON's): windows shorter than the test
# prompts, soft-caps, partial rotary, a query scale that is not head_dim's, routed experts
QUIRKS = {
    "qwen3": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": 6,
               "layer_types": ["sliding_attention", "full_attention"],
               "attn_logit_softcapping": 20.0, "final_logit_softcapping": 10.0},
    "gemma3": {"head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": 6,
               "num_hidden_layers": 3,
               "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]},
    "phi3": {"pad_token_id": 0, "eos_token_id": 2, "bos_token_id": 1, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                 "partial_rotary_factor": 0.5}},
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 64},
    "qwen3_moe": {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 32, "norm_topk_prob": True},
}


def _config_class(family: str):
    import transformers as tf

    return {"llama": tf.LlamaConfig, "qwen2": tf.Qwen2Config, "qwen3": tf.Qwen3Config,
            "mistral": tf.MistralConfig, "gemma2": tf.Gemma2Config,
            "gemma3": tf.Gemma3TextConfig, "phi3": tf.Phi3Config,
            "qwen2_moe": tf.Qwen2MoeConfig, "qwen3_moe": tf.Qwen3MoeConfig}[family]


def tiny(family: str, **overrides):
    import transformers as tf
    from npu_console.engine.models.loader import LoadedModel

    cfg = _config_class(family)(**{**COMMON, **QUIRKS.get(family, {}), **overrides})
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


def decode_both(model, steps: int = 4, num_slots: int = 8, kv_dtype: str = "float32"):
    """With the cache in `kv_dtype` (fp32 unless asked: the runners' own default is fp16 on
    CPU, held to fp32 by tests/test_native_decode.py), prefill six sequences (lengths 1-40) into scattered slots of two runners, one with the
    native step and one without, then decode `steps` greedy steps through each (both fed the
    PyTorch runner's tokens). Returns [(native logits, torch logits)] and the runners."""
    from npu_console.engine.runtime.runner import BatchedRunner
    from npu_console.engine.runtime.scheduler import ScheduledSeq

    native = BatchedRunner(model, num_slots=num_slots, max_len=96, kv_dtype=kv_dtype)
    torch_ = BatchedRunner(model, num_slots=num_slots, max_len=96, linear_kernels="torch",
                           kv_dtype=kv_dtype)
    assert native.decode_plan is not None, native.decode_plan_reason
    assert torch_.decode_plan is None
    g = torch.Generator().manual_seed(7)
    vocab = model.config.vocab_size
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (1, 5, 17, 40, 9, 2)]
    slots = [6, 1, 4, 0, 7, 3]
    seqs = {k: [RunnerSeq(list(p), s) for p, s in zip(prompts, slots)] for k in ("native", "torch")}
    out = []
    with torch.inference_mode():
        for kind, runner in (("native", native), ("torch", torch_)):
            for s in seqs[kind]:  # prefills run the PyTorch loop in both
                runner.execute([ScheduledSeq(s, 0, len(s.ids))], 0)
        for _ in range(steps):
            step = {}
            for kind, runner in (("native", native), ("torch", torch_)):
                items = [ScheduledSeq(s, len(s.ids) - 1, 1) for s in seqs[kind]]
                step[kind] = runner.execute(items, len(items))
            out.append((step["native"], step["torch"]))
            nxt = step["torch"].argmax(-1).tolist()
            for group in seqs.values():
                for s, t in zip(group, nxt):
                    s.ids.append(t)
    return out, native, torch_
