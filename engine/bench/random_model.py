"""A benchmark model without downloads: the Qwen2.5-0.5B configuration with random weights.

Speed depends on shapes, not on trained values, so this stands in for the real checkpoint in
offline benchmarks (no model hub needed). The tokenizer is copied from a local folder (the
stories260K or demo tokenizer): its vocabulary is smaller than the model's 151936 ids, which
the offline sweep does not mind (prompts are random ids over the model's vocabulary; generated
ids past the tokenizer decode to nothing) but which makes streamed text mostly empty, so use a
real checkpoint for serving runs.

    python -m engine.bench.random_model --out /tmp/qwen05b-random --tokenizer TOKENIZER_DIR
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


def make_random_qwen(out: str | Path, tokenizer_dir: str | Path, seed: int = 0,
                     dtype: str = "bfloat16") -> Path:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_05B)).to(getattr(torch, dtype))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write")
    ap.add_argument("--tokenizer", required=True, help="local folder to copy the tokenizer from")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(make_random_qwen(args.out, args.tokenizer, args.seed))


if __name__ == "__main__":
    main()
