"""Small GGUF files for the bad-input tests, written with llama.cpp's own `gguf` writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.shared import SMOLLM_GGUF  # noqa: F401  (where the tests have always found it)


def write_gguf(path: Path, arch: str = "llama", tokenizer: bool = True) -> Path:
    """A tiny one-layer model of `arch`, with or without an embedded tokenizer."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    if tokenizer:
        tokens = ["<s>", "</s>"] + [chr(c) for c in range(97, 123)]
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * len(tokens))
        w.add_token_types([1] * len(tokens))
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)
    w.add_tensor("token_embd.weight", np.zeros((28, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
