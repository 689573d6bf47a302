"""w8a8-dynamic's int8 blocks on the packed layout (cpu_i8_vnni.c): four inputs per
multiply-add (vpdpbusd, pk_gemm with quads) against two (the W8A16 pair product, vpdpwssd,
pk_gemm with pairs), on the same packed weights, interleaved: for each row count M the median time of each (the
activations' quantization included) and the speed-up. Shapes of SmolLM2-135M and Llama-2-7B.

    python tests/bench/bench_packed_int8.py --threads 2 [--rows 1,8,16,64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

SHAPES = {  # name: (in, out)
    "smollm2 q/k/v 576x960": (576, 960),
    "smollm2 gate/up 576x3072": (576, 3072),
    "smollm2 down 1536x576": (1536, 576),
    "llama2-7b gate/up 4096x11008": (4096, 11008),
    "llama2-7b down 11008x4096": (11008, 4096),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,8,16,64")
    ap.add_argument("--repeats", type=int, default=31)
    args = ap.parse_args()
    from npu_console.engine.kernels import packed as packing

    torch.set_num_threads(args.threads)
    if not packing.available():
        print("this build has no packed kernels (AVX512-VNNI only)", file=sys.stderr)
        return 1
    g = torch.Generator().manual_seed(0)
    for name, (k, n) in SHAPES.items():
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
        packed = packing.pack_w8a16(w, torch.rand(n, generator=g) * 0.01, 0)
        for m in map(int, args.rows.split(",")):
            x = torch.randn(m, k, generator=g)
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):
                for pairs in (False, True):  # interleaved: the machine's drift hits both
                    t = time.perf_counter()
                    packing.w8a16_packed(x, packed, act_int8=True, int8_pairs=pairs)
                    times[pairs].append(time.perf_counter() - t)
            quad, pair = (statistics.median(times[p]) for p in (False, True))
            print(json.dumps({"shape": name, "rows": m, "pairs_ms": round(pair * 1e3, 4),
                              "quads_ms": round(quad * 1e3, 4), "speedup": round(pair / quad, 2),
                              "quads_gmac_s": round(m * n * k / quad / 1e9, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
