"""One decode step of the runner, the PyTorch loop against the native call (engine/runtime/
native_decode.py), on the Qwen2.5-0.5B configuration with random weights, per variant.

Both paths run on one runner in one process, alternating, so the VM's drift hits them alike:

    python tests/bench/bench_decode_step.py --variants fp32,w8a16+head@fp32 --batch 1,8

Variants as in bench_quant.py (fp32, METHOD[+head][@fp32]). Each sequence has a 48-token
context; a step decodes one token for each of --batch sequences (the same position every time,
so the context does not grow). Reports the median step time in ms of each path and, for the
native path, its parts: the layers (one native call) and the final norm + lm_head.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def measure(model, variant: str, batch: int, steps: int) -> dict:
    import torch
    from npu_console.engine.runtime.runner import BatchedRunner
    from npu_console.engine.runtime.scheduler import ScheduledSeq
    from npu_console.engine.runtime.sequence import Sequence

    runner = BatchedRunner(model, num_slots=max(batch, 1), max_len=128)
    plan = runner.decode_plan
    if plan is None:
        raise SystemExit(f"{variant}: no native decode step ({runner.decode_plan_reason})")
    seqs = []
    for b in range(batch):
        s = Sequence(request_id=str(b), prompt_ids=list(range(5 + b, 53 + b)))
        s.slot = b
        with torch.inference_mode():
            runner.execute([ScheduledSeq(s, 0, 48)], 0)
        s.output_ids.append(7)
        s.num_computed = 48
        seqs.append(s)
    items = [ScheduledSeq(s, 48, 1) for s in seqs]

    def step() -> float:
        t = time.perf_counter()
        with torch.inference_mode():
            runner.execute(items, len(items))
        return time.perf_counter() - t

    times: dict[str, list[float]] = {"torch": [], "native": []}
    for _ in range(2):  # warm both
        runner.decode_plan = None
        step()
        runner.decode_plan = plan
        step()
    for _ in range(steps):
        runner.decode_plan = None
        times["torch"].append(step())
        runner.decode_plan = plan
        times["native"].append(step())

    ids = torch.full((batch,), 7)
    pos = torch.full((batch,), 48)
    with torch.inference_mode():
        h = runner.inner.embed_tokens(ids).contiguous()
        cos, sin = runner.inner.rotary_emb(h[None], pos[None])
        layers, head = [], []
        for _ in range(steps):
            t = time.perf_counter()
            plan.run(h.clone(), torch.arange(batch), pos, cos[0], sin[0])
            layers.append(time.perf_counter() - t)
            t = time.perf_counter()
            runner.family.head_fn(runner.inner.norm(h))
            head.append(time.perf_counter() - t)
    def ms(xs: list[float]) -> float:
        return round(statistics.median(xs) * 1000, 2)

    return {"variant": variant, "batch": batch, "torch_ms": ms(times["torch"]),
            "native_ms": ms(times["native"]), "native_layers_ms": ms(layers),
            "head_ms": ms(head)}


def main() -> int:
    import torch
    from bench_quant import build_variant

    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="fp32,w8a16+head@fp32,w8a8-dynamic+head@fp32")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print("| variant | batch | PyTorch loop ms | native step ms | x | native layers ms | "
          "norm + lm_head ms |")
    print("|---|---|---|---|---|---|---|")
    for v in args.variants.split(","):
        model = build_variant(v)
        for b in (int(x) for x in args.batch.split(",")):
            r = measure(model, v, b, args.steps)
            print(f"| {v} | {b} | {r['torch_ms']} | {r['native_ms']} | "
                  f"{r['torch_ms'] / r['native_ms']:.2f} | {r['native_layers_ms']} | "
                  f"{r['head_ms']} |", flush=True)
            print(json.dumps(r), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
