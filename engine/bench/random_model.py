"""A benchmark model without downloads: the Qwen2.5-0.5B configuration with random weights.

Speed depends on shapes, not on trained values, so this stands in for the real checkpoint in
benchmarks (no model hub needed). The tokenizer is word-level over the whole vocabulary ("t3"
... "t151935"), so every generated id decodes to text and streams like a real model's output.

    python -m engine.bench.random_model --out /tmp/qwen05b-random
"""

from __future__ import annotations

import argparse
from pathlib import Path

QWEN25_05B = {
    "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
    "tie_word_embeddings": True, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2,
}


def word_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # special tokens get names that never occur inside "t<digits>" (they are matched anywhere)
    vocab = {f"t{i}": i for i in range(3, vocab_size)}
    vocab.update({"<unk>": 0, "<s>": 1, "</s>": 2})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")


def make_random_qwen(out: str | Path, seed: int = 0, dtype: str = "bfloat16") -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_05B)).to(getattr(torch, dtype))
    model.save_pretrained(out)
    word_tokenizer(QWEN25_05B["vocab_size"]).save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(make_random_qwen(args.out, args.seed))


if __name__ == "__main__":
    main()
