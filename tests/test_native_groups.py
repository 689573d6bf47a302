"""W8A16 with per-group weight scales on the native kernels (engine/kernels/cpu_gemm.c): the
product against dequantize-then-matmul for groups of 32, 64 and 128 at decode and prefill row
counts, on this machine's build and on a build for AVX2-only CPUs; the CPU backend's choice and
what it reports; a group-32 model generating the same greedy tokens on the native path (native
decode step included) as on PyTorch's; export and load keeping the groups."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine import kernels
from npu_console.engine.kernels import cpu, native, qmath
from npu_console.engine.kernels import packed as packed_kernels
from npu_console.engine.quant.qlinear import QuantLinear
from support.api import own_engine
from support.kernels import assert_same_greedy_tokens, avx2_only_build
from support.models import needs_native

GROUPS = (32, 64, 128)
# rows x outputs x inputs: 1-4 rows stream weight rows (decode), more go through the tiles
# (prefill); odd outputs leave partial tiles, 96 and 160 inputs odd block counts
SHAPES = [(1, 1, 128), (1, 7, 384), (2, 5, 256), (4, 33, 128), (5, 3, 512), (9, 67, 256),
          (70, 9, 384), (1, 9, 96), (6, 11, 160)]


def _case(m, n, k, group, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * 3
    x[:, 0] *= 20  # an outlier channel
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
    # scales spread over two decades, so a group read in the wrong place shows
    s = torch.logspace(-3, -1, n * (k // group)).reshape(n, k // group)
    s = s.flatten()[torch.randperm(s.numel(), generator=g)].reshape(n, k // group)
    return x, w, s


def _cases():
    # the kernel has its own code for groups of 1, 2 and 4 blocks; others (96, 256) take the
    # general walk
    other = [(1, 5, 384, 96), (3, 7, 288, 96), (9, 5, 288, 96), (2, 6, 768, 256)]
    return [(m, n, k, g) for m, n, k in SHAPES for g in GROUPS if k % g == 0] + other


def _rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def _check_product(y, x, w, s):
    # on the kernel's own 16-bit activations the math is exact but for fp32 rounding
    values, scale = native.blockfloat16(x)
    dequantized = qmath.dequantize_weight(w, s).double()
    assert _rel(y, (values * scale) @ dequantized.t()) < 1e-6
    # and against dequantize-then-matmul of the fp32 activations: each activation within half
    # its block's step (2^-15 of the block's largest value at most), plus fp32 rounding
    bound = (scale / 2) @ dequantized.abs().t() + 1e-6 * (x.double().abs() @ dequantized.abs().t())
    assert ((y.double() - x.double() @ dequantized.t()).abs() <= bound).all()


@pytest.mark.parametrize("m,n,k,group", _cases())
def test_grouped_product_matches_dequantize_then_matmul(m, n, k, group):
    needs_native()
    x, w, s = _case(m, n, k, group)
    y = native.w8a16(x, w, s, group)
    assert y.dtype == torch.float32 and y.shape == (m, n)
    _check_product(y, x, w, s)


def test_groups_of_one_scale_equal_the_per_channel_kernel():
    needs_native()
    x, w, _ = _case(9, 13, 256, 64)
    s = torch.rand(13) + 0.01
    for group in GROUPS:
        grouped = native.w8a16(x, w, s[:, None].expand(13, 256 // group).contiguous(), group)
        assert _rel(grouped, native.w8a16(x, w, s)) < 1e-6  # only fp32 rounding differs


def test_grouped_results_do_not_depend_on_threads():
    needs_native()
    x, w, s = _case(9, 130, 384, 32)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (native.w8a16(x, w, s, 32), native.w8a16(x[:3], w, s, 32))
        torch.set_num_threads(2)
        two = (native.w8a16(x, w, s, 32), native.w8a16(x[:3], w, s, 32))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, two))


def test_groups_the_kernel_cannot_take_are_refused_clearly():
    needs_native()
    x, w, _ = _case(2, 4, 96, 32)
    with pytest.raises(ValueError, match="multiples of 32 that divide"):
        native.w8a16(x, w, torch.ones(4, 6), 16)  # not whole 32-value blocks
    with pytest.raises(ValueError, match="multiples of 32 that divide"):
        native.w8a16(x, w, torch.ones(4, 1), 64)  # does not tile 96 inputs
    with pytest.raises(ValueError, match=r"expected \(4, 3\)"):
        native.w8a16(x, w, torch.ones(4), 32)
    assert native.group_supported(96, 32) and native.group_supported(96, 0)
    assert not native.group_supported(96, 64) and not native.group_supported(96, 16)


@pytest.mark.slow
def test_an_avx2_only_build_computes_the_same_grouped_products(tmp_path):
    lib = avx2_only_build(tmp_path)
    for m, n, k, group in _cases():
        x, w, s = _case(m, n, k, group, seed=3)
        y = torch.empty(m, n)
        assert lib.npc_w8a16_grouped(x.data_ptr(), w.data_ptr(), s.data_ptr(), group,
                                     y.data_ptr(), m, n, k, torch.get_num_threads()) == 0
        _check_product(y, x, w, s)
    x, w, s = _case(3, 5, 96, 32)
    assert lib.npc_w8a16_grouped(x.data_ptr(), w.data_ptr(), s.data_ptr(), 64,
                                 torch.empty(3, 5).data_ptr(), 3, 5, 96, 1) == -2


@pytest.fixture(params=["native", "torch"])
def cpu_path(request, monkeypatch):
    """The CPU backend on the native kernels, or on PyTorch's own (the fallback)."""
    if request.param == "native":
        needs_native()
    backend = cpu.CpuBackend(use_native=request.param == "native")
    monkeypatch.setitem(kernels._BACKENDS, "cpu", backend)
    return request.param


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_grouped_layers_run_where_the_per_channel_ones_do(group, rows, cpu_path):
    torch.manual_seed(group + rows)
    lin = torch.nn.Linear(384, 67)
    x = torch.randn(2, rows, 384)
    q = QuantLinear.from_linear(lin, "w8a16", group_size=group)
    native_name = f"native-{native.layer_isa('w8a16', True)}"
    assert q.kernel_name() == (native_name if cpu_path == "native" else "torch-grouped")
    y = q(x)
    assert y.shape == (2, rows, 67)
    w, s = q.weight.clone(), q.weight_scale.clone()
    ref = x.double() @ q.dequantized_weight().double().t() + lin.bias.double()
    # native: 16-bit block floating point activations; PyTorch's: bf16 ones
    assert _rel(y, ref) < (1e-4 if cpu_path == "native" else 1e-2)
    q.release_plain_weight()
    # x86 builds multiply a packed copy (67 channels: 5 strips, the last one padded), so the
    # plain weight and scales go and are read back from it, the scales as the packed copy's
    # fp16 keeps them; other paths keep reading them
    packs = cpu_path == "native" and packed_kernels.available()
    assert q.weight.numel() == (0 if packs else 384 * 67)
    assert q.weight_scale.numel() == (0 if packs else 67 * 384 // group)
    assert torch.equal(q.plain_weight(), w)
    assert torch.equal(q.plain_scale(), s.half().float() if packs else s)
    if not packs:
        assert torch.equal(q(x), y)
    else:  # within fp16's rounding of the scales (2^-11) of the float64 product
        ref16 = x.double() @ q.dequantized_weight().double().t() + lin.bias.double()
        assert _rel(q(x), ref16) < 1e-4 and _rel(q(x), ref) < 1e-3


def test_a_layer_whose_scales_fp16_cannot_hold_is_served_unpacked():
    """The packed copy keeps fp16 scales; a layer of weights near 1e-3 (scales under fp16's
    normal range, which would keep a few bits of themselves) stays on the row-major kernel with
    its fp32 scales, its plain weight kept, and its products unchanged. Scales that are fp16
    values already pack in any range."""
    needs_native()
    if not packed_kernels.available():
        pytest.skip("this build has no packed layout: no layer is packed")
    torch.manual_seed(4)
    lin = torch.nn.Linear(384, 48)
    x = torch.randn(3, 384)
    for scale_by, packs in ((1.0, True), (0.01, False)):
        with torch.no_grad():
            lin.weight.mul_(scale_by)
        q = QuantLinear.from_linear(lin, "w8a16", group_size=32)
        assert qmath.half_holds(q.weight_scale) is packs
        y = q(x)
        q.release_plain_weight()
        assert (q.packed is not None) is packs and (q.weight.numel() == 0) is packs
        assert _rel(q(x), y) < 1e-6
    # the same small scales as fp16 values (a GGUF's Q8_0 keeps them so): packed, exactly
    q = QuantLinear.from_linear(lin, "w8a16", group_size=32)
    q.weight_scale = q.weight_scale.half().float()
    assert not qmath.fits_half(q.weight_scale) and qmath.half_holds(q.weight_scale)
    s = q.weight_scale.clone()
    q.release_plain_weight()
    assert q.packed is not None and torch.equal(q.plain_scale(), s)


def test_groups_the_native_kernel_cannot_take_fall_back_to_pytorch():
    needs_native()
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 10)
    x = torch.randn(3, 96)
    q16 = QuantLinear.from_linear(lin, "w8a16", group_size=16)  # a loaded checkpoint's groups
    assert q16.kernel_name() == "torch-grouped"
    assert _rel(q16(x), x.double() @ q16.dequantized_weight().double().t()
                + lin.bias.double()) < 1e-2
    assert QuantLinear.from_linear(lin, "w8a16", group_size=32).kernel_name() == \
        f"native-{native.layer_isa('w8a16', True)}"


@pytest.fixture(scope="module")
def grouped_export(demo_model_dir, tmp_path_factory):
    """The demo model quantized w8a16 with groups of 32 (down_proj, 688 inputs, stays float:
    688 is no multiple of 32), exported in the native format."""
    from npu_console.engine.models.loader import load_model
    from npu_console.engine.quant import io
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.config import QuantConfig

    loaded = load_model(demo_model_dir)
    quantize_model(loaded.model, QuantConfig(method="w8a16", group_size=32,
                                             skip=("*.down_proj",)))
    out = io.export(loaded.model, tmp_path_factory.mktemp("g32") / "q", "native",
                    source_dir=demo_model_dir)
    return loaded, out


def _greedy_hf(model, prompts, n):
    out = []
    for p in prompts:
        with torch.inference_mode():
            ids = model.generate(torch.tensor([p]), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
        out.append(ids[0, len(p):].tolist())
    return out


@pytest.mark.slow
def test_a_group_32_model_generates_the_same_tokens_natively_and_on_pytorch(grouped_export,
                                                                             monkeypatch):
    """The engine runs prefill chunks through the layers' native tile kernels and decode
    steps as one native call with the grouped products; transformers' generate on PyTorch's
    grouped product (bf16 activations) and on the exact dequantize-then-matmul oracle gives
    the same greedy tokens."""
    needs_native()
    from npu_console.engine.models.loader import load_model
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

    _, out = grouped_export
    served = load_model(out)
    tok = served.tokenizer
    prompts = [tok.encode(t) for t in ("Hello, how are you?", "The cat sat on",
                                       "Write a story about a dog", "1 2 3")]
    with own_engine(None, max_batched_tokens=48) as eng:
        info = eng.add_model(served).result(120)
        handles = [eng.submit(GenerationRequest(prompt_token_ids=p, params=SamplingParams(
            max_tokens=24, temperature=0, ignore_eos=True))) for p in prompts]
        got = [list(h.result(120).token_ids) for h in handles]
    assert info.int8_kernels == f"native-{native.layer_isa('w8a16', True)}"
    assert info.decode_step == "native"

    fallback = load_model(out).model  # fresh layers: none bound to the native kernel yet
    monkeypatch.setitem(kernels._BACKENDS, "cpu", cpu.CpuBackend(use_native=False))
    assert {m.kernel_name() for m in fallback.modules()
            if isinstance(m, QuantLinear)} == {"torch-grouped"}
    for p, want, mine in zip(prompts, _greedy_hf(fallback, prompts, 24), got, strict=True):
        assert_same_greedy_tokens(fallback, p, mine, want)
    for m in fallback.modules():
        if isinstance(m, QuantLinear):
            m.backend = "reference"
    for p, want, mine in zip(prompts, _greedy_hf(fallback, prompts, 24), got, strict=True):
        assert_same_greedy_tokens(fallback, p, mine, want)


@pytest.mark.slow
def test_exports_keep_the_groups_or_refuse(grouped_export, tmp_path, demo_model_dir):
    from npu_console.engine.models.loader import load_model
    from npu_console.engine.quant import io
    from npu_console.engine.quant.config import QuantError

    model, out = grouped_export[0].model, grouped_export[1]
    layers = {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    assert layers and {m.group_size for m in layers.values()} == {32}
    ids = torch.tensor([[1, 50, 300, 7, 1200, 9, 41]])
    with torch.inference_mode():
        want = model(input_ids=ids).logits
    ms = io.export(model, tmp_path / "ms", "msmodelslim", source_dir=demo_model_dir)
    for path in (out, ms):
        back = load_model(path).model
        got = {n: m for n, m in back.named_modules() if isinstance(m, QuantLinear)}
        assert sorted(got) == sorted(layers)
        for name, m in got.items():
            assert m.group_size == 32
            assert m.kernel_name() == (f"native-{native.layer_isa('w8a16', True)}"
                                       if native.available() else "torch-grouped")
            # loaded for serving: on VNNI builds read back from the packed copy
            assert torch.equal(m.plain_weight(), layers[name].plain_weight())
            assert torch.equal(m.plain_scale(), layers[name].plain_scale())
        with torch.inference_mode():
            assert torch.allclose(back(input_ids=ids).logits, want, atol=1e-4)
    # groups are a w8a16 option, and compressed-tensors takes no w8a16: it says where to go
    with pytest.raises(QuantError, match="use --format native or msmodelslim for w8a16"):
        io.export(model, tmp_path / "ct", "compressed-tensors")
    assert not (tmp_path / "ct").exists()
