"""CPU kernels, chosen by measurement (docs/benchmarks.md, "Quantization"):

* Native AVX2 kernels (cpu_gemm.c via native.py), when they build: W8A16 always (activations
  as 16-bit block floating point, within 2^-15 of each block's largest value, where PyTorch's
  kernel takes bf16; integer products; 1.4-1.7x faster than `_weight_int8pack_mm` at every
  size measured), with per-channel or per-group weight scales (groups of a multiple of 32
  inputs: one more multiply per 32-value block), and W8A8 on every CPU. On AVX2-only CPUs
  they are 2.7x faster than fbgemm's nibble split (below) at one row and 4-30 % behind it at
  64-256 rows; on an AVX512-VNNI CPU, where fbgemm needs no split, they still decoded
  SmolLM2-135M 5.7x faster at batch 1 and 1.7-2.4x at batch 8-16 (design/MEASURED_2026-12-01.md,
  section 2). One choice on both CPU types also means one
  decode path for the tests. They read the plain int8 weight, so W8A8 keeps no fbgemm copy;
  the block products on VNNI builds are the exception: W8A16 and w8a8-dynamic's blocks are
  packed 16 output channels to a register (kernels/packed.py), and serving keeps only that
  copy.
  Where they do not build (no compiler, no AVX2):
* W8A16: `aten._weight_int8pack_mm` (int8 weight, bf16 activations, per-channel scales;
  per-group scales run as bf16 products per group, summed in fp32: "torch-grouped"). Its
  fp32-activation variant is ~10x slower than an fp32 GEMM, so fp32 models run this layer with
  bf16 activations (rounding well below the int8 weight error). It needs K % 8 == 0 (it crashes
  otherwise), so other widths are zero-padded.
* W8A8: fbgemm's int8 GEMM (`quantized::linear_dynamic` on a per-channel prepacked weight), fed
  rows that are already integers plus one calibration row holding 0 and 255: the op's own
  activation quantizer then picks scale 1 and zero point 0 and reproduces our int8 values
  exactly, so per-token (or static per-tensor) symmetric activations are computed with the
  fast kernel. Per-token scales multiply the output rows (exact: a row's scale factors out).
  `torch._int_mm` is exact but 10-40x slower on CPU; oneDNN `qlinear_pointwise` was 3-5x
  slower than fbgemm at decode sizes here; the op's default use (one 7-bit asymmetric range per
  tensor) is what made `quantize_dynamic` inaccurate.
* CPUs without VNNI (AVX2) multiply u8 x s8 pairs into a saturating int16 (vpmaddubsw), so
  full-range u8 rows overflow. A one-off probe detects that; then each int8 activation q is split
  into nibbles, q = 16 * hi + lo (hi + 8 and lo both in [0, 15], which cannot overflow), both
  stacked as rows of ONE GEMM and recombined: exact 8-bit math, the weight still read once per
  step. (Packing 7-bit weights instead was measured 3x worse in perplexity on stories260K.)
"""

from __future__ import annotations

import functools
import warnings

import torch

from . import native, qmath
from . import packed as packing


def _prepack(q: torch.Tensor, scale: torch.Tensor):
    """fbgemm per-channel packed weight from int8 q (N, K) and fp32 scales (N,)."""
    prev = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = "fbgemm"
        with warnings.catch_warnings():  # quantized tensors are deprecated; the kernels are not
            warnings.simplefilter("ignore")
            qw = torch._make_per_channel_quantized_tensor(
                q.contiguous(), scale.double(), torch.zeros(q.shape[0], dtype=torch.long), 0)
        return torch.ops.quantized.linear_prepack(qw, None)
    finally:
        torch.backends.quantized.engine = prev


def _int_rows_gemm(rows: torch.Tensor, packed) -> torch.Tensor:
    """sum_k rows[m, k] * q[n, k] * scale[n] for integer-valued rows in [0, 255]."""
    pin = rows.new_zeros(1, rows.shape[1])
    pin[0, 0] = 255.0  # pins the op's dynamic range to [0, 255]: scale 1, zero point 0
    return torch.ops.quantized.linear_dynamic(torch.cat([rows, pin]), packed, False)[:-1]


@functools.lru_cache(maxsize=1)
def int16_saturation() -> bool:
    """True when this CPU's int8 GEMM saturates pairwise u8*s8 sums (no VNNI)."""
    k, n = 64, 16
    packed = _prepack(torch.full((n, k), 127, dtype=torch.int8), torch.ones(n))
    for m in (1, 32):
        y = _int_rows_gemm(torch.full((m, k), 255.0), packed)
        if not torch.allclose(y, torch.full_like(y, 255.0 * 127.0 * k)):
            return True
    return False


class CpuBackend:
    def __init__(self, use_native: bool | None = None):
        # None: use the native kernels where they build (tests force either path)
        self._use_native = use_native

    def native_for(self, mod) -> bool:
        """Whether mod runs on the native kernels (see the module docstring)."""
        if self._use_native is False:
            return False
        if mod.group_size and (mod.method != "w8a16"
                               or not native.group_supported(mod.in_features, mod.group_size)):
            return False
        return native.available()

    def kernel_name(self, mod) -> str:
        """The product that runs mod, as doctor and /v1/models report it."""
        if self.native_for(mod):
            # grouped W8A16: on x86 builds the packed layout (packs), else the NEON loop
            return f"native-{native.layer_isa(mod.method, bool(mod.group_size))}"
        if mod.method == "w8a16":
            return "torch-int8pack" if not mod.group_size else "torch-grouped"
        return "fbgemm-split" if int16_saturation() else "fbgemm"

    def packs_own_copy(self, mod) -> bool:
        """True when forward no longer reads mod.weight once prepared."""
        if self.native_for(mod):
            return self.packs(mod)
        return mod.method != "w8a16"

    def packs(self, mod) -> bool:
        """On an x86 build the block products (W8A16, w8a8-dynamic's int8 blocks) of a served
        layer multiply a packed copy (kernels/packed.py): at 8 rows 3x the row-major kernel on
        AVX512-VNNI, 1.3-1.6x on AVX2; 1.1x at one. Its scales become fp16 there: a layer
        whose scales fp16 cannot hold (qmath.half_holds) keeps the row-major kernels."""
        return (mod.act_rows == "block" and mod.method in ("w8a16", "w8a8-dynamic")
                and packing.can_pack(mod.out_features, mod.in_features, mod.group_size)
                and self.native_for(mod) and packing.available()
                and (mod.packed is not None or qmath.half_holds(mod.weight_scale)))

    def pack_for_serving(self, mod, dtype: torch.dtype | None = None) -> tuple:
        """prepare, for a layer whose plain weight goes next (Int8Linear.release_plain_weight):
        the weight is packed, in its own memory where its rows fill whole strips, so a 7B model
        is not held twice. Only then: while the plain weight lives it is the layer's weight
        (updated in place, copied), so the products read it."""
        if mod.packed is None and self.packs(mod):
            in_place = (mod.weight.is_contiguous()
                        and mod.out_features % packing.PACK_CHANNELS == 0)
            mod.packed = packing.pack_w8a16(mod.weight, mod.weight_scale, mod.group_size,
                                            in_place=in_place)
            mod._cache.clear()  # a forward bound to the plain weight: bound again
            mod._fast_forward = None
        return self.prepare(mod, dtype)

    def prepare(self, mod, dtype: torch.dtype | None = None) -> tuple:
        use_native = self.native_for(mod)
        key = ("cpu", mod.method, use_native)
        cached = mod._cache.get(key)
        if cached is not None:
            return cached
        if use_native:
            if not mod.weight.is_contiguous():  # the kernels walk plain row-major rows
                mod.weight = mod.weight.contiguous()
            static = mod.input_scale.item() if mod.method == "w8a8-static" else None
            scale = mod.weight_scale.float().contiguous()
            packed = mod.packed if self.packs(mod) else None
            if packed is not None:  # it holds the scales too: keep no other copy
                scale = None
            cached = ("native", scale, static, packed)
        elif mod.method == "w8a16":
            # (a layer served packed on an x86 build, then forced off the native kernels,
            # reads its weight back from the packed copy)
            plain = mod.plain_weight()
            if mod.group_size:
                cached = (None, None)
            elif mod.in_features % 8 or plain is not mod.weight:
                # _weight_int8pack_mm reads K in blocks of 8 and crashes otherwise: zero-pad
                pad = -mod.in_features % 8
                w = torch.nn.functional.pad(plain, (0, pad))
                cached = (mod.plain_scale().to(torch.bfloat16), w)
            else:
                cached = (mod.weight_scale.to(torch.bfloat16), None)
        else:
            scale = mod.plain_scale().float()
            plain = mod.plain_weight()
            packed = _prepack(plain, scale)
            # sum_k q[n, k] * scale[n]: undoes the constant added to make rows non-negative
            colsum = (plain.float().sum(1) * scale).contiguous()
            cached = (packed, colsum)
        mod._cache[key] = cached
        return cached

    def forward(self, mod, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 0:  # oneDNN does not accept empty inputs
            return x.new_zeros(0, mod.out_features)
        prepared = self.prepare(mod)
        if isinstance(prepared[0], str):  # native: bound once, later calls skip this dispatch
            mod._fast_forward = native.layer_forward(mod, *prepared[1:])
            return mod._fast_forward(x)
        if mod.method == "w8a16":
            y = self._w8a16(mod, x)
        else:
            y = self._w8a8(mod, x)
        if mod.bias is not None:
            y = y + mod.bias.to(y.dtype)
        return y.to(x.dtype)

    def _w8a16(self, mod, x: torch.Tensor) -> torch.Tensor:
        scale_bf16, padded = self.prepare(mod)
        xb = x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16)
        if scale_bf16 is None:
            # per-group scales: no fused CPU kernel, so product per group in bf16, fp32 sum
            n, k = mod.out_features, mod.in_features
            g = mod.group_size
            wg = mod.plain_weight().view(n, k // g, g).to(torch.bfloat16)
            xg = xb.view(xb.shape[0], k // g, g)
            part = torch.einsum("mgk,ngk->mgn", xg, wg).float()
            return (part * mod.plain_scale().t().unsqueeze(0)).sum(1)
        if padded is not None:
            xb = torch.nn.functional.pad(xb, (0, padded.shape[1] - xb.shape[1]))
            return torch._weight_int8pack_mm(xb.contiguous(), padded, scale_bf16)
        return torch._weight_int8pack_mm(xb.contiguous(), mod.weight, scale_bf16)

    def _w8a8_blocks(self, mod, x: torch.Tensor) -> torch.Tensor:
        """Activations per block of 32 without the native kernels: the reference's rule in
        float32 (slow, but the same semantics as the native product up to fp32 rounding)."""
        q, s = qmath.block_quantize_act(x.float())
        w = qmath.dequantize_weight(mod.plain_weight(), mod.plain_scale())
        return qmath.block_dequantize_act(q, s) @ w.t()

    def _w8a8(self, mod, x: torch.Tensor) -> torch.Tensor:
        if mod.act_rows == "block" and mod.method == "w8a8-dynamic":
            return self._w8a8_blocks(mod, x)
        # one buffer holds every row the GEMM reads (the integer rows, then the pin row) and
        # the arithmetic runs in place: at decode sizes the int8 product itself takes ~40 us,
        # so each extra small op (a cat, a temporary) is a visible share of the layer
        packed, colsum = self.prepare(mod)
        m, k = x.shape
        xf = x.float()  # no copy for fp32 models
        sx = (mod.input_scale.float() if mod.method == "w8a8-static"
              else qmath.per_token_scale(xf))
        split = int16_saturation()
        rows = 2 * m if split else m
        buf = torch.empty(rows + 1, k)
        q = buf[rows - m:rows]  # the int8 values land in the last m integer rows
        torch.div(xf, sx, out=q)
        q.round_().clamp_(-qmath.QMAX, qmath.QMAX)
        pin = buf[rows]
        pin.zero_()
        pin[0] = 255.0  # pins the op's dynamic range to [0, 255]: scale 1, zero point 0
        if split:
            # q = 16 * hi + lo with hi + 8 and lo in [0, 15]: no pair of products can saturate
            hi = buf[:m]
            torch.div(q, 16, rounding_mode="floor", out=hi)
            q.sub_(hi, alpha=16)
            hi.add_(8)
            out = torch.ops.quantized.linear_dynamic(buf, packed, False)
            y = out[:m].sub_(colsum, alpha=8).mul_(16).add_(out[m:rows])
        else:
            q.add_(128)
            y = torch.ops.quantized.linear_dynamic(buf, packed, False)[:m].sub_(colsum,
                                                                                alpha=128)
        return y.mul_(sx)
