"""W8A8 with int8 activations per block of 32 values (issue 32; QuantConfig.act_blocks,
Int8Linear.act_rows = "block"): the native product against its integer oracle on awkward
shapes, the reference backend, the decode step, what it buys over per-token scales on an
outlier channel, and that a checkpoint keeps the choice."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.kernels import native, qmath
from npu_console.engine.kernels.int8_linear import Int8Linear

needs_native = pytest.mark.skipif(not native.available(),
                                  reason=f"native kernels unavailable: {native.build().reason}")

SHAPES = [(1, 1, 1), (1, 5, 15), (2, 7, 16), (3, 130, 33), (4, 3, 100), (5, 64, 48),
          (9, 33, 31), (70, 9, 300), (16, 67, 1000)]


def _case(m, n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * 3
    x[:, 0] *= 40  # an outlier channel
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
    s = torch.rand(n, generator=g) + 0.01
    return x, w, s


def _oracle(x, w, s):
    """Each block's int32 sum times its activation scale, then the channel scale, in float64."""
    q, sx = qmath.block_quantize_act(x)
    return (qmath.block_dequantize_act(q.double(), sx.double()) @ w.double().t()) * s.double()


def test_block_quantizer_scales_each_block_on_its_own():
    x = torch.zeros(2, 70)
    x[0, :32] = torch.linspace(-1, 1, 32)
    x[0, 32:64] = torch.linspace(-100, 100, 32)  # a loud block next to a quiet one
    x[1, 64:] = 5.0  # the partial last block
    q, s = qmath.block_quantize_act(x)
    assert q.shape == (2, 70) and s.shape == (2, 3)
    assert s[0, 0] == pytest.approx(1 / 127) and s[0, 1] == pytest.approx(100 / 127)
    assert q[0, :32].abs().max() == 127 and q[0, 32:64].abs().max() == 127
    assert torch.equal(q[1, 64:], torch.full((6,), 127.0))
    err = (qmath.block_dequantize_act(q, s) - x).abs()
    assert err[0, :32].max() <= (1 / 127) / 2 + 1e-7  # half a step of its own scale


@needs_native
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_native_blocks_are_exact_integer_math_per_block(m, n, k):
    x, w, s = _case(m, n, k)
    y = native.w8a8_blocks(x, w, s)
    ref = _oracle(x, w, s)
    assert y.dtype == torch.float32 and y.shape == (m, n)
    assert ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)) < 1e-6


def test_blocks_beat_per_token_scales_on_an_outlier_channel():
    x, w, s = _case(8, 64, 512, seed=3)
    exact = (x.double() @ w.double().t()) * s.double()
    st = qmath.per_token_scale(x)
    per_token = ((qmath.quantize_act(x, st) * st).double() @ w.double().t()) * s.double()
    blocks = _oracle(x, w, s)
    err_tok = (per_token - exact).norm() / exact.norm()
    err_blk = (blocks - exact).norm() / exact.norm()
    assert err_blk < err_tok / 3, (err_blk, err_tok)  # 0.014 against 0.048 here


def _layer(n, k, backend="auto"):
    x, w, s = _case(6, n, k, seed=5)
    mod = Int8Linear(k, n, "w8a8-dynamic", bias=True)
    mod.weight.copy_(w)
    mod.weight_scale.copy_(s)
    mod.bias.copy_(torch.linspace(-1, 1, n))
    mod.act_rows = "block"
    mod.backend = backend
    return mod, x


def test_reference_backend_follows_the_block_rule():
    mod, x = _layer(24, 80, backend="reference")
    ref = _oracle(x, mod.weight, mod.weight_scale) + mod.bias.double()
    assert torch.allclose(mod(x).double(), ref, rtol=1e-6, atol=1e-6)
    mod.act_rows = "token"  # per token is another product: the switch is read
    assert not torch.allclose(mod(x).double(), ref, rtol=1e-4, atol=1e-4)


@needs_native
def test_the_cpu_layer_runs_the_native_block_product():
    mod, x = _layer(24, 80)
    ref = mod.__class__.forward  # noqa: F841 - the module's own forward is what runs
    got = mod(x)
    assert mod._fast_forward is not None  # bound to the native call
    want = (_oracle(x, mod.weight, mod.weight_scale) + mod.bias.double()).float()
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_native
def test_decode_step_runs_block_layers_like_the_pytorch_loop():
    from npu_console.engine.quant.apply import prepare_for_serving, quantize_model
    from npu_console.engine.quant.config import QuantConfig
    from support.models import decode_both, wide

    model = wide("qwen2").model
    quantize_model(model, QuantConfig(method="w8a8-dynamic", act_blocks=True), None)
    prepare_for_serving(model)
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert layers and all(m.act_rows == "block" for m in layers)
    out, native_runner, _ = decode_both(model)
    assert "W8A8" not in (native_runner.decode_plan_reason or "")
    for a, b in out:
        assert (a - b).abs().max() <= 0.02 * b.abs().max(), (a - b).abs().max()
        assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_act_blocks_are_only_for_dynamic_w8a8():
    from npu_console.engine.quant.config import QuantConfig, QuantError

    for method in ("w8a16", "w8a8-static"):
        with pytest.raises(QuantError, match="activation blocks are for w8a8-dynamic"):
            QuantConfig(method=method, act_blocks=True)


def test_a_native_checkpoint_keeps_the_block_choice(tmp_path, stories_dir):
    from npu_console.engine.models.loader import load_model
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.config import QuantConfig
    from npu_console.engine.quant.io import export, load_quantized_model

    loaded = load_model(stories_dir, device="cpu", dtype="float32")
    quantize_model(loaded.model, QuantConfig(method="w8a8-dynamic", act_blocks=True), None)
    export(loaded.model, tmp_path / "q", "native", source_dir=str(stories_dir))
    back = load_quantized_model(tmp_path / "q")
    mods = [m for m in back.modules() if isinstance(m, Int8Linear)]
    assert mods and all(m.act_rows == "block" for m in mods)
    assert back.npu_quant.config["act_blocks"] is True
