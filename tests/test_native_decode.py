"""Whole decode steps in one native call (engine.runtime.native_decode): the same logits and KV
rows as the runner's PyTorch loop for every family of the batched path and every int8 method,
with sequences of different lengths in scattered slots; and the plan says why when it cannot
run a model. Through the engine (greedy tokens equal generate's, the model card says "native"):
test_engine_families.test_native_decode_products_keep_greedy_tokens."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.kernels import packed as packed_kernels
from npu_console.engine.runtime.runner import BatchedRunner
from npu_console.engine.runtime.scheduler import ScheduledSeq
from support.kernels import assert_same_choice
from support.models import RunnerSeq, decode_both, needs_native, tiny, wide


@pytest.fixture(autouse=True)
def _native():
    needs_native()


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "mistral-window",
                                    "gemma2", "gemma3", "phi3"])
def test_native_step_equals_the_pytorch_loop(family):
    """Llama (GQA), Qwen2 with non-zero q/k/v biases, Qwen3 with per-head q/k norms, Mistral,
    Mistral with a 6-token window (prompts up to 40), Gemma 2 ((1 + w) sandwich norms, GeGLU,
    soft-capped scores and logits, a windowed and a full layer), Gemma 3 (q/k norms, a rotary
    table per layer kind, windows), Phi-3 (fused q/k/v and gate/up, half the head turned);
    logits and the KV rows each step wrote."""
    if family == "mistral-window":
        model = tiny("mistral", sliding_window=6).model
    elif family == "gemma2":  # scores of a few units, so that a cap of 2 bends them
        model = tiny("gemma2", attn_logit_softcapping=2.0).model
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(20)
                layer.self_attn.k_proj.weight.mul_(20)
    else:
        model = (wide(family) if family == "qwen2" else tiny(family)).model
    out, native, torch_ = decode_both(model)
    for a, b in out:
        assert a.shape == b.shape == (6, model.config.vocab_size)
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4), (a - b).abs().max()
        assert_same_choice(a, b, 1e-4 + 1e-4 * float(b.abs().max()))
    assert torch.allclose(native.kv.k, torch_.kv.k, atol=1e-5)
    assert torch.allclose(native.kv.v, torch_.kv.v, atol=1e-5)


@pytest.mark.parametrize("family", ["qwen2", "gemma2", "mistral-window"])
def test_an_fp16_kv_cache_runs_natively_like_the_pytorch_loop(family):
    """The KV cache in fp16 (half the bytes attention reads): the native step writes the same
    rounded rows as the PyTorch loop (which computes in fp32 from them), and both stay within
    fp16's rounding of the fp32-cache model: logits and greedy choices."""
    if family == "mistral-window":
        model = tiny("mistral", sliding_window=6).model
    elif family == "gemma2":
        model = tiny("gemma2", attn_logit_softcapping=2.0).model
    else:
        model = wide(family).model
    out, native, torch_ = decode_both(model, kv_dtype="float16")
    assert native.kv.k.dtype == torch.float16 and native.kv.nbytes * 2 == _fp32_kv_bytes(native)
    for a, b in out:
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4), (a - b).abs().max()
        assert_same_choice(a, b, 1e-4 + 1e-4 * float(b.abs().max()))
    # the same rows as the fp32 test holds them (1e-5), plus one last bit of half
    for mine, theirs in ((native.kv.k, torch_.kv.k), (native.kv.v, torch_.kv.v)):
        assert torch.allclose(mine.float(), theirs.float(), rtol=1e-3, atol=3e-5)
    full, _, _ = decode_both(model)  # the fp32 cache: the rounding of half is all that differs
    for (a, _), (f, _) in zip(out, full):
        tol = 2e-3 * float(f.abs().max())
        assert (a - f).abs().max() <= tol, (a - f).abs().max()
        assert_same_choice(a, f, tol)


@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (8, 2), (12, 2), (4, 4)])
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_query_heads_that_share_a_kv_head_attend_together_like_the_pytorch_loop(
        heads, kv_heads, kv_dtype):
    """Attention takes a KV head's query heads together (cpu_decode.c attention: each key and
    value row loaded once for up to four of them, AVX-512 builds; more in several passes) when
    the batch has enough KV heads to share the threads, else one head at a time: groups of 3,
    4, 6 and 1 at head size 64 (the vector paths, not the scalar tail), a sliding window
    shorter than the prompts, against the PyTorch loop; and a lone sequence (one head a task)
    agrees with its row of the batch."""
    model = tiny("mistral", hidden_size=64 * heads, num_attention_heads=heads,
                 num_key_value_heads=kv_heads, intermediate_size=128, sliding_window=24).model
    out, _, _ = decode_both(model, kv_dtype=kv_dtype)
    for a, b in out:
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4), (a - b).abs().max()
        assert_same_choice(a, b, 1e-4 + 1e-4 * float(b.abs().max()))
    alone = BatchedRunner(model, num_slots=8, max_len=96, kv_dtype=kv_dtype)
    seq = RunnerSeq(list(range(3, 43)), 0)  # 40 tokens: past the window
    with torch.inference_mode():
        alone.execute([ScheduledSeq(seq, 0, len(seq.ids))], 0)
        seq.ids.append(7)
        lone = alone.execute([ScheduledSeq(seq, len(seq.ids) - 1, 1)], 1)
        ref = BatchedRunner(model, num_slots=8, max_len=96, linear_kernels="torch",
                            kv_dtype=kv_dtype)
        twin = RunnerSeq(list(seq.ids[:-1]), 0)
        ref.execute([ScheduledSeq(twin, 0, len(twin.ids))], 0)
        twin.ids.append(7)
        want = ref.execute([ScheduledSeq(twin, len(twin.ids) - 1, 1)], 1)
    assert alone.decode_plan is not None
    assert torch.allclose(lone, want, rtol=1e-4, atol=1e-4), (lone - want).abs().max()


def _fp32_kv_bytes(runner) -> int:
    return 2 * runner.kv.k.numel() * 4


def _quantized(method: str, group_size: int = 0, family: str = "qwen2"):
    from npu_console.engine.quant.apply import prepare_for_serving, quantize_model
    from npu_console.engine.quant.calib import collect_stats
    from npu_console.engine.quant.config import QuantConfig, select_layers

    model = wide(family).model
    smooth = method == "w8a8-static" and family == "qwen2"  # phi3's fused q/k/v does not fold
    cfg = QuantConfig(method=method, smoothquant=0.5 if smooth else None,
                      group_size=group_size)
    stats = None
    if cfg.needs_calibration:
        g = torch.Generator().manual_seed(2)
        data = [torch.randint(3, 300, (1, 32), generator=g) for _ in range(4)]
        stats = collect_stats(model, data, select_layers(model, cfg).quantize)
    quantize_model(model, cfg, stats)
    prepare_for_serving(model)
    return model


@pytest.mark.parametrize("family", ["qwen2", "phi3", "gemma3"])
@pytest.mark.parametrize("method", ["w8a16", "w8a8-dynamic", "w8a8-static"])
def test_native_step_runs_int8_layers_like_the_pytorch_loop(method, family):
    """Both paths run the same exact integer products; what differs is float summation order
    in norms and attention. W8A16 therefore agrees to float precision; W8A8 rounds activations
    to int8, where such a difference can move a value across a rounding boundary, so it is held
    to a share of one quantization step and the same greedy tokens. Phi-3's fused projections
    run as row ranges of one int8 weight (its scales, weight sums and bias offset with it)."""
    model = _quantized(method, family=family)
    out, _, _ = decode_both(model)
    for a, b in out:
        if method == "w8a16":  # its int16 activation blocks may round one step apart too
            tol = 1e-4 + 1e-4 * float(b.abs().max())
            assert (a - b).abs().max() <= tol, (a - b).abs().max()
        else:
            assert (a - b).abs().max() <= 0.02 * b.abs().max(), (a - b).abs().max()
            tol = 0.02 * float(b.abs().max())
        assert_same_choice(a, b, tol)


@pytest.mark.parametrize("family,group_size", [("qwen2", 32), ("qwen2", 128), ("phi3", 32)])
def test_native_step_runs_grouped_w8a16_layers_like_the_pytorch_loop(family, group_size):
    """Per-group weight scales in the native step (cpu_decode.c hands the group to the W8A16
    product) against the runner's loop over the same layers; Phi-3's fused q/k/v and gate/up
    are handed over from row offsets (of the packed copy on VNNI builds)."""
    model = _quantized("w8a16", group_size, family)
    out, native, _ = decode_both(model)
    attn = native.layers[0].self_attn
    layer = attn.qkv_proj if family == "phi3" else attn.q_proj
    assert layer.group_size == group_size
    assert layer.plain_scale().shape == (layer.out_features, 256 // group_size)
    # on x86 builds the step multiplies the packed copy (pk_gemm: cpu_i8_vnni.c, cpu_pk_avx2.c)
    assert (layer.packed is not None) == packed_kernels.available()
    for a, b in out:
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4), (a - b).abs().max()
        assert_same_choice(a, b, 1e-4 + 1e-4 * float(b.abs().max()))


def test_a_mixed_step_keeps_the_pytorch_loop_and_results_agree():
    """A step with a prefill chunk beside a decode row runs the PyTorch loop, in a runner whose
    earlier decode-only steps ran natively (in other slots), with the reference's results."""
    model = tiny("qwen2").model
    _, native, _ = decode_both(model, steps=2)
    seq = RunnerSeq(list(range(5, 30)), 2)
    other = RunnerSeq(list(range(7, 12)), 5)
    with torch.inference_mode():
        native.execute([ScheduledSeq(other, 0, len(other.ids))], 0)
        mixed = native.execute([ScheduledSeq(other, len(other.ids) - 1, 1),
                                ScheduledSeq(seq, 0, len(seq.ids))], 1)
        ref = BatchedRunner(model, num_slots=8, max_len=96, linear_kernels="torch",
                            kv_dtype="float32")
        ref.execute([ScheduledSeq(other, 0, len(other.ids))], 0)
        expect = ref.execute([ScheduledSeq(other, len(other.ids) - 1, 1),
                              ScheduledSeq(seq, 0, len(seq.ids))], 1)
    assert torch.allclose(mixed, expect, rtol=1e-5, atol=1e-5)


def test_the_plan_says_why_it_does_not_apply(monkeypatch):
    from npu_console.engine.kernels import native
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.config import QuantConfig
    from npu_console.engine.runtime import native_decode

    def reason(model, **kw):
        runner = BatchedRunner(model, num_slots=2, max_len=32, **kw)
        assert runner.decode_plan is None
        return runner.decode_plan_reason

    llama = tiny("llama").model
    assert "float parts in bfloat16" in reason(tiny("llama").model.to(torch.bfloat16))
    assert "KV cache in bfloat16, not float32 or float16" in reason(llama, kv_dtype="bfloat16")
    assert "PyTorch kernels requested" in reason(llama, linear_kernels="torch")
    grouped = tiny("llama").model  # groups the W8A16 kernel takes plan natively (above);
    quantize_model(grouped, QuantConfig(method="w8a16", group_size=32))
    assert native_decode.plan_for(BatchedRunner(grouped, num_slots=2, max_len=32))[0] is not None
    down = grouped.model.layers[1].mlp.down_proj  # others (a loaded checkpoint's) do not
    grouped.model.layers[1].mlp.down_proj = type(down).from_linear(
        torch.nn.Linear(down.in_features, down.out_features, bias=False), "w8a16", group_size=16)
    assert "w8a16 with int8 scales per group of 16 inputs" in reason(grouped)
    pinned = tiny("llama").model
    quantize_model(pinned, QuantConfig(method="w8a16"))
    pinned.model.layers[1].mlp.down_proj.backend = "reference"
    assert "pinned to the 'reference' backend" in reason(pinned)
    monkeypatch.setattr(native, "library", lambda: None)
    assert "native kernels unavailable" in reason(llama)
    monkeypatch.undo()
    assert native_decode.plan_for(BatchedRunner(llama, num_slots=2, max_len=32))[0] is not None


def _keep_float(parent: torch.nn.Module, name: str) -> None:
    """parent.name (an int8 layer) back to a float nn.Linear of its dequantized weight, as a
    layer the recipe keeps float"""
    q = getattr(parent, name)
    lin = torch.nn.Linear(q.in_features, q.out_features, bias=q.bias is not None)
    with torch.no_grad():
        lin.weight.copy_(q.dequantized_weight())
        if q.bias is not None:
            lin.bias.copy_(q.bias)
    setattr(parent, name, lin)


def test_products_that_share_an_input_requantize_it_only_when_they_read_it_alike():
    """q/k/v (and gate/up) read one input, which the native step quantizes once for all of
    them; a neighbour with another static scale, or kept float, must not be handed the first
    one's int8 rows. Static W8A8 with k_proj at twice q_proj's input scale, v_proj and gate_proj
    float: the native step still equals the PyTorch loop."""
    from npu_console.engine.quant.apply import prepare_for_serving

    model = _quantized("w8a8-static")
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        attn.k_proj.input_scale.mul_(2.0)
        for parent, name in ((attn, "v_proj"), (mlp, "gate_proj")):
            _keep_float(parent, name)
    prepare_for_serving(model)
    out, native, _ = decode_both(model)
    assert native.layers[0].self_attn.k_proj.input_scale.item() != \
        native.layers[0].self_attn.q_proj.input_scale.item()
    for a, b in out:
        assert (a - b).abs().max() <= 0.02 * b.abs().max(), (a - b).abs().max()
        assert_same_choice(a, b, 0.02 * float(b.abs().max()))


def test_packed_products_of_one_input_run_apart_when_a_neighbour_is_not_packed():
    """q/k/v and gate/up run as one packed product in one parallel region (cpu_decode.c
    `linears`) only when all of them are packed alike; with v_proj and up_proj kept float the
    others run apart, each packed one reusing the rows already converted for its input or
    converting them again after a float product. Grouped W8A16 (packed on x86 builds): the
    native step still equals the PyTorch loop."""
    from npu_console.engine.quant.apply import prepare_for_serving

    model = _quantized("w8a16", 32)
    for layer in model.model.layers:
        for parent, name in ((layer.self_attn, "v_proj"), (layer.mlp, "up_proj")):
            _keep_float(parent, name)
    prepare_for_serving(model)
    out, native, _ = decode_both(model)
    attn = native.layers[0].self_attn
    assert (attn.q_proj.packed is not None) == packed_kernels.available()
    assert isinstance(attn.v_proj, torch.nn.Linear)
    for a, b in out:
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4), (a - b).abs().max()
        assert_same_choice(a, b, 1e-4 + 1e-4 * float(b.abs().max()))
