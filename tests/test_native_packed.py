"""The block products on the packed layout (pk_gemm: cpu_i8_vnni.c on VNNI builds, cpu_pk_avx2.c
on other x86 builds): the same as
the row-major kernels, W8A16 with per-group and per-channel scales and w8a8-dynamic's int8
blocks, for every row count the kernel blocks differently (1-8 rows per pass over a strip,
more in chunks), output counts that leave the last strip of 16 channels partial, and every
group size the kernels take; the plain weight and scales read back exactly from the packed
copy, whose scales are fp16: rounded to the nearest, and refused for a layer fp16 cannot hold."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.kernels import native, qmath
from npu_console.engine.kernels import packed as packing
from support.models import needs_native


@pytest.fixture(autouse=True)
def _packs():
    needs_native()
    if not packing.available():
        pytest.skip("this kernel build has no packed W8A16 (x86 with AVX2 or AVX512-VNNI only); "
                    "the row-major grouped kernel runs instead (tests/test_native_groups.py)")


def _layer(n: int, k: int, group: int, seed: int, half: bool = True):
    """int8 (n, k) and fp32 scales per group (n, k / group), or per channel (n,) for group 0;
    with half, values fp16 holds (a Q8_0 file's), so the packed copy keeps them exactly"""
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
    scale = torch.rand(*((n, k // group) if group else (n,)), generator=g) * 0.02 + 1e-3
    return w, scale.half().float() if half else scale


# (out, in, group, int8 activations): w8a8-dynamic's weights have per-channel scales only
LAYERS = [(67, 384, 32, False), (16, 96, 32, False), (40, 256, 64, False),
          (33, 512, 128, False), (5, 64, 32, False), (67, 384, 0, False), (16, 96, 0, False),
          (67, 384, 0, True), (16, 96, 0, True)]


@pytest.mark.parametrize("n,k,group,act_int8", LAYERS)
@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 16, 70])
def test_the_packed_product_equals_the_row_major_one(n, k, group, act_int8, rows):
    w, scale = _layer(n, k, group, seed=n + k + rows)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
    x[:, 5] = 200.0  # an outlier channel: each block keeps its own scale
    packed = packing.pack_w8a16(w, scale, group)
    want = (native.w8a8_blocks(x, w, scale) if act_int8
            else native.w8a16(x, w, scale, group))
    got = packing.w8a16_packed(x, packed, act_int8)
    assert got.shape == (rows, n)
    wd = w.double() * (scale.double().repeat_interleave(group, 1) if group
                       else scale.double()[:, None])
    # W8A16 rows of AVX2 builds share a scale over a span of blocks where the groups allow
    # (packing.act_span); the row-major kernel's rows keep one per block
    span = 1 if act_int8 else packing.act_span(packed.group, k)
    if span == 1:  # the same integer block sums, added in another order in fp32
        assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    else:  # each activation within half its step of x in both, plus fp32 rounding
        steps = native.blockfloat16(x, span)[1] + native.blockfloat16(x)[1]
        bound = (steps / 2) @ wd.abs().t() + 1e-5 * want.abs().max()
        assert ((got - want).abs().double() <= bound).all()
    # and the float64 product of the kernel's own activations (their oracles: native's
    # blockfloat16, qmath's block_quantize_act) with the dequantized weight: only fp32
    # rounding apart
    if act_int8:
        q, s = qmath.block_quantize_act(x)
        xd = qmath.block_dequantize_act(q.double(), s.double())
    else:
        values, step = native.blockfloat16(x, span)
        xd = values * step
    exact = xd @ wd.t()
    assert (got.double() - exact).abs().max() <= 1e-5 * exact.abs().max()


def test_w8a16_rows_share_a_scale_over_spans_only_on_avx2_and_within_a_weight_group():
    """A span of 4 blocks (128 inputs) lets the AVX2 product scale its int32 sums once per
    span; a span must not straddle two weight groups, and VNNI builds keep a scale a block."""
    want = 1 if native.int8_isa() == "avx512-vnni" else 4
    assert packing.act_span(384, 384) == want  # per channel: one group of 12 blocks
    assert packing.act_span(96, 96) == want  # per channel, 3 blocks: one short span
    assert packing.act_span(128, 512) == want
    assert packing.act_span(256, 512) == want
    assert packing.act_span(32, 384) == 1  # Q8_0's groups, and the int8 head's
    assert packing.act_span(64, 256) == 1
    assert packing.act_span(96, 288) == 1


def test_the_plain_weight_and_scales_read_back_exactly():
    w, scale = _layer(67, 384, 32, seed=1)
    packed = packing.pack_w8a16(w, scale, 32)
    assert packed.weight.numel() == 80 * 384  # 5 strips of 16 channels, the last padded
    assert packed.scale.numel() == 80 * 384 // 32
    assert torch.equal(packed.unpack(), w) and torch.equal(packed.unpack_scale(), scale)


def test_a_projection_from_a_strip_boundary_reads_its_own_rows():
    """A fused module's projection (Phi-3's k rows of qkv_proj) starts at a strip: its
    addresses are the strip's, and the strip holds exactly its channels."""
    w, scale = _layer(64, 128, 32, seed=2)
    packed = packing.pack_w8a16(w, scale, 32)
    tail = packing.pack_w8a16(w[32:], scale[32:], 32)
    w_at, s_at = packed.strip_offsets(32)
    assert w_at - packed.weight.data_ptr() == tail.weight.numel()
    assert s_at - packed.scale.data_ptr() == tail.scale.numel() * 2  # fp16
    assert torch.equal(packed.weight[tail.weight.numel():], tail.weight)
    assert torch.equal(packed.scale[tail.scale.numel():], tail.scale)


def test_groups_the_kernel_cannot_take_are_refused():
    w, scale = _layer(16, 96, 32, seed=3)
    with pytest.raises(ValueError, match="group size 48"):
        packing.pack_w8a16(w, scale[:, :2], 48)


def test_packing_in_place_uses_the_weights_own_memory():
    """Serving repacks a loaded model in its own memory: the packed weight is a view of the
    plain one, with the same bytes as a packed copy (the fp16 scales are new, half the fp32
    ones' bytes); a partial strip is refused, not packed."""
    w, scale = _layer(48, 256, 64, seed=4)
    want = packing.pack_w8a16(w, scale, 64)
    ptr = w.data_ptr()
    got = packing.pack_w8a16(w, scale, 64, in_place=True)
    assert got.weight.data_ptr() == ptr and got.scale.dtype == torch.float16
    assert got.scale.nbytes == scale.nbytes // 2
    assert torch.equal(got.weight, want.weight) and torch.equal(got.scale, want.scale)
    w2, s2 = _layer(40, 256, 64, seed=5)
    with pytest.raises(ValueError, match="whole strips"):
        packing.pack_w8a16(w2, s2, 64, in_place=True)
    assert torch.equal(w2, _layer(40, 256, 64, seed=5)[0])


def test_rows_read_from_the_packed_copy_are_the_plain_rows():
    """A tied embedding looks its tokens up in the packed head: any shape of ids, rows of
    the padded last strip included."""
    w, scale = _layer(37, 128, 32, seed=6)
    packed = packing.pack_w8a16(w, scale, 32)
    ids = torch.tensor([[0, 36, 17], [15, 16, 31]])
    q, s = packed.rows(ids)
    assert torch.equal(q, w[ids]) and torch.equal(s, scale[ids])


@pytest.mark.parametrize("n,k,group,act_int8", [(67, 384, 32, False), (40, 256, 64, False),
                                                (67, 384, 0, False), (67, 384, 0, True)])
def test_fp32_scales_are_kept_as_their_nearest_fp16(n, k, group, act_int8):
    """Scales fp16 does not hold exactly (our own quantizers') round to the nearest fp16 in the
    packed copy, and the product is the row-major kernel's with those rounded scales: at most
    2^-11 of each scale away from the fp32 one."""
    w, scale = _layer(n, k, group, seed=11 + group, half=False)
    nearest = scale.half().float()
    assert not torch.equal(nearest, scale)  # the test's scales need rounding
    packed = packing.pack_w8a16(w, scale, group)
    got_scale = packed.unpack_scale()
    fp32 = scale.view_as(got_scale)
    assert torch.equal(got_scale, nearest.view_as(got_scale))
    assert ((got_scale - fp32).abs() <= fp32 * 2.0 ** -11).all()
    x = torch.randn(9, k, generator=torch.Generator().manual_seed(3)) * 3
    want = (native.w8a8_blocks(x, w, nearest) if act_int8
            else native.w8a16(x, w, nearest, group))
    got = packing.w8a16_packed(x, packed, act_int8)
    span = 1 if act_int8 else packing.act_span(packed.group, k)
    tol = 1e-5 if span == 1 else 1e-3  # AVX2's spans: another rounding of the activations
    assert (got - want).abs().max() <= tol * want.abs().max()


def test_fp16_holds_a_layers_scales_to_2_to_the_minus_10_of_its_channels_largest():
    """fits_half: yes for real scales, for a channel of zeros (the quantizers' floor of 1e-8)
    and for one small group beside larger ones; no for a channel whose largest scale falls
    below fp16's normal range (it would keep only a few bits) or above its largest value."""
    ok = torch.rand(8, 4) * 0.02 + 1e-3
    assert qmath.fits_half(ok) and qmath.fits_half(ok[:, 0])
    zeros = ok.clone()
    zeros[3] = 1e-8
    small_group = ok.clone()
    small_group[2, 1] = 1e-7
    assert qmath.fits_half(zeros) and qmath.fits_half(small_group)
    tiny = ok.clone()
    tiny[5] = 3e-6  # a channel of weights near 4e-4: subnormal in fp16
    huge = ok.clone()
    huge[0, 0] = 7e4
    assert not qmath.fits_half(tiny) and not qmath.fits_half(tiny[:, 0])
    assert not qmath.fits_half(huge)


@pytest.mark.parametrize("n,k,group", [(37, 128, 32), (37, 128, 64), (20, 96, 0)])
def test_float_rows_from_the_packed_copy_equal_the_dequantized_plain_rows(n, k, group):
    """The native lookup of a tied embedding's rows gives each int8 times its scale, the floats
    the PyTorch reader gives (per group and per channel; rows of the padded last strip); an id
    past the last row is refused with IndexError, not read from the padding."""
    w, scale = _layer(n, k, group, seed=8 + group)
    packed = packing.pack_w8a16(w, scale, group)
    ids = torch.tensor([[0, n - 1, 17], [15, 16, n - 2]])
    per = scale[ids].unsqueeze(-1) if group == 0 else scale[ids].repeat_interleave(group, -1)
    want = w[ids].float() * per
    got = packed.dequant_rows(ids)
    assert got.shape == (2, 3, k) and torch.equal(got, want)
    with pytest.raises(IndexError, match="out of range"):
        packed.dequant_rows(torch.tensor([n]))
    with pytest.raises(IndexError, match="out of range"):
        packed.dequant_rows(torch.tensor([3, -1]))


@pytest.mark.parametrize("n,k,group", [(67, 384, 0), (16, 96, 0), (40, 256, 64), (5, 64, 32)])
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 70])
def test_int8_blocks_by_quads_equal_them_by_pairs(n, k, group, rows):
    """w8a8-dynamic's int8 blocks multiply four inputs at a time (vpdpbusd on u = q + 128, less
    128 times each block's weight sum); the W8A16 pair product of the same int8 values gives
    the same int32 block sums and the same fp32 epilogue, so the floats are equal, not close:
    any slip in the quad order, the correction or a block's scale shows."""
    if native.int8_isa() != "avx512-vnni":
        pytest.skip("quads (vpdpbusd) are VNNI's: an AVX2 build multiplies int8 blocks by pairs")
    w, scale = _layer(n, k, group, seed=7 * n + rows)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
    x[:, 5] = 200.0
    x[0, :32] = -0.01  # a block of small negatives: u near 0
    packed = packing.pack_w8a16(w, scale, group)
    quads = packing.w8a16_packed(x, packed, act_int8=True)
    pairs = packing.w8a16_packed(x, packed, act_int8=True, int8_pairs=True)
    assert torch.equal(quads, pairs)


@pytest.mark.slow
def test_an_avx2_only_build_gives_this_builds_floats(tmp_path):
    """cpu_pk_avx2.c (what an AVX2-only server multiplies with) against this CPU's own build
    on the same packed weights, for W8A16 and w8a8-dynamic's int8 blocks, every pass size (1-4
    rows, chunks) and a partial last strip. Where both take the same activation rows (int8
    blocks; W8A16 in groups a span would straddle), the same int32 block sums and the same fp32
    epilogue: equal floats. Where the AVX2 build's W8A16 rows share a scale over a span of
    blocks (packing.act_span), its result is the float64 product of those rows (their oracle,
    native.blockfloat16 with that span) but for fp32 rounding. On a VNNI CPU this runs the AVX2
    kernel, which its own build never does."""
    from support.kernels import avx2_only_build

    lib = avx2_only_build(tmp_path)
    assert lib.npc_w8a16_packs() == 1
    spans = set()
    for n, k, group, act_int8 in LAYERS:
        w, scale = _layer(n, k, group, seed=3 * n + k)
        packed = packing.pack_w8a16(w, scale, group)
        span = 1 if act_int8 else lib.npc_w8a16_packed_span(packed.group, k)
        spans.add(span)
        wd = w.double() * (scale.double().repeat_interleave(group, 1) if group
                           else scale.double()[:, None])
        for rows in (1, 2, 3, 4, 5, 9, 70):
            x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows + k)) * 3
            x[:, 5] = 200.0
            own = packing.w8a16_packed(x, packed, act_int8)
            avx2 = torch.empty(rows, n)
            assert lib.npc_w8a16_packed(x.data_ptr(), packed.weight.data_ptr(),
                                        packed.scale.data_ptr(), packed.group, int(act_int8),
                                        avx2.data_ptr(), rows, n, k,
                                        torch.get_num_threads()) == 0
            if span == (1 if act_int8 else packing.act_span(packed.group, k)):
                assert torch.equal(own, avx2), (n, k, group, act_int8, rows)
            else:
                values, step = native.blockfloat16(x, span)
                exact = (values * step) @ wd.t()
                err = (avx2.double() - exact).abs().max() / exact.abs().max()
                assert err <= 1e-5, (n, k, group, rows, err)
    assert spans == {1, 4}  # both kinds of rows ran
