"""Grouped W8A16 (one scale per 32 weights: a GGUF's Q8_0 loaded as INT8) on the row-major loop
and on the packed layout of x86 builds (pk_gemm; the AVX2 kernel, cpu_pk_avx2.c, with
NPU_CONSOLE_KERNEL_ARCH=haswell), at the Llama-2-7B shapes: for each row count M (1 = one
sequence decoding, 8 = a decode batch, 512 = a prefill chunk) the median time of each,
interleaved, and the multiply-adds per second.

    python tests/bench/bench_grouped_w8a16.py --threads 2 [--rows 1,2,4,8,16,64,512]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

SHAPES = {  # name: (in, out) of Llama-2-7B
    "q/k/v/o 4096x4096": (4096, 4096),
    "gate/up 4096x11008": (4096, 11008),
    "down 11008x4096": (11008, 4096),
}
GROUP = 32


def median_time(fn, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,2,4,8,16,64,512")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    from npu_console.engine.kernels import native
    from npu_console.engine.kernels import packed as packing

    torch.set_num_threads(args.threads)
    if not packing.available():
        print("this build has no packed W8A16 kernel (AVX512-VNNI only)", file=sys.stderr)
        return 1
    g = torch.Generator().manual_seed(0)
    for name, (k, n) in SHAPES.items():
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
        scale = torch.rand(n, k // GROUP, generator=g) * 0.01
        packed = packing.pack_w8a16(w, scale, GROUP)
        for m in map(int, args.rows.split(",")):
            x = torch.randn(m, k, generator=g)
            row = median_time(lambda x=x, w=w, s=scale: native.w8a16(x, w, s, GROUP), args.repeats)
            pk = median_time(lambda x=x, p=packed: packing.w8a16_packed(x, p), args.repeats)
            print(json.dumps({"shape": name, "rows": m, "row_major_ms": round(row * 1e3, 3),
                              "packed_ms": round(pk * 1e3, 3), "speedup": round(row / pk, 2),
                              "packed_gmac_s": round(m * n * k / pk / 1e9, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
