"""The parts of one native decode step of a real model, at a fixed batch and context: the
embedding, the rotary rows, every layer (one native call), the final norm and the head.

The numbers in docs/benchmarks.md, "Each change on its own" (decode-step rows), come from this:

    python tests/bench/bench_step_parts.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --quant w8a8-dynamic --batch 8 --pos 100 --threads 2

The model is quantized in memory as `bench offline --quant` does (the plain recipe); each
sequence sits at position --pos, so attention reads that much context every step. Medians of
--steps steps, in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time


def native_runner(model: str, quant: str, threads: int, slots: int, max_len: int,
                  kv_dtype: str = "auto"):
    """A BatchedRunner over `model` quantized in memory as `bench offline --quant` does, on
    `threads` torch threads, with its native decode plan (or SystemExit saying why not)."""
    import torch
    from npu_console.engine.bench.offline import _quantize
    from npu_console.engine.models import load_model
    from npu_console.engine.runtime.runner import BatchedRunner

    torch.set_num_threads(threads)
    loaded = load_model(model, device="cpu", dtype="float32")
    if quant != "none":
        loaded, _ = _quantize(loaded, quant, None, threading.Event())
    runner = BatchedRunner(loaded.model, num_slots=slots, max_len=max_len, kv_dtype=kv_dtype)
    if runner.decode_plan is None:
        raise SystemExit(f"no native decode step: {runner.decode_plan_reason}")
    return runner


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--quant", default="w8a8-dynamic", help="none, w8a16, w8a8-dynamic, ...")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--pos", type=int, default=48)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-dtype", default="auto", help="the KV cache: auto (fp16 on CPU with the native kernels), float32, float16")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    runner = native_runner(args.model, args.quant, args.threads, max(batches), args.pos + 8,
                           args.kv_dtype)
    plan = runner.decode_plan
    for b in batches:
        ids, pos, slots = torch.full((b,), 7), torch.full((b,), args.pos), torch.arange(b)
        parts: dict[str, list[float]] = {k: [] for k in ("embed", "rope", "layers", "norm",
                                                          "head")}
        with torch.inference_mode():
            for _ in range(args.steps):
                t = [time.perf_counter()]
                h = runner.inner.embed_tokens(ids).contiguous()
                t.append(time.perf_counter())
                tables = runner.family.rotary_tables(h[None], pos)  # as the runner reads them
                cos = torch.stack([c[:, 0] for c, _ in tables])
                sin = torch.stack([s[:, 0] for _, s in tables])
                t.append(time.perf_counter())
                plan.run(h, slots, pos, cos, sin)
                t.append(time.perf_counter())
                normed = plan.final_norm(h)
                t.append(time.perf_counter())
                runner.family.head_fn(normed)
                t.append(time.perf_counter())
                for k, a, z in zip(parts, t, t[1:]):
                    parts[k].append((z - a) * 1000)
        print(json.dumps({"batch": b, "pos": args.pos, "threads": args.threads,
                          "kv_dtype": args.kv_dtype,
                          **{k: round(statistics.median(v), 3) for k, v in parts.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
