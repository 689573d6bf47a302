"""Matrix products of the Qwen2.5-0.5B shapes on this CPU: how much cheaper a token gets when
decode is batched, and which weight layout the CPU kernels prefer.

For each row count M (1 = one sequence decoding, 16 = a full decode batch, 512 = a prefill
chunk) it times `F.linear(x, W)` with W stored as nn.Linear keeps it ([out, in], "NT") and as
the transpose of a contiguous [in, out] tensor ("NN"), and the engine's own fp32 kernel on the
NT weight ("native", engine/runtime/cpu_linear.py; when it builds), interleaved, median of
--repeats.

    python tests/bench/bench_gemm.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = {  # name: (in, out)
    "qkv/o 896x896": (896, 896),
    "up/gate 896x4864": (896, 4864),
    "down 4864x896": (4864, 896),
    "lm_head 896x151936": (896, 151936),
}


def timed_linear(x: torch.Tensor, w: torch.Tensor) -> float:
    F.linear(x, w)  # warm (first-call packing, allocator)
    t = time.perf_counter()
    F.linear(x, w)
    return time.perf_counter() - t


def timed_native(x: torch.Tensor, w: torch.Tensor) -> float:
    from npu_console.engine.kernels import native

    native.f32(x, w)
    t = time.perf_counter()
    native.f32(x, w)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    from npu_console.engine.kernels import native

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="1,4,8,16,64,512")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = [int(r) for r in args.rows.split(",")]
    out = []
    for name, (k, n) in SHAPES.items():
        w_nt = torch.randn(n, k)
        w_nn = w_nt.t().contiguous().t()  # same values, [in, out] storage
        for m in rows:
            x = torch.randn(m, k)
            reps = max(2, args.repeats // (4 if n > 100_000 and m > 64 else 1))
            nts, nns, nats = [], [], []
            for _ in range(reps):  # interleave: this VM's speed drifts
                nts.append(timed_linear(x, w_nt))
                nns.append(timed_linear(x, w_nn))
                if native.available():
                    nats.append(timed_native(x, w_nt))
            nt, nn = statistics.median(nts), statistics.median(nns)
            flop = 2 * m * k * n
            row = {"shape": name, "M": m, "nt_ms": nt * 1e3, "nn_ms": nn * 1e3,
                   "nt_gflops": flop / nt / 1e9, "nn_gflops": flop / nn / 1e9,
                   "nt_ms_per_row": nt * 1e3 / m}
            line = (f"{name:20s} M={m:4d}  NT {nt * 1e3:8.2f} ms {row['nt_gflops']:6.1f} GF/s   "
                    f"NN {nn * 1e3:8.2f} ms {row['nn_gflops']:6.1f} GF/s")
            if nats:
                nat = statistics.median(nats)
                row.update(native_ms=nat * 1e3, native_gflops=flop / nat / 1e9)
                line += f"   native {nat * 1e3:8.2f} ms {row['native_gflops']:6.1f} GF/s"
            out.append(row)
            print(line, file=sys.stderr, flush=True)
    print(json.dumps({"threads": args.threads, "torch": torch.__version__, "rows": out},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
