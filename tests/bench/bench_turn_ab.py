"""What turning down_proj's inputs (engine.quant.turn; cpu_decode.c turn_row) costs in whole
native decode steps: one plan of a turned checkpoint, each layer's turn switched on and off
between alternating steps (the off steps compute a wrong model, at the same cost otherwise),
so the machine's drift hits both alike. Medians in ms.

    python tests/bench/bench_turn_ab.py --model /tmp/q-static --batch 1,8

--model: a checkpoint `npu-console quantize --method w8a8-static` wrote (the turn is on by
default in the native format). Results are in docs/benchmarks.md ("Static W8A8 with down_proj's
input turned")."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from bench_step_parts import native_runner  # beside this script


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--pos", type=int, default=100)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    runner = native_runner(args.model, "none", args.threads, max(batches), args.pos + 28)
    plan = runner.decode_plan
    turns = [(d.turn_signs, d.turn_odd, d.turn_m) for d in plan.layers]
    if not any(t[0] for t in turns):
        raise SystemExit("no layer of this model turns its input")

    def turned(on: bool) -> None:
        for d, (signs, odd, m) in zip(plan.layers, turns):
            d.turn_signs, d.turn_odd, d.turn_m = (signs, odd, m) if on else (None, None, 0)

    for b in batches:
        ids, pos, slots = torch.full((b,), 7), torch.full((b,), args.pos), torch.arange(b)
        times: dict[bool, list[float]] = {True: [], False: []}
        with torch.inference_mode():
            h0 = runner.inner.embed_tokens(ids).contiguous()
            tables = runner.family.rotary_tables(h0[None], pos)
            cos = torch.stack([c[:, 0] for c, _ in tables])
            sin = torch.stack([s[:, 0] for _, s in tables])
            for _ in range(args.steps):
                for on in (True, False):
                    turned(on)
                    h = h0.clone()
                    t0 = time.perf_counter()
                    plan.run(h, slots, pos, cos, sin)
                    times[on].append(time.perf_counter() - t0)
        turned(True)
        on, off = (statistics.median(times[k]) * 1000 for k in (True, False))
        print(json.dumps({"batch": b, "turned_ms": round(on, 3), "not_turned_ms": round(off, 3),
                          "cost_pct": round(100 * (on / off - 1), 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
