"""A llama.cpp GGUF of a Qwen2-shaped Hugging Face folder whose tokenizer llama.cpp cannot convert.

The random-weight benchmark model (`python -m npu_console.engine.bench.random_model`) has a toy
word-level tokenizer; llama.cpp's convert_hf_to_gguf.py wants a real Qwen BPE or sentencepiece
tokenizer and stops there. llama-bench and llama-batched-bench never tokenize text, so here the
safetensors go to GGUF as they are (same float values, llama.cpp's qwen2 tensor names from gguf's
own name map) with a placeholder vocabulary of the model's size that llama.cpp's loader accepts
("llama" model: <unk>, <s>, </s>, then "t3" ... the same words as the random model's tokenizer).
That way llama.cpp and our engine run the very same weights.

    python tests/bench/random_gguf.py /tmp/qwen05b-random /tmp/qwen05b-random-f32.gguf [--outtype f16]

The scale curve's models go straight to Q8_0 instead, with no float copy at all (random int8
values and fp16 scales written block by block, one tensor in memory):

    python tests/bench/random_gguf.py --q8-0 llama-2-7b /tmp/llama2-7b-random-q8_0.gguf
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


# real models' shapes for the scale curve (their config.json values)
SHAPES = {
    "qwen2.5-0.5b": {"arch": "qwen2", "hidden": 896, "layers": 24, "heads": 14, "kv": 2, "inter": 4864,
                         "vocab": 151936, "tied": True, "ctx": 32768, "theta": 1e6, "eps": 1e-6},
    "qwen2.5-1.5b": {"arch": "qwen2", "hidden": 1536, "layers": 28, "heads": 12, "kv": 2, "inter": 8960,
                         "vocab": 151936, "tied": True, "ctx": 32768, "theta": 1e6, "eps": 1e-6},
    "llama-3.2-3b": {"arch": "llama", "hidden": 3072, "layers": 28, "heads": 24, "kv": 8, "inter": 8192,
                         "vocab": 128256, "tied": True, "ctx": 131072, "theta": 5e5, "eps": 1e-5},
    "llama-2-7b": {"arch": "llama", "hidden": 4096, "layers": 32, "heads": 32, "kv": 32, "inter": 11008,
                       "vocab": 32000, "tied": False, "ctx": 4096, "theta": 1e4, "eps": 1e-5},
    # Gemma 3 270M (issue 31's family): heads of 256 wider than hidden / heads, q/k norms,
    # sandwich norms, 512-token windows on five layers of six (llama.cpp's and transformers'
    # default pattern), local rotary theta 10k (both readers' default), global 1M
    "gemma3-270m": {"arch": "gemma3", "hidden": 640, "layers": 18, "heads": 4, "kv": 1,
                    "head_dim": 256, "inter": 2048, "vocab": 262144, "tied": True,
                    "ctx": 32768, "theta": 1e6, "eps": 1e-6, "window": 512},
}

ARCHS = {"qwen2": "QWEN2", "llama": "LLAMA", "gemma3": "GEMMA3"}


def _q8_0_random(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Random Q8_0 bytes of a (rows, cols) matrix, made block by block in its final form:
    uniform int8 values and one fp16 scale per 32 giving about `std` (no float32 copy)."""
    blocks = np.empty((rows, cols // 32, 34), dtype=np.uint8)
    scale = np.float16(std * np.sqrt(3.0) / 127.0)
    blocks[:, :, :2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    blocks[:, :, 2:] = rng.integers(-127, 128, size=(rows, cols // 32, 32),
                                    dtype=np.int8).view(np.uint8)
    return blocks.reshape(rows, cols // 32 * 34)


def write_random_q8_0(shape: str, out: str | Path, seed: int = 0,
                      progress: Callable[[str], None] | None = None) -> Path:
    """A random-weight model of a real `shape` (SHAPES) straight to a Q8_0 GGUF, one tensor
    at a time: every matrix Q8_0 (token table and head too, as llama-quantize's Q8_0), norms
    F32 ones, Qwen2's q/k/v biases small F32 values. Peak memory is one tensor."""
    import gguf

    s, out = SHAPES[shape], Path(out)
    rng = np.random.default_rng(seed)
    arch = getattr(gguf.MODEL_ARCH, ARCHS[s["arch"]])
    h = s["hidden"]
    hd = s.get("head_dim", h // s["heads"])
    q_dim, kv_dim = s["heads"] * hd, s["kv"] * hd
    plan: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (s["vocab"], h))]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", (h,)), (b + "attn_q.weight", (q_dim, h)),
                 (b + "attn_k.weight", (kv_dim, h)), (b + "attn_v.weight", (kv_dim, h)),
                 (b + "attn_output.weight", (h, q_dim)), (b + "ffn_norm.weight", (h,)),
                 (b + "ffn_gate.weight", (s["inter"], h)), (b + "ffn_up.weight", (s["inter"], h)),
                 (b + "ffn_down.weight", (h, s["inter"]))]
        if s["arch"] == "qwen2":
            plan += [(b + "attn_q.bias", (h,)), (b + "attn_k.bias", (kv_dim,)),
                     (b + "attn_v.bias", (kv_dim,))]
        if s["arch"] == "gemma3":  # norms stored as 1 + w (ones: w = 0)
            plan += [(b + "attn_q_norm.weight", (hd,)), (b + "attn_k_norm.weight", (hd,)),
                     (b + "post_attention_norm.weight", (h,)),
                     (b + "post_ffw_norm.weight", (h,))]
    plan.append(("output_norm.weight", (h,)))
    if not s["tied"]:
        plan.append(("output.weight", (s["vocab"], h)))
    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(f"random {shape}")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(h)
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["inter"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(s["theta"])
    if s["arch"] == "gemma3":
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_sliding_window(s["window"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    vocab = s["vocab"]
    w.add_tokenizer_model("llama")
    w.add_token_list([*SPECIAL, *(f"t{i}" for i in range(len(SPECIAL), vocab))])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL,
                       *([gguf.TokenType.NORMAL] * (vocab - len(SPECIAL)))])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    q8 = gguf.GGMLQuantizationType.Q8_0
    for name, dims in plan:
        if len(dims) == 2:
            w.add_tensor_info(name, (dims[0], dims[1] // 32 * 34), np.dtype(np.uint8),
                              dims[0] * dims[1] // 32 * 34, raw_dtype=q8)
        else:
            w.add_tensor_info(name, dims, np.dtype(np.float32), dims[0] * 4)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for i, (name, dims) in enumerate(plan, 1):
            if len(dims) == 2:
                data = _q8_0_random(rng, dims[0], dims[1], 0.02)
            elif name.endswith(".bias"):
                data = (rng.standard_normal(dims[0]) * 0.02).astype(np.float32)
            else:
                data = np.ones(dims, dtype=np.float32)
            w.write_tensor_data(data)
            if progress:
                progress(f"{i}/{len(plan)} {name}")
    except BaseException:
        w.close()
        out.unlink(missing_ok=True)
        raise
    w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--q8-0":  # random_gguf.py --q8-0 SHAPE OUT [--seed N]
        p = argparse.ArgumentParser(description="a random-weight Q8_0 GGUF of a real shape")
        p.add_argument("--q8-0", dest="shape", choices=sorted(SHAPES), required=True)
        p.add_argument("out", type=Path)
        p.add_argument("--seed", type=int, default=0)
        args = p.parse_args(argv)
        write_random_q8_0(args.shape, args.out, args.seed,
                          progress=lambda s: print(f"\r{s:<60}", end="", file=sys.stderr))
        print(file=sys.stderr)
        print(args.out)
        return 0
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
