"""A GGUF file loaded straight into INT8 (engine.quant.gguf_load, `--load-as int8`): Q8_0 with no
loss, other block types rounded per group of 32, the memory plan from the header, refusals in
one line, and the CLI running it. Tiny random-weight models written with the `gguf` package's
own writer and quantizer (the layout llama-quantize writes), so the default lane needs no
llama.cpp."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.kernels.native import available as native_available
from support.gguf import write_model_gguf
from support.models import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

IDS = [[5, 17, 99, 3, 250, 7, 41, 180, 2, 66]]


def _roundtrip(model, qtype: str):
    """`model` with every matrix replaced by what a `qtype` file holds (gguf's quantizer, then
    its dequantizer): the weights our float path reads from such a file."""
    import gguf

    kind = getattr(gguf.GGMLQuantizationType, qtype)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                data = gguf.quants.dequantize(gguf.quants.quantize(p.numpy(), kind), kind)
                p.copy_(torch.from_numpy(data))
    return model


def _pin(model, backend: str):
    for m in model.modules():
        if hasattr(m, "backend"):
            m.backend = backend


def _logits(model) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor(IDS)).logits[0]


@pytest.mark.parametrize("family,tied", [("llama", False), ("qwen2", True)])
def test_q8_0_loads_as_int8_with_the_files_own_values(tmp_path, family, tied):
    """Llama's Q/K rows come back in transformers' order (llama.cpp permutes them), a tied
    table is one int8 table for the embedding and the head, and the logits equal the float
    model on the file's dequantized weights within fp32 rounding (2e-6 here; the int8 model
    on the exact float64 reference backend) and within 2e-3 on the native kernels (their
    16-bit block activations)."""
    from npu_console.engine.models import load_model
    from npu_console.engine.quant.qlinear import QuantEmbedding, QuantLinear
    from npu_console.engine.runtime.model_size import model_size

    original = tiny(family, tie_word_embeddings=tied).model
    path = write_model_gguf(original, tmp_path / f"{family}.gguf", "Q8_0")
    loaded = load_model(path, load_as="int8")
    model = loaded.model
    assert loaded.quantization == "w8a16" and type(model) is type(original)
    linears = [m for m in model.modules() if isinstance(m, QuantLinear)]
    assert len(linears) == 7 * 2 + 1 and all(m.group_size == 32 for m in linears)
    emb = model.get_input_embeddings()
    assert isinstance(emb, QuantEmbedding) and emb.is_tied == tied
    assert model.npu_quant.int8_head == {"head": "lm_head", "embedding": "model.embed_tokens",
                                         "tied": tied}
    # packed for serving, its int8 weights freed: still the float model's parameter count
    # (what /v1/models and the Models page show), at about a quarter of its bytes
    size, float_size = model_size(model), model_size(original)
    assert size.parameters == float_size.parameters == sum(p.numel() for p in original.parameters())
    assert float_size.weight_bytes / 4.5 < size.weight_bytes < float_size.weight_bytes / 3
    want = _roundtrip(original, "Q8_0")
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):  # dequantized int8 == the file's values, exactly
            assert torch.equal(m.dequantized_weight(), want.get_submodule(name).weight), name
    ref = _logits(want)
    # the native kernels' 16-bit block activations; PyTorch's grouped fallback takes bf16
    native = linears[0].kernel_name().startswith("native")
    assert (_logits(model) - ref).abs().max() < (2e-4 if native else 1e-2 * ref.abs().max())
    _pin(model, "reference")
    assert (_logits(model) - ref).abs().max() < 2e-6


def test_other_block_types_round_to_int8_per_group(tmp_path):
    """A Q4_0 file: each matrix dequantized and rounded to int8 per 32 at once, so each int8
    weight is within half a step of the file's value, and the logits stay close."""
    from npu_console.engine.models import load_model
    from npu_console.engine.quant.qlinear import QuantLinear

    original = tiny("llama").model
    path = write_model_gguf(original, tmp_path / "q4.gguf", "Q4_0")
    model = load_model(path, load_as="int8").model
    want = _roundtrip(original, "Q4_0")
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):
            step = m.plain_scale().repeat_interleave(32, dim=1)
            err = (m.dequantized_weight() - want.get_submodule(name).weight).abs()
            assert (err <= step / 2 + 1e-7).all(), name
    # the Q4_0 token table stays float (only a Q8_0 table is kept in int8)
    assert type(model.get_input_embeddings()) is torch.nn.Embedding
    _pin(model, "reference")
    ref = _logits(want)
    assert (_logits(model) - ref).abs().max() < 0.02 * ref.abs().max()


def test_the_memory_plan_is_the_bytes_the_model_holds(tmp_path):
    """The header's INT8 plan (no tensor read) equals what the loaded model keeps: int8
    matrices, their scales (fp16 in the packed copies of x86 builds), the float norms."""
    from npu_console.engine.kernels.int8_linear import Int8Linear
    from npu_console.engine.models import estimate_memory, inspect_model_folder, load_model
    from npu_console.engine.models.memory import GGUF_INT8

    path = write_model_gguf(tiny("qwen2", tie_word_embeddings=True).model,
                            tmp_path / "q.gguf", "Q8_0")
    report = inspect_model_folder(path)
    est = estimate_memory(report, "float32", context=64, quantization=GGUF_INT8)
    model = load_model(path, load_as="int8").model
    # with the tensors of the CPU kernels' packed copies (grouped W8A16 on VNNI builds)
    packed = [m.packed for m in model.modules()
              if isinstance(m, Int8Linear) and m.packed is not None]
    held = {t.data_ptr(): t.numel() * t.element_size()
            for t in [*model.parameters(), *model.buffers(),
                      *(x for p in packed for x in (p.weight, p.scale))] if t.numel()}
    rotary = sum(b.numel() * b.element_size() for n, b in model.named_buffers()
                 if "rotary" in n)
    # the packed copies round their channels up to strips of 16 (the plan counts none)
    padding = sum((p.weight.numel() // p.in_features - p.out_features)
                  * (p.in_features + 2 * (p.in_features // p.group)) for p in packed)
    assert est.weight_bytes == sum(held.values()) - rotary - padding
    float_est = estimate_memory(report, "float32", context=64)
    assert est.weight_bytes < float_est.weight_bytes / 3  # int8 + 1/8 for scales vs 4 bytes


def test_refusals_are_one_line_with_the_numbers(tmp_path, stories_dir):
    from npu_console.engine.models import ModelLoadError, load_model

    path = write_model_gguf(tiny("llama").model, tmp_path / "m.gguf", "Q8_0")
    with pytest.raises(ModelLoadError) as err:
        load_model(path, load_as="int8", context=2**40)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("not enough memory: needs about")
    assert "KV cache" in msg and "free on" in msg
    with pytest.raises(ModelLoadError, match="reads GGUF files"):
        load_model(stories_dir, load_as="int8")
    with pytest.raises(ModelLoadError, match="unknown load form"):
        load_model(path, load_as="int4")


def test_doctor_shows_the_plan_in_both_forms(tmp_path, capsys):
    from npu_console.cli.main import main

    path = write_model_gguf(tiny("llama").model, tmp_path / "m.gguf", "Q8_0")
    main(["doctor", "--model", str(path)])
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "memory plan" in ln)
    assert "as float32: weights" in line and "as int8: weights" in line
    # the KV cache as the engine will allocate it: fp16 on CPU with the native kernels
    kv = "float16" if native_available() else "float32"
    assert f"(256 tokens x 1, {kv})" in line and "headroom" in line


@pytest.mark.slow  # SmolLM2-135M (../shared, Q4_1) rounded to int8 on load: ~30 s on 2 cores
def test_generate_loads_the_real_gguf_as_int8_and_says_paris(smollm2_gguf, capsys):
    from npu_console.cli.main import main

    assert main(["generate", "--model", str(smollm2_gguf), "--load-as", "int8", "--prompt",
                 "The capital of France is", "--max-tokens", "8", "--temperature", "0"]) == 0
    assert "Paris" in capsys.readouterr().out
