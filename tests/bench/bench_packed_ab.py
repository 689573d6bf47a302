"""The packed block product (npc_w8a16_packed) of two builds of the kernels side by side in one
process: this checkout's sources and those of a git revision, compiled with the same flags
(engine.kernels.native.build_flags, so NPU_CONSOLE_KERNEL_ARCH=haswell builds both for AVX2)
and called alternately on the same packed weights, so the machine's drift hits both. Checks
that both give the same floats, then prints each one's median ms per shape and row count.

    NPU_CONSOLE_KERNEL_ARCH=haswell python tests/bench/bench_packed_ab.py --before HEAD --threads 2

Shapes of SmolLM2-135M and Llama-2-7B; --int8 takes w8a8-dynamic's int8 blocks instead of
W8A16's 16-bit ones (on VNNI builds: the quads). --group 32 gives the weights a scale per 32
inputs (a GGUF's Q8_0) instead of one per channel. --before-fp32-scales: the revision before
kept the packed scales in fp32 (before fp16 scales in the packed layout); it gets the same
scales, widened, in the same order.

    python tests/bench/bench_packed_ab.py --before HEAD~1 --group 32 --before-fp32-scales \
        --rows 1,8"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

SHAPES = {  # name: (in, out)
    "smollm2 gate/up 576x3072": (576, 3072),
    "smollm2 down 1536x576": (1536, 576),
    "llama2-7b gate/up 4096x11008": (4096, 11008),
}


def build(src_dir: Path, out: Path) -> ctypes.CDLL:
    from npu_console.engine.kernels import native

    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, *native.build_flags(), "-o", str(out), str(src_dir / native.SOURCE.name)],
                   check=True)
    lib = ctypes.CDLL(str(out))
    native.declare(_Entries(lib))  # the engine's own signatures for every entry point
    return lib


class _Entries:
    """A build's entry points for native.declare, where a revision from before an entry point
    existed leaves that one out instead of failing (ctypes keeps the ones it finds)."""

    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib

    def __getattr__(self, name: str):
        try:
            return getattr(self._lib, name)
        except AttributeError:
            return types.SimpleNamespace()


def same(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    """Whether two builds' results agree: the same floats, or with rtol > 0 within rtol of the
    largest magnitude (printed, so that a change of the numbers says how large it is)."""
    if rtol <= 0:
        return torch.equal(a, b)
    scale = max(a.abs().max().item(), 1e-30)
    rel = (a - b).abs().max().item() / scale
    print(f"largest difference: {rel:.2e} of the largest value", file=sys.stderr)
    return rel <= rtol


def build_both(before: str, tmp: Path) -> dict[str, ctypes.CDLL]:
    """The kernels of git revision `before` and of this checkout, built in `tmp` with the same
    flags: {"before": lib, "after": lib}."""
    from npu_console.engine.kernels import native

    here = native.SOURCE.parent
    repo = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, check=True,
                               capture_output=True, text=True).stdout.strip())
    old = tmp / "before"
    old.mkdir()
    for src in native.SOURCES:
        rel = src.relative_to(repo).as_posix()
        text = subprocess.run(["git", "show", f"{before}:{rel}"], cwd=repo, check=False,
                              capture_output=True, text=True)
        (old / src.name).write_text(text.stdout if text.returncode == 0 else "")
    return {"before": build(old, tmp / "before.so"), "after": build(here, tmp / "after.so")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="HEAD", help="the git revision to compare against")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,4,8,16")
    ap.add_argument("--repeats", type=int, default=41)
    ap.add_argument("--int8", action="store_true")
    ap.add_argument("--group", type=int, default=0,
                    help="inputs per weight scale (default 0: one per output channel)")
    ap.add_argument("--before-fp32-scales", action="store_true",
                    help="the revision before reads fp32 packed scales")
    ap.add_argument("--rtol", type=float, default=0.0,
                    help="for a change of the numbers themselves: how far the two builds may "
                         "differ, relative to the largest output (default 0: the same floats)")
    args = ap.parse_args()
    from npu_console.engine.kernels import packed as packing

    torch.set_num_threads(args.threads)
    if not packing.available():
        print("this build has no packed kernels", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        libs = build_both(args.before, Path(tmp))
        g = torch.Generator().manual_seed(0)
        for name, (k, n) in SHAPES.items():
            w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
            shape = (n, k // args.group) if args.group else (n,)
            p = packing.pack_w8a16(w, torch.rand(*shape, generator=g) * 0.01, args.group)
            scales = {"before": p.scale.float() if args.before_fp32_scales else p.scale,
                      "after": p.scale}
            for m in map(int, args.rows.split(",")):
                x = torch.randn(m, k, generator=g)
                times: dict[str, list[float]] = {v: [] for v in libs}
                ys = {v: torch.empty(m, n) for v in libs}
                for _ in range(args.repeats if k < 4096 else max(5, args.repeats // 4)):
                    for v, lib in libs.items():
                        t = time.perf_counter()
                        lib.npc_w8a16_packed(x.data_ptr(), p.weight.data_ptr(),
                                             scales[v].data_ptr(),
                                             p.group, int(args.int8), ys[v].data_ptr(), m, n, k,
                                             args.threads)
                        times[v].append(time.perf_counter() - t)
                if not same(ys["before"], ys["after"], args.rtol):
                    print(f"{name}, {m} rows: the two builds' floats differ", file=sys.stderr)
                    return 1
                before, after = (statistics.median(times[v]) for v in ("before", "after"))
                print(json.dumps({"shape": name, "rows": m, "before_ms": round(before * 1e3, 4),
                                  "after_ms": round(after * 1e3, 4),
                                  "speedup": round(before / after, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
