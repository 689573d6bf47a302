"""A benchmark model without downloads: the Qwen2.5-0.5B configuration with random weights.

Speed depends on shapes, not on trained values, so this stands in for the real checkpoint in
offline and serving benchmarks (no model hub needed). Its tokenizer has one word per id of the
model's full 151,936-id vocabulary ("t3" ... "t151935", split on spaces; ids 0-2 are <unk>,
<s>, </s>), so every generated id decodes to text, streamed answers carry one word per token,
and a prompt of N random words is exactly N tokens.

    python -m npu_console.engine.bench.random_model --out /tmp/qwen05b-random [--dtype bfloat16]

`--family` writes a small model (SMALL: 4 layers of hidden 512) of another family instead, with
the family's quirks on (Gemma's windows and caps, Phi-3's partial rotary, routed experts), for
the per-family batching figures in docs/benchmarks.md:

    python -m npu_console.engine.bench.random_model --family gemma3 --out /tmp/gemma3-small
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

QWEN25_05B = {
    "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
    "tie_word_embeddings": True, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2,
}


# the per-family benchmark shape: big enough that the products, not Python, dominate a step
SMALL = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1536,
         "vocab_size": 8192, "max_position_embeddings": 4096, "bos_token_id": 1,
         "eos_token_id": 2, "pad_token_id": 0}
FAMILY_CONFIGS = {  # family -> (transformers config class, its quirks)
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {}),
    "mistral": ("MistralConfig", {"sliding_window": 128}),
    "gemma2": ("Gemma2Config", {"query_pre_attn_scalar": 64, "sliding_window": 128,
                                "layer_types": ["sliding_attention", "full_attention"] * 2}),
    "gemma3": ("Gemma3TextConfig", {"query_pre_attn_scalar": 64, "sliding_window": 128,
                                    "layer_types": ["sliding_attention"] * 3
                                    + ["full_attention"]}),
    "phi3": ("Phi3Config", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                "partial_rotary_factor": 0.75}}),
    "qwen2_moe": ("Qwen2MoeConfig", {"num_experts": 8, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 384,
                                     "shared_expert_intermediate_size": 768}),
    "qwen3_moe": ("Qwen3MoeConfig", {"num_experts": 8, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 384}),
}


def make_random_family(family: str, out: str | Path, seed: int = 0, dtype: str = "float32",
                       **config_overrides: Any) -> Path:
    """A SMALL random-weight model of `family` (a key of FAMILY_CONFIGS) as a model folder."""
    import torch
    import transformers

    cls_name, quirks = FAMILY_CONFIGS[family]
    out = Path(out)
    torch.manual_seed(seed)
    config = getattr(transformers, cls_name)(**{**SMALL, **quirks, **config_overrides})
    model = transformers.AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype))
    model.save_pretrained(out)
    word_tokenizer(config.vocab_size).save_pretrained(out)
    return out


SPECIAL = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2: the config's bos and eos


def word_tokenizer(vocab_size: int) -> Any:
    """A fast tokenizer with one word per id ("t123"), so random-weight models decode.

    The special tokens get bracketed names: special tokens are matched anywhere in the text,
    so a name like "t1" would split "t100" in two.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    for i, name in enumerate(SPECIAL):
        del vocab[f"t{i}"]
        vocab[name] = i
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder with a prefix that never occurs joins the words with single spaces
    tk.decoder = decoders.WordPiece(prefix="\x00", cleanup=False)
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<unk>",
                                   bos_token="<s>", eos_token="</s>")


def make_random_qwen(out: str | Path, seed: int = 0, dtype: str = "bfloat16",
                     **config_overrides: Any) -> Path:
    """Write the model folder (config, safetensors, tokenizer) and return its path;
    `config_overrides` shrink it (tests)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    torch.manual_seed(seed)
    config = Qwen2Config(**{**QWEN25_05B, **config_overrides})
    model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(out)
    word_tokenizer(config.vocab_size).save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default=None, choices=["bfloat16", "float32", "float16"],
                    help="default: bfloat16 for the Qwen2.5-0.5B shape, float32 for --family")
    ap.add_argument("--family", default=None, choices=sorted(FAMILY_CONFIGS),
                    help="a SMALL model of this family instead of the Qwen2.5-0.5B shape")
    args = ap.parse_args()
    if args.family:
        print(make_random_family(args.family, args.out, args.seed, args.dtype or "float32"))
    else:
        print(make_random_qwen(args.out, args.seed, args.dtype or "bfloat16"))


if __name__ == "__main__":
    main()
