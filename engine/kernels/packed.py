"""The block products on a packed layout (pk_gemm: cpu_i8_vnni.c on AVX512-VNNI builds,
cpu_pk_avx2.c on other x86 builds): W8A16 with per-group or per-channel scales, and
w8a8-dynamic's int8 blocks of 32.

Row-major, each output channel sums its 32-value blocks on its own, and every block's int32
sum is converted and scaled for that one channel: with one scale per 32 weights (a GGUF's Q8_0
loaded as INT8) that, not memory, bounded a 7B model's batch-8 step. Packed, a register holds
16 output channels, one per lane, so a block's conversion and scaling serve 16 channels at
once: 3x the row-major kernel at 8 rows, 1.7x a 7B model's batch-8 decode (docs/benchmarks.md,
"W8A16 packed"). Serving keeps only the packed copy (kernels/cpu.py), packed in the loaded
weight's own memory; readers of the plain layout (the reference backend, dequantization, a tied
embedding's rows) read it back from here.

The packed scales are fp16, as a GGUF's Q8_0 keeps them (so Q8_0 loses nothing): with fp32 ones
a 7B model read 6 % more bytes a token than llama.cpp on the same file, and batch 1 is bound by
memory (docs/benchmarks.md, "fp16 scales in the packed layout"). Scales of our own quantizers
are fp16 values already (qmath.weight_scales); other fp32 scales (a checkpoint made elsewhere)
round to the nearest fp16. A layer whose scales fp16 cannot hold (qmath.half_holds) stays on the
row-major kernels with its fp32 scales.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from . import native
from .native import _check, group_supported, library

PACK_CHANNELS = 16  # output channels per strip of the packed layout
BLOCK = 32  # inputs per activation block, and the packed layout's unit along a row


def available() -> bool:
    """Whether this build multiplies on the packed layout (x86 builds);
    NPU_CONSOLE_PACKED_W8A16=0 keeps the row-major loops (to compare the two, or as a way out)."""
    if not _allowed():
        return False
    lib = library()
    return lib is not None and bool(lib.npc_w8a16_packs())


def serves_half_scales() -> bool:
    """available(), for plans made before loading: without compiling the kernels when they are
    not built yet (native.buildable). Every x86 build the native kernels take packs."""
    return _allowed() and not native.is_aarch64() and native.buildable()


def _allowed() -> bool:
    return os.environ.get("NPU_CONSOLE_PACKED_W8A16", "1") != "0"


@dataclass(frozen=True)
class PackedW8A16:
    """An int8 weight in the packed kernel's layout (cpu_i8_vnni.c pk_gemm): strips of
    PACK_CHANNELS output channels, the last zero-padded. A projection that starts at a strip
    boundary is a byte offset into both tensors (strip_offsets). Per-channel scales are one
    group of all K inputs."""
    weight: torch.Tensor  # int8, strips * PACK_CHANNELS * K
    scale: torch.Tensor  # fp16, strips * PACK_CHANNELS * K / group
    group: int  # inputs per scale: the layer's group size, or K for per-channel scales
    out_features: int
    in_features: int

    def unpack(self) -> torch.Tensor:
        """The plain int8 (N, K) weight again (a copy), for readers of the row-major layout."""
        n, k, c = self.out_features, self.in_features, PACK_CHANNELS
        strips = self.weight.numel() // (c * k)
        return (self.weight.view(strips, k // BLOCK, BLOCK // 2, c, 2).permute(0, 3, 1, 2, 4)
                .reshape(strips * c, k)[:n].contiguous())

    def unpack_scale(self) -> torch.Tensor:
        """The (N, K / group) scales again as fp32 (a copy); (N, 1) for per-channel ones."""
        c, ng = PACK_CHANNELS, self.in_features // self.group
        strips = self.scale.numel() // (c * ng)
        return (self.scale.view(strips, ng, c).permute(0, 2, 1).reshape(strips * c, ng)
                [:self.out_features].float())

    def rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The int8 rows (*ids.shape, K) and their fp32 scales (*ids.shape, K / group) of
        output channels `ids`: a tied embedding's lookups, read from the packed head."""
        c, k, ng = PACK_CHANNELS, self.in_features, self.in_features // self.group
        strips = self.weight.numel() // (c * k)
        strip, lane = ids // c, ids % c
        # indices on dims 0 and 3 around slices: the indexed dims come first
        q = self.weight.view(strips, k // BLOCK, BLOCK // 2, c, 2)[strip, :, :, lane, :]
        return (q.reshape(*ids.shape, k),
                self.scale.view(strips, ng, c)[strip, :, lane].float())

    def dequant_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """fp32 rows (*ids.shape, K) of output channels `ids`, each int8 times its scale: what
        rows() and a multiply give, in one native call instead of a dozen PyTorch ops (a tied
        embedding's lookup, every decode step)."""
        flat = ids.reshape(-1).to(torch.int64).contiguous()
        out = torch.empty(flat.numel(), self.in_features, dtype=torch.float32)
        rc = library().npc_w8a16_packed_rows(
            self.weight.data_ptr(), self.scale.data_ptr(), self.group, self.out_features,
            self.in_features, flat.data_ptr(), flat.numel(), out.data_ptr())
        if rc == -5:
            raise IndexError(f"row index out of range: rows are 0..{self.out_features - 1}")
        _check(rc, flat.numel(), self.in_features, self.group)
        return out.view(*ids.shape, self.in_features)

    def strip_offsets(self, row0: int) -> tuple[int, int]:
        """(weight, scale) addresses of the strip that starts at output channel row0."""
        strip = row0 // PACK_CHANNELS
        k = self.in_features
        return (self.weight.data_ptr() + strip * PACK_CHANNELS * k,
                self.scale.data_ptr()
                + strip * PACK_CHANNELS * (k // self.group) * self.scale.element_size())


def can_pack(out_features: int, in_features: int, group: int) -> bool:
    """Whether the packed kernel takes this weight: rows of whole blocks, scales per channel
    (group 0) or per group of whole blocks that tiles the row."""
    del out_features  # any count: the last strip is padded
    return in_features > 0 and in_features % BLOCK == 0 and (
        group == 0 or group_supported(in_features, group))


def pack_w8a16(w: torch.Tensor, scale: torch.Tensor, group: int,
               in_place: bool = False) -> PackedW8A16:
    """int8 (N, K) with scales (N, K / group), or (N,) with group 0, -> the packed layout, the
    scales as their nearest fp16 (qmath.weight_scales' exactly; fits_half: where close). A
    copy, or with in_place (N a multiple of PACK_CHANNELS) in w's own memory, which then holds
    the packed layout and must no longer be read as the plain weight: serving repacks a loaded
    model so, without a second copy of it (and without leaving the first copy's memory to the
    allocator's free lists, where a 7B model's freed layers raised peak RSS by 1.4 GB). The
    fp16 scales, half the fp32 ones' bytes, are new memory either way."""
    n, k = w.shape
    if not can_pack(n, k, group):
        _check(-2, 0, k, group)
    group = group or k
    strips = -(-n // PACK_CHANNELS)
    scale = scale.float().contiguous()
    if in_place:
        if n % PACK_CHANNELS or not w.is_contiguous():
            raise ValueError(f"{n} x {k} int8 weight: packing in place takes a contiguous "
                             f"weight of whole strips of {PACK_CHANNELS}")
        wp = w.view(-1)
    else:
        wp = torch.empty(strips * PACK_CHANNELS * k, dtype=torch.int8)
        w = w.contiguous()
    sp = torch.empty(strips * PACK_CHANNELS * (k // group), dtype=torch.float16)
    rc = library().npc_w8a16_pack(w.data_ptr(), scale.data_ptr(), group, n, k, wp.data_ptr(),
                                  sp.data_ptr())
    if rc == -1:
        raise MemoryError(f"int8 packing buffers for {k} inputs")
    if rc:
        raise ValueError("this build has no packed W8A16 kernel" if rc == -3 else
                         f"W8A16 group size {group} for {k} inputs cannot be packed")
    return PackedW8A16(wp, sp, group, n, k)


def act_span(group: int, k: int) -> int:
    """Blocks of BLOCK inputs that share one activation scale in w8a16_packed's W8A16 rows, for
    a weight of k inputs with scales per group of `group` (k: per channel): 4 on AVX2 builds
    where no span straddles two groups (fewer scalings of the int32 sums), else 1 (the row-major
    kernels' rows). native.blockfloat16(x, span) is their oracle."""
    lib = library()
    return int(lib.npc_w8a16_packed_span(group, k)) if lib is not None else 1


def w8a16_packed(x: torch.Tensor, p: PackedW8A16, act_int8: bool = False,
                 int8_pairs: bool = False) -> torch.Tensor:
    """fp32 (M, K) x the packed weight -> fp32 (M, N), the activations as 16-bit block
    floating point (W8A16) or, with act_int8, int8 per block of 32 (w8a8-dynamic's blocks):
    the same products as the row-major kernels (native.w8a16, native.w8a8_blocks), summed in
    another order. int8 blocks multiply four at a time (vpdpbusd); int8_pairs takes the W8A16
    pair product for them instead, which gives the same floats (to compare the two)."""
    x = x.contiguous()
    m = x.shape[0]
    y = torch.empty(m, p.out_features, dtype=torch.float32)
    if m:
        _check(library().npc_w8a16_packed(x.data_ptr(), p.weight.data_ptr(), p.scale.data_ptr(),
                                          p.group, (2 if int8_pairs else 1) if act_int8 else 0,
                                          y.data_ptr(), m,
                                          p.out_features, p.in_features,
                                          torch.get_num_threads()),
               m, p.in_features, p.group)
    return y
