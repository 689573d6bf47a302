"""The native AVX2 kernels (engine/kernels/cpu_gemm.c): built on first use, exact against
integer / float64 math on awkward shapes (W8A16: on its 16-bit activations), and an honest
fallback when they cannot be built."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from npu_console.engine.kernels import native, qmath

needs_native = pytest.mark.skipif(not native.available(),
                                  reason=f"native kernels unavailable: {native.build().reason}")

# rows x outputs x inputs: tails of every tile size (4 rows, 2-4 outputs, 8/16-wide K)
SHAPES = [(1, 1, 1), (1, 5, 15), (2, 7, 16), (3, 130, 17), (4, 3, 100), (5, 64, 48),
          (9, 33, 31), (70, 9, 300)]


def _case(m, n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * 3
    x[:, 0] *= 20  # an outlier channel
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
    s = torch.rand(n, generator=g) + 0.01
    return x, w, s


@needs_native
@pytest.mark.parametrize("m,n,k", SHAPES + [(16, 67, 1000)])
def test_w8a16_is_exact_on_its_16_bit_activations(m, n, k):
    x, w, s = _case(m, n, k)
    y = native.w8a16(x, w, s)
    values, scale = native.blockfloat16(x)
    # per block an exact int32 sum, then fp32 across blocks: a few ulps of fp32
    ref = ((values * scale) @ w.double().t()) * s.double()
    assert y.dtype == torch.float32 and y.shape == (m, n)
    assert ((y.double() - ref).abs().max() / ref.abs().max()) < 1e-6
    # and 16-bit block floating point is far closer to float64 math than bf16 activations
    # (2^-15 of each block's largest value against 2^-9 of each value)
    exact = (x.double() @ w.double().t()) * s.double()
    bf16 = (x.bfloat16().double() @ w.double().t()) * s.double()
    assert (y.double() - exact).abs().max() < (bf16 - exact).abs().max() / 4


def test_blockfloat16_over_spans_keeps_15_bits_of_each_spans_largest_value():
    """The packed AVX2 product's rows (packing.act_span): one power-of-two scale per span of 4
    blocks, the last one cut at K."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 300, generator=g) * torch.logspace(-20, 20, 300)
    values, scale = native.blockfloat16(x, span=4)
    width = 4 * native.BLOCK
    for lo in range(0, 300, width):
        sl = slice(lo, min(lo + width, 300))
        top = values[:, sl].abs().amax(-1)
        assert ((top >= 2 ** 14) & (top <= 2 ** 15 - 1)).all()
        assert (scale[:, sl] == scale[:, sl][:, :1]).all()  # one scale per span
        err = (values[:, sl] * scale[:, sl] - x[:, sl].double()).abs().amax(-1)
        assert (err <= x[:, sl].double().abs().amax(-1) * 2 ** -15).all()
    # the span's scale is its largest block's: that block's values are the same as alone
    alone, alone_scale = native.blockfloat16(x)
    for lo in range(0, 300, width):
        big = max(range(lo, min(lo + width, 300), native.BLOCK),
                  key=lambda b: x[0, b:b + native.BLOCK].abs().max().item())
        sl = slice(big, min(big + native.BLOCK, 300))
        assert torch.equal(values[0, sl], alone[0, sl])
        assert torch.equal(scale[0, sl], alone_scale[0, sl])


def test_blockfloat16_keeps_15_bits_of_each_blocks_largest_value():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 100, generator=g) * torch.logspace(-30, 30, 100)  # every magnitude
    values, scale = native.blockfloat16(x)
    blocks = [slice(b, min(b + native.BLOCK, 100)) for b in range(0, 100, native.BLOCK)]
    for sl in blocks:
        top = values[:, sl].abs().amax(-1)
        assert ((top >= 2 ** 14) & (top <= 2 ** 15 - 1)).all()
        assert (scale[:, sl] == scale[:, sl][:, :1]).all()  # one scale per block
        assert torch.equal(torch.log2(scale[:, sl]), torch.log2(scale[:, sl]).round())
        err = (values[:, sl] * scale[:, sl] - x[:, sl].double()).abs().amax(-1)
        assert (err <= x[:, sl].double().abs().amax(-1) * 2 ** -15).all()


@needs_native
def test_w8a16_non_finite_activations_poison_only_their_rows():
    x, w, s = _case(4, 9, 70)
    x[1, 40] = float("nan")
    x[2, 3] = float("inf")
    x[3] *= 1e-30  # tiny, but a normal product
    y = native.w8a16(x, w, s)
    assert y[1].isnan().all() and y[2].isnan().all()
    assert torch.isfinite(y[[0, 3]]).all()
    ref = (x[[0, 3]].double() @ w.double().t()) * s.double()
    assert torch.allclose(y[[0, 3]].double(), ref, rtol=1e-3, atol=0)


@needs_native
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("static", [None, 0.05])
def test_w8a8_is_exact_integer_math(m, n, k, static):
    x, w, s = _case(m, n, k)
    y = native.w8a8(x, w, s, static)
    sx = qmath.per_token_scale(x) if static is None else torch.tensor(static)
    xq = qmath.quantize_act(x, sx)  # the same rounding and saturation as the kernel
    acc = (xq.double() @ w.double().t())  # int32 accumulators, exactly
    got = y.double() / (sx.double().reshape(-1, 1) * s.double())
    assert torch.allclose(got, acc, rtol=1e-6, atol=1e-3)


@needs_native
@pytest.mark.parametrize("m,n,k", SHAPES + [(16, 67, 1000)])
@pytest.mark.parametrize("bias", [False, True])
def test_f32_matches_float64(m, n, k, bias):
    x, w8, _ = _case(m, n, k)
    w = w8.float() / 127
    b = torch.randn(n) if bias else None
    y = native.f32(x, w, b)
    ref = x.double() @ w.double().t() + (b.double() if bias else 0)
    assert y.dtype == torch.float32 and y.shape == (m, n)
    assert ((y.double() - ref).abs().max() / ref.abs().max()) < 1e-5


@needs_native
def test_thread_count_does_not_change_results():
    x, w, s = _case(9, 130, 300)
    wf = w.float()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (native.w8a16(x, w, s), native.w8a8(x, w, s, None), native.f32(x, wf),
               native.f32(x[:3], wf))
        torch.set_num_threads(2)
        two = (native.w8a16(x, w, s), native.w8a8(x, w, s, None), native.f32(x, wf),
               native.f32(x[:3], wf))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, two))


@needs_native
def test_shares_torchs_openmp_runtime():
    # a second libgomp would bring a second pool of spinning workers onto the same cores
    code = ("import torch; from npu_console.engine.kernels import native; assert native.available();"
            "import re; maps = open('/proc/self/maps').read();"
            "print(sorted(set(re.findall(r'\\S*libgomp\\S*', maps))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.count("libgomp") == 1, out


def test_build_is_cached_and_explains_why_not(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path))
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert native.build() == native.BuildInfo(None, f"disabled by {native.ENV_SWITCH}")
    monkeypatch.delenv(native.ENV_SWITCH)
    if native._unavailable_reason(native.cpu_flags()):
        pytest.skip("not an AVX2 x86-64 CPU")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert native.build().reason == "no C compiler (install gcc)"
    assert not any(tmp_path.rglob("*.so"))
    monkeypatch.delenv("CC")
    first = native.build()
    if first.path is None:
        pytest.skip(first.reason)
    assert first.reason == "built" and first.path.parent == tmp_path / "kernels"
    assert native.build() == native.BuildInfo(first.path, "cached")
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [first.path.name]  # no temp left


def test_a_failing_compiler_leaves_nothing_behind(tmp_path, monkeypatch):
    if native._unavailable_reason(native.cpu_flags()):
        pytest.skip("not an AVX2 x86-64 CPU")
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'error: broken toolchain' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    info = native.build()
    assert info.path is None and info.reason == "compiler failed: error: broken toolchain"
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_another_march_builds_its_own_library_that_has_no_avx512(tmp_path, monkeypatch):
    """NPU_CONSOLE_KERNEL_ARCH=haswell builds what an AVX2-only server runs, beside (not over)
    this CPU's own build; a name that is not a -march value is ignored."""
    if native._unavailable_reason(native.cpu_flags()):
        pytest.skip("not an AVX2 x86-64 CPU")
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path))
    monkeypatch.setenv(native.ARCH_ENV, "bad name; rm -rf /")
    assert "-march=native" in native.build_flags()
    monkeypatch.setenv(native.ARCH_ENV, "haswell")
    assert "-march=haswell" in native.build_flags()
    avx2 = native.build()
    if avx2.path is None:
        pytest.skip(avx2.reason)
    monkeypatch.delenv(native.ARCH_ENV)
    own = native.build()
    assert own.path is not None and own.path != avx2.path
    dis = subprocess.run(["objdump", "-d", str(avx2.path)], capture_output=True, text=True,
                         check=False)
    if dis.returncode != 0:
        pytest.skip("no objdump")
    assert "zmm" not in dis.stdout and "ymm" in dis.stdout  # AVX2 registers, no AVX-512 ones


# rows x outputs x inputs for the W8A8 paths: 1-4 rows stream 4 weight rows at a time, more go
# through 4 x 4 tiles; K tails inside one 64-byte vector and past several
W8A8_PATH_SHAPES = SHAPES + [(1, 4, 64), (2, 9, 576), (4, 13, 129), (8, 12, 1536),
                             (16, 67, 1000), (33, 5, 65)]


def _target_has_vnni() -> bool:
    """Whether the kernels' -march (this CPU's own, or NPU_CONSOLE_KERNEL_ARCH's, as the AVX2
    lane sets it) lets the compiler emit AVX512-VNNI, by gcc's own predefined macros."""
    march = next(f for f in native.build_flags() if f.startswith("-march="))
    if march == "-march=native":
        return True
    out = subprocess.run([native.c_compiler(), march, "-dM", "-E", "-"], input="", capture_output=True,
                         text=True, check=True).stdout
    return "__AVX512VNNI__" in out


@needs_native
def test_int8_isa_follows_the_cpu():
    """On a CPU with AVX512-VNNI (and BW/VL) this machine's build runs vpdpbusd; elsewhere, and
    where the kernels are built for an older -march, the AVX2 path. doctor and /v1/models
    report the same name."""
    flags = native.cpu_flags()
    vnni = {"avx512_vnni", "avx512bw", "avx512vl"} <= flags and _target_has_vnni()
    assert native.int8_isa() == ("avx512-vnni" if vnni else "avx2")
    if not vnni:
        return
    dis = subprocess.run(["objdump", "-d", str(native.build().path)], capture_output=True,
                         text=True, check=False)
    if dis.returncode != 0:
        pytest.skip("no objdump")
    assert "vpdpbusd" in dis.stdout


@pytest.mark.slow
@needs_native
def test_int8_paths_agree_with_the_avx2_build(tmp_path):
    """The AVX2-only build's W8A8 (int16 pairs) and this CPU's own (on a VNNI CPU: u8 x s8 with
    a correction for the +128 shift) give identical floats, per token and static, at decode and
    prefill row counts, and both equal exact integer math. W8A16 agrees up to fp32 rounding."""
    from support.kernels import avx2_only_build

    lib = avx2_only_build(tmp_path)
    assert lib.npc_int8_isa() == b"avx2"
    for m, n, k in W8A8_PATH_SHAPES:
        for static in (None, 0.05):
            x, w, s = _case(m, n, k, seed=m + n + k)
            own = native.w8a8(x, w, s, static)
            avx2 = torch.empty(m, n)
            assert lib.npc_w8a8_f32(x.data_ptr(), int(static is None), static or 0.0,
                                    w.data_ptr(), None, s.data_ptr(), avx2.data_ptr(), m, n, k,
                                    torch.get_num_threads()) == 0
            assert torch.equal(own, avx2), (m, n, k, static)
            # the weight sums handed in (as bound layers do) or summed by the kernel: the same
            assert torch.equal(native.w8a8(x, w, s, static, native.weight_sums(w)), own)
            sx = qmath.per_token_scale(x) if static is None else torch.tensor(static)
            acc = qmath.quantize_act(x, sx).double() @ w.double().t()
            got = own.double() / (sx.double().reshape(-1, 1) * s.double())
            assert torch.allclose(got, acc, rtol=1e-6, atol=1e-3), (m, n, k, static)
        # the int8 head's W8A16 on int16 rows per token: the same integer sums, bit for bit
        own = native.w8a16_token_rows(x, w, s)
        avx2 = torch.empty(m, n)
        assert lib.npc_w8a16_tok(x.data_ptr(), w.data_ptr(), s.data_ptr(), avx2.data_ptr(), m, n,
                                 k, torch.get_num_threads()) == 0
        assert torch.equal(own, avx2), (m, n, k)
        # W8A16: on a VNNI CPU per-channel scales run on vpdpwssd, summed in another order
        own = native.w8a16(x, w, s)
        avx2 = torch.empty(m, n)
        assert lib.npc_w8a16(x.data_ptr(), w.data_ptr(), s.data_ptr(), avx2.data_ptr(), m, n, k,
                             torch.get_num_threads()) == 0
        assert torch.allclose(own, avx2, rtol=1e-5, atol=1e-5 * float(avx2.abs().max())), (m, n, k)


@needs_native
@pytest.mark.parametrize("m,n,k", W8A8_PATH_SHAPES)
def test_token_rows_w8a16_is_exact_on_its_int16_rows(m, n, k):
    """npc_w8a16_tok (the int8 head): each row to int16 with max|x| / 16383, round half to
    even, then exact integer sums times both scales."""
    x, w, s = _case(m, n, k, seed=5)
    y = native.w8a16_token_rows(x, w, s)
    sx = (x.abs().amax(-1, keepdim=True) / 16383).clamp_min(1e-8)
    q = torch.clamp(torch.round(x / sx), -16383, 16383)
    acc = q.double() @ w.double().t()
    got = y.double() / (sx.double() * s.double())
    assert torch.allclose(got, acc, rtol=1e-6, atol=1e-2)


@needs_native
def test_token_rows_refuse_rows_their_sums_cannot_hold():
    """Past 8192 inputs the int32 sums could overflow: refused here, and a layer that long
    keeps block floating point rows (layer_forward)."""
    from npu_console.engine.quant.qlinear import QuantLinear

    x, w, s = _case(2, 3, native.TOKEN_ROWS_MAX_K + 32)
    with pytest.raises(ValueError, match="8192"):
        native.w8a16_token_rows(x, w, s)
    lin = torch.nn.Linear(native.TOKEN_ROWS_MAX_K + 32, 3, bias=False)
    q = QuantLinear.from_linear(lin, "w8a16")
    q.act_rows = "token"
    y = q(x)
    assert torch.allclose(y, native.w8a16(x, q.weight, q.weight_scale), rtol=1e-6, atol=1e-6)


@needs_native
def test_weight_sums_are_each_rows_int8_sum():
    _, w, _ = _case(7, 37, 1000, seed=9)
    assert torch.equal(native.weight_sums(w), w.sum(1, dtype=torch.int32))
