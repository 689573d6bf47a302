"""The baseline the engine is measured against: transformers' `generate`, one request at a time,
on the same device and dtype, with the offline bench's work per request (random prompts of
--input-len tokens, exactly --output-len new ones). Output tokens/s on stdout as JSON.

    python tests/device/gpu_baseline.py --model DIR [--device cuda] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def generate_one(model, ids: torch.Tensor, n: int) -> None:
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                       min_new_tokens=n, do_sample=False, pad_token_id=0)


def main() -> int:
    from npu_console.engine.devices import synchronize
    from npu_console.engine.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    args = ap.parse_args()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    model = loaded.model
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, vocab - 10, (1, args.input_len), generator=g).to(model.device)
               for _ in range(args.requests)]
    generate_one(model, prompts[0][:, :16], 4)  # warm-up: kernels, allocator
    synchronize(args.device)
    t0 = time.perf_counter()
    for p in prompts:
        generate_one(model, p, args.output_len)
    synchronize(args.device)
    wall = time.perf_counter() - t0
    tokens = args.requests * args.output_len
    print(json.dumps({"ok": True, "mode": "transformers generate, one request at a time",
                      "model": args.model, "device": args.device, "dtype": args.dtype,
                      "requests": args.requests, "input_len": args.input_len,
                      "output_len": args.output_len, "seconds": wall,
                      "output_tokens_per_s": tokens / wall}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
