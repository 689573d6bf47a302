"""A llama.cpp GGUF of a Qwen2-shaped Hugging Face folder whose tokenizer llama.cpp cannot convert.

The random-weight benchmark model (`python -m npu_console.engine.bench.random_model`) has a toy
word-level tokenizer; llama.cpp's convert_hf_to_gguf.py wants a real Qwen BPE or sentencepiece
tokenizer and stops there. llama-bench and llama-batched-bench never tokenize text, so here the
safetensors go to GGUF as they are (same float values, llama.cpp's qwen2 tensor names from gguf's
own name map) with a placeholder vocabulary of the model's size that llama.cpp's loader accepts
("llama" model: <unk>, <s>, </s>, then "t3" ... the same words as the random model's tokenizer).
That way llama.cpp and our engine run the very same weights.

    python tests/bench/random_gguf.py /tmp/qwen05b-random /tmp/qwen05b-random-f32.gguf [--outtype f16]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

SPECIAL = ("<unk>", "<s>", "</s>")


def needs_own_writer(folder: Path) -> bool:
    """True for a Qwen2 folder with a word-level tokenizer (the random benchmark model), which
    convert_hf_to_gguf.py cannot turn into a GGUF."""
    folder = Path(folder)
    cfg, tok = folder / "config.json", folder / "tokenizer.json"
    if not (cfg.is_file() and tok.is_file()):
        return False
    if json.loads(cfg.read_text()).get("model_type") != "qwen2":
        return False
    return json.loads(tok.read_text()).get("model", {}).get("type") == "WordLevel"


def _rope_theta(cfg: dict) -> float:
    # transformers 5 nests it under rope_parameters; older configs keep it at the top
    params = cfg.get("rope_parameters") or {}
    return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def _tensor_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no *.safetensors files")
    return files


def write_qwen2_gguf(folder: str | Path, out: str | Path, outtype: str = "f32",
                     progress: Callable[[str], None] | None = None) -> Path:
    """Write `folder`'s Qwen2 weights to `out` (GGUF, llama.cpp's qwen2 layout) and return it.

    outtype "f32" keeps the float32 values bit for bit (what our engine quantizes from);
    "f16" casts the matrices. Norms and biases stay float32, as llama.cpp's converter keeps
    them. Tensors are streamed one at a time, so memory stays at one tensor.
    """
    import gguf
    import torch
    from safetensors import safe_open

    if outtype not in ("f32", "f16"):
        raise ValueError(f"outtype must be f32 or f16, not {outtype!r}")
    folder, out = Path(folder), Path(out)
    cfg = json.loads((folder / "config.json").read_text())
    if cfg.get("model_type") != "qwen2":
        raise ValueError(f"{folder}: model_type {cfg.get('model_type')!r}, this writes qwen2 only")
    n_layer, vocab = int(cfg["num_hidden_layers"]), int(cfg["vocab_size"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, n_layer)
    tied = bool(cfg.get("tie_word_embeddings", False))
    matrix_dtype = np.float32 if outtype == "f32" else np.float16

    # (gguf name, file, hf name, numpy dtype) in file order, so the data is written as listed
    plan: list[tuple[str, Path, str, type]] = []
    for path in _tensor_files(folder):
        with safe_open(path, framework="pt") as f:
            for hf_name in f.keys():  # noqa: SIM118 (safe_open is not iterable)
                if hf_name == "lm_head.weight" and tied:
                    continue  # llama.cpp reuses token_embd when output.weight is absent
                name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
                if name is None:
                    raise ValueError(f"{path.name}: no qwen2 GGUF name for tensor {hf_name!r}")
                shape = f.get_slice(hf_name).get_shape()
                dtype = matrix_dtype if len(shape) == 2 else np.float32
                plan.append((name, path, hf_name, dtype))

    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN2])
    w.add_name(folder.name)
    w.add_context_length(int(cfg.get("max_position_embeddings", 32768)))
    w.add_embedding_length(int(cfg["hidden_size"]))
    w.add_block_count(n_layer)
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(int(cfg["num_attention_heads"]))
    w.add_head_count_kv(int(cfg.get("num_key_value_heads", cfg["num_attention_heads"])))
    w.add_rope_freq_base(_rope_theta(cfg))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if outtype == "f32"
                    else gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    tokens = [*SPECIAL, *(f"t{i}" for i in range(len(SPECIAL), vocab))][:vocab]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL,
                       *([gguf.TokenType.NORMAL] * (vocab - len(SPECIAL)))][:vocab])
    w.add_bos_token_id(int(cfg.get("bos_token_id") or 1))
    w.add_eos_token_id(int(cfg.get("eos_token_id") or 2))
    w.add_add_bos_token(False)

    opened: dict[Path, object] = {}
    try:
        for path in {p for _, p, _, _ in plan}:
            opened[path] = safe_open(path, framework="pt")

        def load(path: Path, hf_name: str, dtype: type) -> np.ndarray:
            t = opened[path].get_tensor(hf_name)  # type: ignore[attr-defined]
            return t.to(torch.float32).numpy().astype(dtype, copy=False)

        for name, path, hf_name, dtype in plan:
            shape = opened[path].get_slice(hf_name).get_shape()  # type: ignore[attr-defined]
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            w.add_tensor_info(name, shape, np.dtype(dtype), nbytes)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for i, (name, path, hf_name, dtype) in enumerate(plan, 1):
            w.write_tensor_data(load(path, hf_name, dtype))
            if progress:
                progress(f"{i}/{len(plan)} {name}")
    except BaseException:
        w.close()
        out.unlink(missing_ok=True)  # a half-written GGUF would load as garbage later
        raise
    w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="Hugging Face folder of a Qwen2 model")
    p.add_argument("out", type=Path, help="GGUF file to write")
    p.add_argument("--outtype", choices=["f32", "f16"], default="f32")
    args = p.parse_args(argv)
    try:
        write_qwen2_gguf(args.folder, args.out, args.outtype,
                         progress=lambda s: print(f"\r{s:<60}", end="", file=sys.stderr))
    except (ValueError, OSError) as e:
        raise SystemExit(f"error: {e}") from None
    print(file=sys.stderr)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
