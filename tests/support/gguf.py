"""Small GGUF files for the bad-input tests, written with llama.cpp's own `gguf` writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np


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


GGUF_ARCH = {"qwen2": "QWEN2", "qwen3": "QWEN3", "gemma3": "GEMMA3", "llama": "LLAMA"}


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """The row order llama.cpp's converter gives a Llama Q or K projection (`heads` = the
    heads of that projection): within each head, the two halves' rows interleaved, so its
    rotary embedding can pair neighbouring values. transformers' reader undoes it."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_model_gguf(model, path: Path, matrices: str = "F32") -> Path:
    """`model` (a tiny transformers llama / qwen2 / qwen3 / gemma3 model) as a GGUF, laid out as
    llama.cpp's converter lays it out (tensor names from the gguf package's own map; Gemma's
    norms stored as 1 + w, which transformers' reader takes back off; Llama's Q and K rows
    permuted), with a byte-level word tokenizer of its vocabulary so transformers can read the
    file back. `matrices`: the type of every 2-D tensor ("F32", or a block type such as "Q8_0"
    or "Q4_0", quantized by the gguf package as llama-quantize does); 1-D ones stay F32."""
    import gguf

    cfg = model.config
    family = cfg.model_type.removesuffix("_text")
    arch = getattr(gguf.MODEL_ARCH, GGUF_ARCH[family])
    name = gguf.MODEL_ARCH_NAMES[arch]
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    w = gguf.GGUFWriter(str(path), name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(float(cfg.rope_parameters.get("rope_theta", 10000.0))
                         if "rope_theta" in cfg.rope_parameters
                         else float(cfg.rope_parameters["full_attention"]["rope_theta"]))
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    if family == "gemma3":
        w.add_sliding_window(cfg.sliding_window)
    tokens = [f"w{i}" for i in range(cfg.vocab_size)]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([1] * len(tokens))
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    tied = getattr(cfg, "tie_word_embeddings", False)
    for hf_name, t in model.state_dict().items():
        if tied and hf_name == "lm_head.weight":
            continue  # a tied model's GGUF has no output table
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"no GGUF name for {hf_name}")
        data = t.detach().float().numpy()
        if family == "gemma3" and hf_name.endswith("norm.weight"):
            data = data + 1.0
        if family == "llama" and gguf_name.endswith(("attn_q.weight", "attn_k.weight")):
            data = llama_cpp_permute(data, cfg.num_attention_heads if "attn_q" in gguf_name
                                     else cfg.num_key_value_heads)
        qtype = getattr(gguf.GGMLQuantizationType, matrices)
        if data.ndim == 2 and matrices != "F32":
            w.add_tensor(gguf_name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def count_gguf_reads(monkeypatch, auto_class) -> list[str]:
    """Patch `auto_class.from_pretrained` (AutoTokenizer, AutoConfig) to record the name of
    each GGUF file it is asked to read from the file itself (the slow path); the list fills
    as the test runs."""
    made: list[str] = []
    real = auto_class.from_pretrained.__func__

    def counting(cls, name, *args, **kwargs):
        if kwargs.get("gguf_file"):
            made.append(kwargs["gguf_file"])
        return real(cls, name, *args, **kwargs)

    monkeypatch.setattr(auto_class, "from_pretrained", classmethod(counting))
    return made
