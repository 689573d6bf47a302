"""Every layer of a real model's decode step (npc_decode_layers) from two builds of the kernels,
alternated step by step in one process: this checkout's sources and those of a git revision,
compiled with the same flags (engine.kernels.native.build_flags, so NPU_CONSOLE_KERNEL_ARCH=haswell
builds both for AVX2). Both run the same plan (the same weights, cache and rows), so the
machine's drift, which moves a run by up to 1.3x between minutes on the shared VMs, hits both
alike. Checks that both give the same floats, then prints each one's median ms per batch size.

    NPU_CONSOLE_KERNEL_ARCH=haswell python tests/bench/bench_step_ab.py --before HEAD \\
        --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf --quant w8a16

The model is quantized in memory as `bench offline --quant` does; each sequence sits at
position --pos, so attention reads that much context every step (rewriting the same cache row
each time: a step is idempotent). The head is not timed (bench_packed_ab.py times products)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_packed_ab import build_both, same  # beside this script
from bench_step_parts import native_runner


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--quant", default="w8a16", help="none, w8a16, w8a8-dynamic, ...")
    ap.add_argument("--before", default="HEAD", help="the git revision to compare against")
    ap.add_argument("--batch", default="1,8,16")
    ap.add_argument("--pos", type=int, default=96)
    ap.add_argument("--steps", type=int, default=200, help="steps per build and batch size")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rtol", type=float, default=0.0,
                    help="for a change of the numbers themselves: how far the two builds' "
                         "hidden states may differ, relative to the largest (default 0: the "
                         "same floats)")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    runner = native_runner(args.model, args.quant, args.threads, max(batches), args.pos + 8)
    plan = runner.decode_plan
    with tempfile.TemporaryDirectory() as tmp:
        fns = {v: lib.npc_decode_layers for v, lib in build_both(args.before, Path(tmp)).items()}
        for b in batches:
            ids, pos, slots = torch.full((b,), 7), torch.full((b,), args.pos), torch.arange(b)
            with torch.inference_mode():
                h0 = runner.inner.embed_tokens(ids).contiguous()
                tables = runner.family.rotary_tables(h0[None], pos)
                cos = torch.stack([c[:, 0] for c, _ in tables])
                sin = torch.stack([s[:, 0] for _, s in tables])
                times: dict[str, list[float]] = {v: [] for v in fns}
                outs: dict[str, torch.Tensor] = {}
                for _ in range(args.steps):
                    for v, fn in fns.items():
                        plan.fn = fn
                        h = h0.clone()
                        t = time.perf_counter()
                        plan.run(h, slots, pos, cos, sin)
                        times[v].append(time.perf_counter() - t)
                        outs[v] = h
            if not same(outs["before"], outs["after"], args.rtol):
                print(f"batch {b}: the two builds' floats differ", file=sys.stderr)
                return 1
            before, after = (statistics.median(times[v]) for v in ("before", "after"))
            print(json.dumps({"batch": b, "pos": args.pos, "before_ms": round(before * 1e3, 3),
                              "after_ms": round(after * 1e3, 3),
                              "speedup": round(before / after, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
