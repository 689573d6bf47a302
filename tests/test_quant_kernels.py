"""Quantized linear modules on the CPU: each backend kernel against the exact integer oracle."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.kernels import qmath
from npu_console.engine.quant.qlinear import QuantLinear


def _layer(k=256, n=192, bias=True, seed=0):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(k, n, bias=bias)
    x = torch.randn(2, 7, k)
    x[..., :4] *= 12  # a few outlier channels, as real activations have
    return lin, x


@pytest.fixture(params=["native", "torch"])
def cpu_path(request, monkeypatch):
    """Run a test on the native AVX2 kernels and on PyTorch's own (the fallback)."""
    from npu_console.engine import kernels
    from npu_console.engine.kernels import cpu, native

    if request.param == "native" and not native.available():
        pytest.skip(f"native kernels unavailable: {native.build().reason}")
    backend = cpu.CpuBackend(use_native=request.param == "native")
    monkeypatch.setitem(kernels._BACKENDS, "cpu", backend)
    return backend


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_weight_quantization_is_symmetric_and_bounded():
    w = torch.randn(64, 128)
    q, s = qmath.quantize_weight(w)
    assert q.dtype == torch.int8 and q.abs().max() <= 127 and s.shape == (64,)
    err = (qmath.dequantize_weight(q, s) - w).abs()
    assert (err <= s[:, None] / 2 + 1e-6).all()  # round-to-nearest: at most half a step
    qg, sg = qmath.quantize_weight(w, 32)
    assert sg.shape == (64, 4)
    assert (qmath.dequantize_weight(qg, sg) - w).abs().mean() <= err.mean()


@pytest.mark.parametrize("group", [0, 32])
def test_weight_scales_are_fp16_values_raised_never_lowered(group):
    """A GGUF's Q8_0 keeps fp16 scales, and so does the CPU kernels' packed copy: our scales
    are fp16 values already, so a served layer multiplies with the scales its weights were
    rounded with. Each is amax / 127 raised to the next fp16 (within 2^-10, and no weight
    clips). A layer whose channels' scales fp16 cannot hold (weights near 4e-4: subnormal)
    keeps exact fp32 ones."""
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(0)) * 0.02
    w[3] = 0.0  # a channel of zeros: the floor of 1e-8
    q, s = qmath.quantize_weight(w, group)
    amax = (w.view(64, -1, group) if group else w.view(64, 1, -1)).abs().amax(-1)
    exact = (amax / 127).clamp_min(1e-8).view_as(s)
    assert torch.equal(s.half().float(), s)
    assert (s >= exact).all() and (s <= exact * (1 + 2.0 ** -10) + 2.0 ** -24).all()
    err = (qmath.dequantize_weight(q, s) - w).abs()
    assert q.abs().max() == 127 and (err <= (s if group else s[:, None]).repeat_interleave(
        group or 128, -1).view(64, 128) / 2 + 1e-9).all()
    tiny = w * 0.02  # largest weights near 1e-3: scales near 8e-6, under fp16's normal range
    _, st = qmath.quantize_weight(tiny, group)
    assert not qmath.fits_half(st)
    want = (tiny.view(64, -1, group) if group else tiny.view(64, 1, -1)).abs().amax(-1) / 127
    assert torch.equal(st, want.clamp_min(1e-8).view_as(st))


@pytest.mark.parametrize("method", ["w8a16", "w8a8-dynamic", "w8a8-static"])
@pytest.mark.parametrize("bias,k", [(True, 256), (False, 172)])  # 172: K not a multiple of 8
def test_cpu_kernel_matches_integer_reference(method, bias, k, cpu_path):
    lin, x = _layer(k=k, bias=bias)
    s_in = x.abs().max().item() / 127 if method == "w8a8-static" else None
    q = QuantLinear.from_linear(lin, method, input_scale=s_in)
    y = q(x)
    assert y.shape == (2, 7, 192) and y.dtype == torch.float32
    q.backend = "reference"
    ref = q(x)
    # PyTorch's w8a16 runs with bf16 activations, the native one with 16-bit block floating
    # point ones (2^-15 of a block's largest value); w8a8 is exact integer math on every path
    # (also on CPUs without VNNI)
    if method != "w8a16":
        tol = 1e-5
    else:
        tol = 1e-4 if cpu_path.native_for(q) else 0.01
    assert _rel(y, ref) < tol
    assert _rel(ref, lin(x)) < 0.06  # and the int8 math itself is close to float


def test_cpu_kernels_take_bf16_models_and_any_leading_shape(cpu_path):
    lin, x = _layer()
    for method in ("w8a16", "w8a8-dynamic"):
        q = QuantLinear.from_linear(lin, method).to(torch.bfloat16)
        assert q.weight_scale.dtype == torch.float32  # scales never drop to bf16
        assert q.bias.dtype == torch.bfloat16
        y = q(x.to(torch.bfloat16)[0, 0])  # 1-D input
        assert y.shape == (192,) and y.dtype == torch.bfloat16
        assert q(x.to(torch.bfloat16)[:, :0]).shape == (2, 0, 192)  # empty batch
        assert _rel(y, lin(x[0, 0])) < 0.05


def test_per_group_w8a16(cpu_path):
    lin, x = _layer()
    q = QuantLinear.from_linear(lin, "w8a16", group_size=64)
    assert q.weight_scale.shape == (192, 4)
    y = q(x)
    q.backend = "reference"
    assert _rel(y, q(x)) < 0.01


def test_saturation_probe_and_nibble_path_agree_with_direct_int_math():
    from npu_console.engine.kernels import cpu

    lin, x = _layer(k=128, n=64, bias=False)
    q = QuantLinear.from_linear(lin, "w8a8-dynamic")
    xq = qmath.quantize_act(x.reshape(-1, 128), qmath.per_token_scale(x.reshape(-1, 128)))
    exact = (xq.double() @ q.weight.double().t()).float()  # int32 accumulators
    packed, colsum = cpu.CpuBackend(use_native=False).prepare(q)
    hi = torch.floor(xq / 16)
    out = cpu._int_rows_gemm(torch.cat([hi + 8, xq - 16 * hi]), packed)
    n = xq.shape[0]
    y = (out[:n] - 8 * colsum) * 16 + out[n:]
    assert torch.allclose(y / q.weight_scale, exact, atol=0.05)
    # the probe's answer is what the direct u8 x s8 product does on this CPU: without the
    # nibble split, activations shifted to u8 (+128) come out exact only where it says False
    sat = cpu.int16_saturation()
    assert sat in (True, False)
    ones = cpu._prepack(q.weight, torch.ones(64))
    big = torch.where(xq >= 0, torch.full_like(xq, 127), torch.full_like(xq, -127))
    for rows in (xq, big):
        direct = cpu._int_rows_gemm(rows + 128, ones) - 128 * q.weight.double().sum(1).float()
        want = (rows.double() @ q.weight.double().t()).float()
        if not sat:
            assert torch.equal(direct, want)
    # weights and activations at full scale overflow a saturating int16 pair sum for sure
    worst = cpu._int_rows_gemm(torch.full((8, 128), 255.0), cpu._prepack(
        torch.full((64, 128), 127, dtype=torch.int8), torch.ones(64)))
    assert torch.equal(worst, torch.full_like(worst, 255.0 * 127 * 128)) is not sat


@pytest.mark.parametrize("method", ["w8a16", "w8a8-dynamic"])
def test_released_plain_weight_keeps_outputs(method, cpu_path):
    lin, x = _layer()
    q = QuantLinear.from_linear(lin, method)
    before = q(x)
    q.release_plain_weight()
    # a kernel with its own packed copy frees the plain weight; one that reads it keeps it
    assert (q.weight.numel() == 0) == cpu_path.packs_own_copy(q)
    # the same products: bit for bit, or, from the VNNI builds' packed copy, summed in
    # another order (fp32 rounding)
    assert _rel(q(x), before) < 1e-6


def test_per_token_scaling_isolates_rows(cpu_path):
    # a huge row must not degrade a small row's precision (it would with per-tensor scales)
    lin, _ = _layer(bias=False)
    q = QuantLinear.from_linear(lin, "w8a8-dynamic")
    small = torch.randn(1, 256) * 0.01
    big = torch.randn(1, 256) * 1000
    y = q(torch.cat([small, big]))
    assert _rel(y[0], lin(small)[0]) < 0.03


def test_copied_layer_computes_with_its_own_weight(cpu_path):
    import copy

    lin, x = _layer()
    q = QuantLinear.from_linear(lin, "w8a16")
    before = q(x)  # prepares (and, on the native path, binds a forward to q)
    twin = copy.deepcopy(q)
    twin.weight.neg_()
    assert torch.equal(q(x), before)
    assert _rel(twin(x) - q.bias, q.bias - before) < 0.01  # the negated weight, not q's
