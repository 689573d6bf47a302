"""The kernels in cpu_gemm.c (INT8 products, and the engine's fp32 decode product) and
cpu_decode.c (whole decode steps over them, which includes cpu_gemm.c): built with the system C
compiler on first use, cached, loaded with ctypes (which releases the GIL for the call).
x86-64 CPUs with AVX2 + FMA build them for their own -march (AVX512-VNNI where present);
aarch64 CPUs (Kunpeng 920 hosts of Ascend servers, Graviton, Ampere) build them on NEON through
simd_neon.h, with -march=armv8.2-a+dotprod where /proc/cpuinfo lists `asimddp` (W8A8 on sdot,
cpu_i8_sdot.c), else -march=armv8-a: the same floats as the AVX2 build, bit for bit
(tests/test_kernels_aarch64.py, cross-compiled and run under qemu-user).

Optional by design: without a compiler, on a CPU without AVX2/FMA (x86-64) or NEON (aarch64),
on other CPUs, or with NPU_CONSOLE_NATIVE_KERNELS=0, `library()` returns None and the CPU
backend keeps PyTorch's own kernels. The build is one gcc call of well under a second; the shared object lands in
engine.paths.cache_dir() (~/.cache/npu-console, or $NPU_CONSOLE_CACHE)/kernels under a name that hashes the source,
the flags and the CPU's feature flags, written to a temporary name and renamed, so concurrent
first uses and hosts sharing a home directory never load a half-written or foreign build. The
folder is the user's alone (0700), and a cached build is loaded only when this user owns it and
no one else can write it (kernels/trust.py); otherwise it is rebuilt.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import paths
from ..devices import cpu_flags
from .trust import load_trusted, private_dir, untrusted

log = logging.getLogger(__name__)

# compiled as one unit: cpu_decode.c #includes cpu_gemm.c, which #includes cpu_i8_vnni.c where
# the target has AVX512-VNNI (else cpu_pk_avx2.c on x86), and on aarch64 simd_neon.h and (with
# dotprod) cpu_i8_sdot.c
SOURCE = Path(__file__).with_name("cpu_decode.c")
SOURCES = tuple(Path(__file__).with_name(n) for n in (
    "cpu_decode.c", "cpu_gemm.c", "cpu_i8_vnni.c", "cpu_pk_avx2.c", "simd_neon.h",
    "cpu_i8_sdot.c"))
# -ffp-contract=off: every fused multiply-add is one the source asks for (the FMA intrinsics);
# left to the compiler, x86 and aarch64 GCC fuse different scalar a * b + c (measured: the
# fp32 product's tail and W8A16's partial last block differed in the last bit), and the
# aarch64 build could not give the x86 builds' floats bit for bit
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC")
ENV_SWITCH = "NPU_CONSOLE_NATIVE_KERNELS"
# Build for another -march than this CPU's own, e.g. `haswell` (AVX2 + FMA, no AVX-512): how a
# VNNI machine measures what an AVX2-only server gets (docs/benchmarks.md); `armv8-a` on an
# aarch64 CPU with dotprod: the plain NEON build. Unset: this CPU's own (default_arch).
ARCH_ENV = "NPU_CONSOLE_KERNEL_ARCH"
# aarch64 -march per CPU: the dot-product extension (sdot, `asimddp` in /proc/cpuinfo; the
# kernel's HWCAP_ASIMDDP) came with Armv8.2; NEON itself is part of every aarch64 CPU
ARM_DOTPROD_ARCH = "armv8.2-a+dotprod"
ARM_BASE_ARCH = "armv8-a"


def is_aarch64(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ("aarch64", "arm64")


def default_arch(machine: str | None = None, flags: set[str] | None = None) -> str:
    """The -march the kernels are built for on this CPU: x86-64 `native`; aarch64 with the
    dot-product extension ARM_DOTPROD_ARCH, without it ARM_BASE_ARCH."""
    if not is_aarch64(machine):
        return "native"
    return ARM_DOTPROD_ARCH if "asimddp" in (cpu_flags() if flags is None else flags) \
        else ARM_BASE_ARCH


def build_flags(machine: str | None = None, flags: set[str] | None = None) -> tuple[str, ...]:
    arch = os.environ.get(ARCH_ENV, "").strip().lower() or default_arch(machine, flags)
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.+-]*", arch):
        log.warning("ignoring %s=%r (not a -march name)", ARCH_ENV, arch)
        arch = default_arch(machine, flags)
    return tuple(f"-march={arch}" if f == "-march=native" else f for f in FLAGS)


@dataclass(frozen=True)
class BuildInfo:
    path: Path | None
    reason: str  # why it is unavailable, or "built" / "cached"


def kernel_dir() -> Path:
    return paths.cache_dir() / "kernels"


def _unavailable_reason(flags: set[str], machine: str | None = None) -> str | None:
    machine = machine or platform.machine()
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"disabled by {ENV_SWITCH}"
    if is_aarch64(machine):
        # NEON is mandatory on aarch64; a kernel that lists features lists `asimd` too
        return "the CPU lacks NEON (asimd)" if flags and "asimd" not in flags else None
    if machine.lower() not in ("x86_64", "amd64"):
        return f"neither an x86-64 nor an aarch64 CPU ({machine})"
    if not {"avx2", "fma"} <= flags:
        return "the CPU lacks AVX2/FMA"
    return None


BUILD_TIMEOUT_S = 300  # -O3 of every kernel on a busy 2-core machine takes one to two minutes


def _compile(argv: list[str], timeout_s: float) -> tuple[int, str]:
    """Run the compiler in a process group of its own: on timeout the whole group goes, since
    killing the `cc` driver alone leaves cc1 and as compiling (and holding a core) for minutes."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, err


def c_compiler() -> str | None:
    """The C compiler the kernels are built with: $CC, else cc, else gcc."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def build() -> BuildInfo:
    """Compile (or find the cached) shared object; never raises."""
    flags = cpu_flags()
    reason = _unavailable_reason(flags)
    if reason:
        return BuildInfo(None, reason)
    cc = c_compiler()
    if not cc or not shutil.which(cc):
        return BuildInfo(None, "no C compiler (install gcc)")
    src = b"".join(p.read_bytes() for p in SOURCES)
    cflags = build_flags(flags=flags)
    key = hashlib.sha256(src + " ".join(cflags).encode() + " ".join(sorted(flags)).encode()
                         + cc.encode()).hexdigest()[:16]
    out = kernel_dir() / f"cpu_gemm-{key}.so"
    tmp = None
    try:
        problem = private_dir(out.parent)
        if problem:
            return BuildInfo(None, f"kernel cache refused: {problem}")
        if out.exists():
            why = untrusted(out)
            if why is None:
                return BuildInfo(out, "cached")
            log.warning("refusing the cached kernel %s (%s); rebuilding it", out, why)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        returncode, stderr = _compile([cc, *cflags, "-o", tmp, str(SOURCE)], BUILD_TIMEOUT_S)
        if returncode != 0:
            first = (stderr.strip().splitlines() or ["?"])[0]
            return BuildInfo(None, f"compiler failed: {first}")
        os.chmod(tmp, 0o700)  # the linker's mode follows the umask: never group-writable
        os.replace(tmp, out)  # over a refused file too
        tmp = None
    except (OSError, subprocess.SubprocessError) as exc:
        return BuildInfo(None, f"build failed: {exc}")
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)  # a failed or interrupted build leaves nothing to load later
    return BuildInfo(out, "built")


_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_INT = ctypes.c_int


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    info = build()
    if info.path is None:
        log.info("native int8 kernels unavailable (%s); using PyTorch's", info.reason)
        return None
    try:
        lib = load_trusted(info.path)  # checked and loaded through one descriptor
    except OSError as exc:
        log.warning("native int8 kernels failed to load (%s); using PyTorch's", exc)
        return None
    declare(lib)
    return lib


def declare(lib: ctypes.CDLL) -> None:
    """The exported functions' signatures (also for a test's build with other flags)."""
    lib.npc_w8a16.argtypes = [_P, _P, _P, _P, _I64, _I64, _I64, _INT]
    lib.npc_w8a16.restype = _INT
    lib.npc_w8a8_block.argtypes = [_P, _P, _P, _P, _I64, _I64, _I64, _INT]
    lib.npc_w8a8_block.restype = _INT
    lib.npc_w8a16_grouped.argtypes = [_P, _P, _P, _I64, _P, _I64, _I64, _I64, _INT]
    lib.npc_w8a16_grouped.restype = _INT
    lib.npc_w8a8_f32.argtypes = [_P, _INT, ctypes.c_float, _P, _P, _P, _P, _I64, _I64, _I64,
                                 _INT]
    lib.npc_w8a8_f32.restype = _INT
    lib.npc_f32.argtypes = [_P, _P, _P, _P, _I64, _I64, _I64, _INT]
    lib.npc_f32.restype = None
    lib.npc_decode_layers.argtypes = [_P, _P, _P, _I64, _P, _P, _P, _P, _INT]
    lib.npc_decode_layers.restype = _INT
    lib.npc_w8a16_tok.argtypes = [_P, _P, _P, _P, _I64, _I64, _I64, _INT]
    lib.npc_w8a16_tok.restype = _INT
    lib.npc_int8_row_sums.argtypes = [_P, _I64, _I64, _P]
    lib.npc_int8_row_sums.restype = None
    lib.npc_rmsnorm.argtypes = [_P, _P, ctypes.c_float, _P, _I64, _I64]
    lib.npc_rmsnorm.restype = None
    lib.npc_w8a16_packs.argtypes = []
    lib.npc_w8a16_packs.restype = _INT
    lib.npc_w8a16_pack.argtypes = [_P, _P, _I64, _I64, _I64, _P, _P]
    lib.npc_w8a16_pack.restype = _INT
    lib.npc_w8a16_packed.argtypes = [_P, _P, _P, _I64, _INT, _P, _I64, _I64, _I64, _INT]
    lib.npc_w8a16_packed.restype = _INT
    lib.npc_w8a16_packed_rows.argtypes = [_P, _P, _I64, _I64, _I64, _P, _I64, _P]
    lib.npc_w8a16_packed_rows.restype = _INT
    lib.npc_w8a16_packed_span.argtypes = [_I64, _I64]
    lib.npc_w8a16_packed_span.restype = _I64
    lib.npc_int8_isa.argtypes = []
    lib.npc_int8_isa.restype = ctypes.c_char_p


def available() -> bool:
    return library() is not None


def buildable() -> bool:
    """Whether the kernels load here, without compiling them when they are not built yet (the
    CPU's instructions and a C compiler): for plans shown before any work, on any thread."""
    if library.cache_info().currsize:
        return library() is not None
    cc = c_compiler()
    return _unavailable_reason(cpu_flags()) is None and bool(cc and shutil.which(cc))


def int8_isa() -> str | None:
    """The instructions of this build's int8 products: "avx512-vnni" where the CPU has them
    (W8A8 on vpdpbusd, per-channel W8A16 on vpdpwssd, 512-bit registers; grouped W8A16 stays
    on AVX2) or "avx2" (vpmaddwd); on aarch64 "neon-dotprod" (W8A8 on sdot; W8A16 on NEON) or
    "neon"; None without the kernels."""
    lib = library()
    return lib.npc_int8_isa().decode() if lib is not None else None


def layer_isa(method: str, grouped: bool) -> str | None:
    """The instructions that run one int8 layer (method "w8a16", "w8a8-dynamic", ...): the
    build's int8_isa where its special instructions serve the layer, else the base ones (NEON
    for W8A16 on a dotprod build, whose sdot takes int8 x int8 only). Grouped W8A16 runs on
    VNNI through its packed layout (kernels.packed)."""
    isa = int8_isa()
    if isa == "neon-dotprod" and not method.startswith("w8a8"):
        return "neon"
    return isa


BLOCK = 32  # activation values per scale of the W8A16 kernel's 16-bit block floating point


def group_supported(in_features: int, group_size: int) -> bool:
    """Whether the W8A16 kernel takes weight scales per group of `group_size` inputs: groups
    of whole activation blocks that tile the row (0: one scale per output channel)."""
    return group_size == 0 or (group_size > 0 and group_size % BLOCK == 0
                               and in_features % group_size == 0)


def _check(rc: int, m: int, k: int, group: int) -> None:
    if rc == -2:
        raise ValueError(f"W8A16 group size {group} for {k} inputs: the native kernel takes "
                         f"multiples of {BLOCK} that divide the input size")
    if rc:
        raise MemoryError(f"int8 layer scratch for {m} rows x {k}")


def w8a16(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor,
          group_size: int = 0) -> torch.Tensor:
    """fp32 (M, K) as 16-bit block floating point (cpu_gemm.c) x int8 (N, K) with fp32
    scales, per channel (N,) or, with group_size, per group of inputs (N, K / group_size)
    -> fp32 (M, N)."""
    x = x.contiguous()
    m, k = x.shape
    n = w.shape[0]
    want = (n, k // group_size) if group_size else (n,)
    if group_size and not group_supported(k, group_size):
        _check(-2, m, k, group_size)
    if tuple(scale.shape) != want:
        raise ValueError(f"W8A16 scales of shape {tuple(scale.shape)}, expected {want}")
    scale = scale.float().contiguous()
    y = torch.empty(m, n, dtype=torch.float32)
    if m:  # the kernels take at least one row
        _check(library().npc_w8a16_grouped(x.data_ptr(), w.data_ptr(), scale.data_ptr(),
                                           group_size, y.data_ptr(), m, n, k,
                                           torch.get_num_threads()), m, k, group_size)
    return y


def blockfloat16(x: torch.Tensor, span: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The W8A16 kernel's activations, in PyTorch (the oracle its tests hold it to): each span
    of `span` blocks of BLOCK values of a row of x (M, K) gets the power-of-two scale that puts
    the span's largest magnitude in [2^14, 2^15), and each value becomes
    round-half-even(x / scale). Returns the int16 values as float64 (M, K) and each value's
    scale (M, K), so that x ~ values * scale to within 2^-15 of each span's largest magnitude.
    (The kernel also maps spans with NaN or infinity to NaN scales, and spans below 2^-110 to
    zero.) The row-major kernels take span 1; the packed product's span is
    packed.act_span(group, K)."""
    m, k = x.shape
    width = BLOCK * span
    pad = -k % width
    xb = torch.nn.functional.pad(x.double(), (0, pad)).view(m, -1, width)
    exponent = torch.frexp(xb.abs().amax(-1, keepdim=True).float()).exponent
    scale = torch.ldexp(torch.ones_like(xb[..., :1]), (exponent - 15).double())
    values = torch.round(xb / scale).clamp_(-32767, 32767)
    return (values.view(m, -1)[:, :k],
            scale.expand_as(xb).reshape(m, -1)[:, :k])


def f32(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 (M, K) x fp32 (N, K) (+ bias (N,)) -> fp32 (M, N): `F.linear` for few rows."""
    x = x.contiguous()
    m, k = x.shape
    y = torch.empty(m, w.shape[0], dtype=torch.float32)
    if m:
        library().npc_f32(x.data_ptr(), w.data_ptr(), 0 if bias is None else bias.data_ptr(),
                          y.data_ptr(), m, w.shape[0], k, torch.get_num_threads())
    return y


TOKEN_ROWS_MAX_K = 8192  # npc_w8a16_tok's int32 sums hold rows up to this long


def w8a16_token_rows(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """W8A16 with int16 activations, one scale per row (max|x| / 16383): the int8 head's
    product (Int8Linear.act_rows = "token"). fp32 (M, K) x int8 (N, K) -> fp32 (M, N)."""
    x = x.contiguous()
    m, k = x.shape
    y = torch.empty(m, w.shape[0], dtype=torch.float32)
    if m:
        rc = library().npc_w8a16_tok(x.data_ptr(), w.data_ptr(), scale.data_ptr(), y.data_ptr(),
                                     m, w.shape[0], k, torch.get_num_threads())
        if rc == -2:
            raise ValueError(f"{k} inputs: int16 rows take at most {TOKEN_ROWS_MAX_K}")
        if rc:
            raise MemoryError(f"int8 layer scratch for {m} rows x {k}")
    return y


def w8a8_blocks(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """W8A8 with int8 activations per block of 32 values (Int8Linear.act_rows = "block";
    qmath.block_quantize_act is its oracle) times int8 (N, K) with per-channel fp32 scales."""
    x = x.contiguous()
    m, k = x.shape
    y = torch.empty(m, w.shape[0], dtype=torch.float32)
    if m and library().npc_w8a8_block(x.data_ptr(), w.data_ptr(), scale.float().contiguous()
                                      .data_ptr(), y.data_ptr(), m, w.shape[0], k,
                                      torch.get_num_threads()):
        raise MemoryError(f"int8 layer scratch for {m} rows x {k}")
    return y


def weight_sums(w: torch.Tensor) -> torch.Tensor:
    """sum_k w[n, k] of an int8 (N, K) weight, int32 [N]: the VNNI W8A8 product's correction
    (cpu_i8_vnni.c), summed once when a layer is bound instead of in every call."""
    w = w.contiguous()
    out = torch.empty(w.shape[0], dtype=torch.int32)
    library().npc_int8_row_sums(w.data_ptr(), w.shape[0], w.shape[1], out.data_ptr())
    return out


def w8a8(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
         static_scale: float | None, wsum: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 (M, K) activations quantized to int8 (per token, or with the static per-tensor
    scale) times int8 (N, K) with fp32 per-channel scales -> fp32 (M, N); exact integer
    accumulation. wsum: weight_sums(w), or None for the kernel to sum them itself."""
    x = x.contiguous()
    m, k = x.shape
    y = torch.empty(m, w.shape[0], dtype=torch.float32)
    per_token = static_scale is None
    if m and library().npc_w8a8_f32(
            x.data_ptr(), int(per_token), 0.0 if per_token else float(static_scale),
            w.data_ptr(), None if wsum is None else wsum.data_ptr(), w_scale.data_ptr(),
            y.data_ptr(), m, w.shape[0], k, torch.get_num_threads()):
        raise MemoryError(f"int8 layer scratch for {m} rows x {k}")
    return y


def layer_forward(mod, scale: torch.Tensor | None, static_scale: float | None,
                  packed=None):
    """A forward function for one QuantLinear on these kernels: the whole layer in one call,
    with as little Python around it as possible (a decode step makes ~170 of these calls; the
    generic module path cost ~35 us each, a tenth of a 0.5B model's step, this one ~16-20 us;
    going through w8a16() / w8a8() above instead measured 2-8 % slower per pass). `packed`: the
    layer's kernels.packed.PackedW8A16, which it then reads instead of its plain weight."""
    lib = library()
    n, k = mod.out_features, mod.in_features
    f32 = torch.float32
    get_threads = torch.get_num_threads
    if packed is not None:
        fn = lib.npc_w8a16_packed
        wp, sp, group = packed.weight, packed.scale, packed.group
        act_int8 = int(mod.method == "w8a8-dynamic")  # its activations per block of 32

        def call(x2, y, m):
            _check(fn(x2.data_ptr(), wp.data_ptr(), sp.data_ptr(), group, act_int8, y.data_ptr(),
                      m, n, k, get_threads()), m, k, group)
    elif mod.method == "w8a16" and mod.group_size:
        fn = lib.npc_w8a16_grouped
        group = mod.group_size

        def call(x2, y, m):
            _check(fn(x2.data_ptr(), mod.weight.data_ptr(), scale.data_ptr(), group,
                      y.data_ptr(), m, n, k, get_threads()), m, k, group)
    elif mod.method == "w8a16" and getattr(mod, "act_rows", "block") == "token" \
            and k <= TOKEN_ROWS_MAX_K:
        fn = lib.npc_w8a16_tok

        def call(x2, y, m):
            if fn(x2.data_ptr(), mod.weight.data_ptr(), scale.data_ptr(), y.data_ptr(), m, n, k,
                  get_threads()):
                raise MemoryError(f"int8 layer scratch for {m} rows x {k}")
    elif mod.method == "w8a16" or (mod.method == "w8a8-dynamic" and mod.act_rows == "block"):
        # int16 block floating point, or int8 per block of 32: the same block product
        fn = lib.npc_w8a16 if mod.method == "w8a16" else lib.npc_w8a8_block

        def call(x2, y, m):
            if fn(x2.data_ptr(), mod.weight.data_ptr(), scale.data_ptr(), y.data_ptr(), m, n, k,
                  get_threads()):
                raise MemoryError(f"int8 layer scratch for {m} rows x {k}")
    else:
        fn = lib.npc_w8a8_f32
        per_token = int(static_scale is None)
        static = 0.0 if static_scale is None else float(static_scale)
        wsum = weight_sums(mod.weight)  # the layer's weight is fixed once bound

        def call(x2, y, m):
            if fn(x2.data_ptr(), per_token, static, mod.weight.data_ptr(), wsum.data_ptr(),
                  scale.data_ptr(), y.data_ptr(), m, n, k, get_threads()):
                raise MemoryError(f"int8 layer scratch for {m} rows x {k}")

    def forward(x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, k)
        if x2.dtype != f32:
            x2 = x2.float()
        elif not x2.is_contiguous():
            x2 = x2.contiguous()
        m = x2.shape[0]
        y = torch.empty(m, n, dtype=f32)
        if m:
            call(x2, y, m)
        bias = mod.bias
        if bias is not None:
            y += bias
        if x.dtype != f32:
            y = y.to(x.dtype)
        return y.view(*lead, n)

    return forward
