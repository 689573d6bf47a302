"""tests/bench/random_gguf.py: the random Qwen2 benchmark model goes to a GGUF with the same weights.

A tiny model of the random benchmark family (2 layers, hidden 64) is written with the real
make_random_qwen, turned into a GGUF and read back with gguf's own reader. The llama.cpp part
(load and run the Q8_0 of it) runs only where the tools are built.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent / "bench"
sys.path.insert(0, str(BENCH))

import bench_peer
import random_gguf

gguf = pytest.importorskip("gguf")
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300,
        "max_position_embeddings": 256, "rope_theta": 500000.0}


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory) -> Path:
    from npu_console.engine.bench.random_model import make_random_qwen

    return make_random_qwen(tmp_path_factory.mktemp("tiny") / "tiny-random", seed=3,
                            dtype="float32", **TINY)


def _source(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def _field(reader, key):
    return reader.fields[key].contents()


def test_random_folder_is_detected_and_real_ones_are_not(tiny_qwen, demo_model_dir, tmp_path):
    assert random_gguf.needs_own_writer(tiny_qwen)
    assert not random_gguf.needs_own_writer(demo_model_dir)  # llama with a real BPE tokenizer
    assert not random_gguf.needs_own_writer(tmp_path)  # empty folder


def test_f32_gguf_holds_the_same_weights_names_and_metadata(tiny_qwen, tmp_path):
    out = random_gguf.write_qwen2_gguf(tiny_qwen, tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(out)
    tensors = {t.name: t for t in reader.tensors}
    expected = {"token_embd.weight", "output_norm.weight"} | {
        f"blk.{i}.{part}" for i in range(2) for part in (
            "attn_norm.weight", "ffn_norm.weight", "attn_q.weight", "attn_q.bias",
            "attn_k.weight", "attn_k.bias", "attn_v.weight", "attn_v.bias",
            "attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")}
    assert set(tensors) == expected  # tied head: no output.weight, llama.cpp reuses token_embd

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, 2)
    src = _source(tiny_qwen)
    assert len(src) == len(expected)
    for hf_name, want in src.items():
        t = tensors[names.get_name(hf_name, try_suffixes=(".weight", ".bias"))]
        assert t.tensor_type == gguf.GGMLQuantizationType.F32
        assert list(t.shape) == list(reversed(want.shape))  # GGUF lists dims innermost first
        np.testing.assert_array_equal(np.asarray(t.data).reshape(want.shape), want)
    assert tensors["blk.1.attn_k.weight"].shape.tolist() == [64, 32]  # 2 kv heads x 16

    assert _field(reader, "general.architecture") == "qwen2"
    assert _field(reader, "qwen2.embedding_length") == 64
    assert _field(reader, "qwen2.block_count") == 2
    assert _field(reader, "qwen2.feed_forward_length") == 128
    assert _field(reader, "qwen2.attention.head_count") == 4
    assert _field(reader, "qwen2.attention.head_count_kv") == 2
    assert _field(reader, "qwen2.context_length") == 256
    assert _field(reader, "qwen2.rope.freq_base") == 500000.0
    assert _field(reader, "qwen2.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == 300 and tokens[:4] == ["<unk>", "<s>", "</s>", "t3"]
    assert tokens[-1] == "t299"
    assert len(_field(reader, "tokenizer.ggml.scores")) == 300
    types = _field(reader, "tokenizer.ggml.token_type")
    assert types[:4] == [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL,
                         gguf.TokenType.CONTROL, gguf.TokenType.NORMAL]
    assert _field(reader, "tokenizer.ggml.bos_token_id") == 1
    assert _field(reader, "tokenizer.ggml.eos_token_id") == 2


def test_f16_casts_matrices_and_keeps_norms_and_biases_f32(tiny_qwen, tmp_path):
    out = random_gguf.write_qwen2_gguf(tiny_qwen, tmp_path / "tiny16.gguf", "f16")
    tensors = {t.name: t for t in gguf.GGUFReader(out).tensors}
    src = _source(tiny_qwen)
    up = tensors["blk.0.ffn_up.weight"]
    assert up.tensor_type == gguf.GGMLQuantizationType.F16
    want = src["model.layers.0.mlp.up_proj.weight"]
    np.testing.assert_array_equal(np.asarray(up.data).reshape(want.shape),
                                  want.astype(np.float16))
    bias = tensors["blk.0.attn_q.bias"]
    assert bias.tensor_type == gguf.GGMLQuantizationType.F32
    np.testing.assert_array_equal(np.asarray(bias.data),
                                  src["model.layers.0.self_attn.q_proj.bias"])


def test_bad_input_gets_a_clear_error(tiny_qwen, demo_model_dir, tmp_path):
    with pytest.raises(ValueError, match="qwen2 only"):
        random_gguf.write_qwen2_gguf(demo_model_dir, tmp_path / "demo.gguf")
    with pytest.raises(ValueError, match="outtype"):
        random_gguf.write_qwen2_gguf(tiny_qwen, tmp_path / "x.gguf", "q8")
    broken = tmp_path / "broken"
    broken.mkdir()
    cfg = json.loads((tiny_qwen / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        random_gguf.write_qwen2_gguf(broken, tmp_path / "broken.gguf")
    assert not (tmp_path / "broken.gguf").exists()


def test_bench_peer_routes_the_random_folder_to_the_writer(tiny_qwen, tmp_path):
    # llama_bin only matters for the converter path, which this must not take
    out = bench_peer.to_gguf(tiny_qwen, tmp_path / "no-llama" / "build" / "bin", tmp_path)
    assert out == tmp_path / "tiny-random-f32.gguf" and out.is_file()
    with pytest.raises(SystemExit):  # one source, not both
        bench_peer.main(["--model", str(tiny_qwen), "--random-shape", "qwen2.5-0.5b"])


@pytest.fixture
def llama_bin() -> Path:
    """Where llama.cpp's llama-bench and llama-quantize are: $LLAMA_CPP_BIN, else on PATH. The
    bench lane (`make test-bench`, which sets NPU_CONSOLE_BENCH_TOOLS=1) fails without them."""
    import os
    import shutil

    folder = os.environ.get("LLAMA_CPP_BIN")
    if folder is None and shutil.which("llama-bench"):
        folder = str(Path(shutil.which("llama-bench")).parent)
    if folder and all((Path(folder) / t).is_file() for t in ("llama-bench", "llama-quantize")):
        return Path(folder)
    message = ("llama.cpp's llama-bench and llama-quantize not found (set LLAMA_CPP_BIN or put "
               "them on PATH; ../shared/tools/build_llama_cpp.sh builds them)")
    if os.environ.get("NPU_CONSOLE_BENCH_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.mark.bench
def test_llama_cpp_loads_and_runs_the_q8_0(tiny_qwen, tmp_path, llama_bin):
    f32 = random_gguf.write_qwen2_gguf(tiny_qwen, tmp_path / "tiny.gguf")
    q8 = tmp_path / "tiny-q8_0.gguf"
    subprocess.run([llama_bin / "llama-quantize", f32, q8, "Q8_0", "1"], check=True,
                   capture_output=True)
    res = subprocess.run([llama_bin / "llama-bench", "-m", q8, "-p", "0", "-n", "4", "-r", "1",
                          "-t", "1", "-o", "jsonl"], capture_output=True, text=True, check=True)
    row = json.loads(res.stdout.strip().splitlines()[-1])
    assert row["model_n_params"] == sum(a.size for a in _source(tiny_qwen).values())
    assert row["n_gen"] == 4 and row["avg_ts"] > 0
