"""The CPU kernels of a decode step, ours against PyTorch's, float and int8: the 24 decoder
layers of the Qwen2.5-0.5B shape (q, k, v, o, gate, up, down), every layer its own weights, so
each pass streams ~358 M weights from memory (a repeated single layer would sit in the L3
cache and flatter every kernel).

For each row count M it times one pass through all 168 products, per kernel, and reports
ms per pass and the weight bytes read per second (min of --repeats):

    python tests/bench/bench_decode_kernels.py --threads 2

Kernels: fp32 / bf16 `F.linear` and fp32 native (what engine.runtime.cpu_linear runs); W8A16 `_weight_int8pack_mm` (bf16 activations) and native;
W8A8 fbgemm (integer rows + nibble split where the CPU saturates) and native. The int8 ones
run through `CpuBackend` exactly as QuantLinear calls them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

LAYER = [(896, 896), (128, 896), (128, 896), (896, 896), (4864, 896), (4864, 896), (896, 4864)]


def _pass_time(fn, layers, xs, repeats: int) -> float:
    def one():
        for per_layer in layers:
            for w in per_layer:
                fn(xs[_in(w)], w)

    one()  # warm: packing, allocator
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        one()
        best = min(best, time.perf_counter() - t)
    return best


def _in(w) -> int:  # a float weight (out, in) or a QuantLinear
    return w.in_features if hasattr(w, "in_features") else w.shape[1]


def main(argv: list[str] | None = None) -> int:
    from npu_console.engine.kernels import cpu, native
    from npu_console.engine.quant.qlinear import QuantLinear

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,8,64,256")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    fp32 = [[torch.randn(n, k) * 0.02 for n, k in LAYER] for _ in range(args.layers)]
    n_weights = sum(w.numel() for per in fp32 for w in per)

    def quantized(method):
        out = []
        for per in fp32:
            mods = []
            for w in per:
                lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
                lin.weight.data = w
                mods.append(QuantLinear.from_linear(lin, method))
            out.append(mods)
        return out

    kernels = {"fp32 F.linear": (fp32, lambda x, w: F.linear(x, w), 4),
               "bf16 F.linear": ([[w.bfloat16() for w in per] for per in fp32],
                                 lambda x, w: F.linear(x.bfloat16(), w), 2)}
    torch_be = cpu.CpuBackend(use_native=False)
    q16, q8 = quantized("w8a16"), quantized("w8a8-dynamic")
    kernels["w8a16 _weight_int8pack_mm"] = (q16, lambda x, q: torch_be._w8a16(q, x), 1)
    kernels["w8a8 fbgemm" + (" (nibble split)" if cpu.int16_saturation() else "")] = (
        q8, lambda x, q: torch_be._w8a8(q, x), 1)
    if native.available():
        kernels["fp32 native"] = (fp32, native.f32, 4)
        native_be = cpu.CpuBackend(use_native=True)
        kernels["w8a16 native"] = (q16, lambda x, q: native_be.forward(q, x), 1)
        kernels["w8a8 native"] = (q8, lambda x, q: native_be.forward(q, x), 1)
    else:
        print(f"native kernels unavailable: {native.build().reason}", file=sys.stderr)

    results = []
    for m in [int(r) for r in args.rows.split(",")]:
        xs = {896: torch.randn(m, 896), 4864: torch.randn(m, 4864)}
        for name, (layers, fn, nbytes) in kernels.items():
            dt = _pass_time(fn, layers, xs, args.repeats)
            row = {"rows": m, "kernel": name, "ms_per_pass": round(dt * 1e3, 2),
                   "weight_gb_s": round(n_weights * nbytes / dt / 1e9, 2)}
            results.append(row)
            print(json.dumps(row), flush=True)
    print("\n| rows | kernel | ms per 24-layer pass | weight GB/s |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']} | {r['kernel']} | {r['ms_per_pass']} | {r['weight_gb_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
