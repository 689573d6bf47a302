"""Greedy equality of the engine with transformers on one device: five prompts, each alone
(batch 1) and then sixteen requests submitted together (the five prompts in turn), every engine
answer checked against transformers' own greedy decoding on the same device, dtype and weights.

    python tests/device/gpu_parity.py --model DIR [--device cuda] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from npu_console.engine.runtime import EngineConfig, LocalEngine
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

PROMPTS = ("Once upon a time", "The little dog ran to the park and",
           "Lily and Tom were playing with a big red ball when",
           "One day, a cat " * 6, "The sun")


def hf_greedy(loaded, ids: list[int], n: int) -> list[int]:
    """transformers' greedy tokens: its forward and its KV cache, one argmax a step, as
    `generate` does, but through EOS (the engine runs with ignore_eos; `generate` stops at EOS
    and its min_new_tokens would mask EOS instead)."""
    dev = loaded.model.device
    x = torch.tensor([ids], device=dev)
    out: list[int] = []
    past = None
    with torch.inference_mode():
        for _ in range(n):
            r = loaded.model(input_ids=x, past_key_values=past, use_cache=True)
            past = r.past_key_values
            out.append(int(r.logits[0, -1].argmax()))
            x = torch.tensor([[out[-1]]], device=dev)
    return out


def first_difference(got: list[int], want: list[int]) -> int | None:
    """Index of the first token where the engine left transformers, None if it never did."""
    for i, w in enumerate(want):
        if i >= len(got) or got[i] != w:
            return i
    return None


def check(loaded, batches=(1, 16), max_tokens: int = 48, prompts=PROMPTS) -> dict:
    ids = [loaded.tokenizer.encode(p) for p in prompts]
    expected = [hf_greedy(loaded, p, max_tokens) for p in ids]
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    eng = LocalEngine(EngineConfig(max_running=max(batches)))
    runs = {}
    try:
        eng.add_model(loaded, name="parity").result(300)
        for b in batches:
            t0 = time.perf_counter()
            if b == 1:
                res = [eng.generate(GenerationRequest(prompt_token_ids=p, params=params), 300)
                       for p in ids]
            else:
                hs = [eng.submit(GenerationRequest(prompt_token_ids=ids[i % len(ids)],
                                                   params=params)) for i in range(b)]
                res = [h.result(300) for h in hs]
            diffs = [first_difference(list(r.token_ids), expected[i % len(ids)])
                     for i, r in enumerate(res)]
            runs[f"batch{b}"] = {"requests": len(res), "seconds": time.perf_counter() - t0,
                                 "mismatched": [i for i, d in enumerate(diffs) if d is not None],
                                 "first_difference": [d for d in diffs if d is not None][:4]}
    finally:
        eng.shutdown()
    bad = sum(len(r["mismatched"]) for r in runs.values())
    return {"ok": bad == 0, "model": str(loaded.path), "device": str(loaded.device),
            "dtype": loaded.dtype, "max_tokens": max_tokens,
            "runs": runs,
            "reason": f"{bad} engine answers differ from transformers" if bad else None}


def main() -> int:
    from npu_console.engine.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    res = check(loaded, max_tokens=args.max_tokens)
    print(json.dumps(res, indent=2))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
