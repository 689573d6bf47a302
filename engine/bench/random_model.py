"""A benchmark model without downloads: the Qwen2.5-0.5B configuration with random weights.

Speed depends on shapes, not on trained values, so this stands in for the real checkpoint in
offline and serving benchmarks (no model hub needed). Its tokenizer has one word per id of the
model's full 151,936-id vocabulary ("t3" ... "t151935", split on spaces; ids 0-2 are <unk>,
<s>, </s>), so every generated id decodes to text, streamed answers carry one word per token,
and a prompt of N random words is exactly N tokens.

    python -m npu_console.engine.bench.random_model --out /tmp/qwen05b-random [--dtype bfloat16]
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
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    args = ap.parse_args()
    print(make_random_qwen(args.out, args.seed, args.dtype))


if __name__ == "__main__":
    main()
