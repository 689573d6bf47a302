"""INT8 speed / memory / quantization-time benchmark on a Qwen2.5-0.5B-shaped model with random
weights (no download: the configuration is built with transformers' Qwen2Config).

Each variant runs in its own process so that peak RSS belongs to it alone:

    nice -n 10 python tests/bench/bench_quant.py --variants fp32,bf16,w8a16,w8a8-dynamic \
        --out /tmp/bench_quant.json

`--rounds N` runs the whole list N times, variants interleaved, and reports each number's
median (the engine path already takes the median of 3 runs within a process).

`--paired` (speed only) builds every variant in one process and serves them from one engine,
in turns, and reports median per-round ratios: the figure to quote for "x fp32" / "x bf16"
on a VM whose speed drifts between processes:

    python tests/bench/bench_quant.py --paired --rounds 7 --new-tokens 64 \
        --variants fp32,bf16,w8a16+head@fp32,w8a8-dynamic+head@fp32

A variant is fp32, bf16 or METHOD[+head][@fp32]: `+head` also stores lm_head and the embedding
in int8 (QuantConfig.int8_head), `@fp32` keeps the float parts in float32 instead of bfloat16.

Decode speed is greedy decode with the model's KV cache (engine.quant.evaluate.decode_speed), at
batch 1 and 8; TTFT is the prefill of a 32-token prompt. "quantize" times calibration (64
samples x 256 tokens) + SmoothQuant + w8a8-static quantization of the same model.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def build_model(dtype: str):
    import torch
    from npu_console.engine.bench.random_model import QWEN25_05B
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    cfg = Qwen2Config(**QWEN25_05B)
    return AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype)).eval()


def _loaded(model, name: str):
    """A LoadedModel around an in-memory model, as the engine serves it."""
    from pathlib import Path

    from npu_console.engine.bench.random_model import word_tokenizer
    from npu_console.engine.models.loader import LoadedModel

    return LoadedModel(name=name, path=Path("/nonexistent"), model=model,
                       tokenizer=word_tokenizer(model.config.vocab_size), config=model.config,
                       device="cpu", dtype=str(next(model.parameters()).dtype).split(".")[-1],
                       architecture="Qwen2ForCausalLM",
                       quantization=getattr(getattr(model, "npu_quant", None), "method", None))


def _engine(threads: int):
    from npu_console.engine.runtime import EngineConfig, LocalEngine

    return LocalEngine(EngineConfig(max_running=8, num_threads=threads, prefix_caching=False,
                                    max_context_cap=512))


def _generate(eng, vocab: int, g, batch: int, n: int, model: str | None = None):
    """`batch` greedy requests of n tokens after random 32-token prompts; their finish events."""
    import torch
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    hs = [eng.submit(GenerationRequest(
        prompt_token_ids=torch.randint(3, vocab, (32,), generator=g).tolist(), params=params,
        model=model)) for _ in range(batch)]
    return [h.result(timeout=1800).finish for h in hs]


def engine_speed(model, name: str, threads: int, new_tokens: int) -> dict:
    """TTFT and decode tok/s through engine.runtime.LocalEngine (batch 1 and 8)."""
    import torch

    eng = _engine(threads)
    try:
        eng.add_model(_loaded(model, name)).result()
        g = torch.Generator().manual_seed(0)

        def run(batch: int, n: int):
            return _generate(eng, model.config.vocab_size, g, batch, n)

        run(1, 4)  # warm-up
        # medians of a few runs: this class of VM drifts 10-20 % within minutes
        b1 = sorted((run(1, new_tokens)[0] for _ in range(3)), key=lambda f: f.timings.tpot_s)
        f1 = b1[1]
        tpot8 = statistics.median(
            sum(f.timings.tpot_s for f in f8) / len(f8)
            for f8 in (run(8, max(8, new_tokens // 2)) for _ in range(3)))
        return {"path": "engine", "ttft_ms": statistics.median(f.timings.ttft_s for f in b1) * 1000,
                "tok_s_b1": 1.0 / f1.timings.tpot_s, "tok_s_b8": 8.0 / tpot8}
    finally:
        eng.shutdown()


def paired_speed(variants: list[str], threads: int, new_tokens: int, rounds: int) -> list[dict]:
    """Every variant in one process, served by one engine, measured in turns: each round
    decodes batch 1 and batch 8 on every variant (the order rotating), so a ratio is taken
    between runs seconds apart instead of processes minutes apart (this VM drifts 10-30 %
    within minutes, which separate processes turn into noise in the ratios)."""
    import torch
    from npu_console.engine.runtime.threads import run_in_fresh_thread

    torch.set_num_threads(threads)
    eng = _engine(threads)
    try:
        vocab = 0
        for v in variants:
            model = run_in_fresh_thread(build_variant, v)
            vocab = model.config.vocab_size
            eng.add_model(_loaded(model, v), name=v).result()
            del model
        g = torch.Generator().manual_seed(0)
        for v in variants:
            _generate(eng, vocab, g, 1, 4, v)  # warm-up
        out = []
        for r in range(rounds):
            row: dict[str, dict] = {}
            for v in variants[r % len(variants):] + variants[:r % len(variants)]:
                f1 = _generate(eng, vocab, g, 1, new_tokens, v)[0]
                f8 = _generate(eng, vocab, g, 8, max(8, new_tokens // 2), v)
                row[v] = {"tok_s_b1": 1.0 / f1.timings.tpot_s,
                          "tok_s_b8": 8.0 * len(f8) / sum(f.timings.tpot_s for f in f8)}
            out.append(row)
            print(json.dumps({"round": r, **row}), flush=True)
        return out
    finally:
        eng.shutdown()


def _paired_table(rows: list[dict]) -> str:
    """Median tok/s and median per-round ratios against fp32 / bf16 where they ran."""
    variants = list(rows[0])
    med = statistics.median

    def ratios(v: str, base: str, key: str) -> list[float] | None:
        return [r[v][key] / r[base][key] for r in rows] if base in variants else None

    def fmt(xs: list[float] | None) -> str:
        return "-" if xs is None else f"{med(xs):.2f}"

    lines = [("| variant | tok/s b1 | tok/s b8 | b1 x fp32 | b1 x bf16 | b8 x bf16 | "
              "b1 x fp32 per round |"), "|---|---|---|---|---|---|---|"]
    for v in variants:
        x32 = ratios(v, "fp32", "tok_s_b1")
        per = "-" if x32 is None else " / ".join(f"{x:.2f}" for x in x32)
        lines.append(f"| {v} | {med(r[v]['tok_s_b1'] for r in rows):.2f} | "
                     f"{med(r[v]['tok_s_b8'] for r in rows):.1f} | {fmt(x32)} | "
                     f"{fmt(ratios(v, 'bf16', 'tok_s_b1'))} | "
                     f"{fmt(ratios(v, 'bf16', 'tok_s_b8'))} | {per} |")
    return "\n".join(lines)


def build_variant(name: str):
    """fp32, bf16, or METHOD[+head][@fp32]: +head = int8 lm_head/embedding too, @fp32 = the
    float parts (norms, attention, activations) in float32 instead of bfloat16."""
    from npu_console.engine.quant.apply import prepare_for_serving, quantize_model
    from npu_console.engine.quant.config import QuantConfig

    method, _, parts = name.partition("@")
    head = method.endswith("+head")
    method = method.removesuffix("+head")
    float_dtype = "float32" if name == "fp32" or parts == "fp32" else "bfloat16"
    model = build_model(float_dtype)
    if method not in ("fp32", "bf16"):
        quantize_model(model, QuantConfig(method=method, int8_head=head))
        prepare_for_serving(model)
    return model


def run_variant(name: str, threads: int, new_tokens: int, use_engine: bool = False) -> dict:
    import torch
    from npu_console.engine.quant import evaluate as ev
    from npu_console.engine.runtime.threads import run_in_fresh_thread

    torch.set_num_threads(threads)
    # built on a thread that ends: the main thread must not keep an OpenMP team beside the
    # engine's (engine.runtime.threads)
    model = run_in_fresh_thread(build_variant, name)
    import gc

    gc.collect()
    out = {"variant": name, "threads": threads, "weight_bytes": ev.weight_bytes(model)}
    if use_engine:
        out.update(engine_speed(model, name, threads, new_tokens))
        out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return out
    ev.decode_speed(model, batch=1, prompt_len=8, new_tokens=4)  # warm-up
    s1 = ev.decode_speed(model, batch=1, prompt_len=32, new_tokens=new_tokens)
    s8 = ev.decode_speed(model, batch=8, prompt_len=32, new_tokens=max(8, new_tokens // 2))
    out.update(ttft_ms=s1.ttft_s * 1000, tok_s_b1=s1.decode_tok_s, tok_s_b8=s8.decode_tok_s,
               peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return out


def run_quantize_time(threads: int, samples: int, seq_len: int) -> dict:
    import torch
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.calib import collect_stats
    from npu_console.engine.quant.config import QuantConfig, select_layers

    torch.set_num_threads(threads)
    model = build_model("float32")
    cfg = QuantConfig(method="w8a8-static", smoothquant=0.5, calib_samples=samples,
                      calib_seq_len=seq_len)
    g = torch.Generator().manual_seed(0)
    data = [torch.randint(0, 151936, (1, seq_len), generator=g) for _ in range(samples)]
    t0 = time.perf_counter()
    stats = collect_stats(model, data, select_layers(model, cfg).quantize)
    t1 = time.perf_counter()
    quantize_model(model, cfg, stats)
    t2 = time.perf_counter()
    return {"variant": "quantize", "calibrate_s": t1 - t0, "quantize_s": t2 - t1,
            "total_s": t2 - t0, "samples": samples, "seq_len": seq_len}


def _median_of_rounds(runs: list[dict]) -> dict:
    """One variant's rounds: the median of every number (exactly the run when there is one)."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in runs)
    out["rounds"] = len(runs)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="fp32,bf16,w8a16,w8a8-dynamic,quantize")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the variant list this many times (interleaved); report medians")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    ap.add_argument("--engine", action="store_true",
                    help="measure through engine.runtime.LocalEngine instead of the HF cache loop")
    ap.add_argument("--paired", action="store_true",
                    help="all variants in one process and one engine, in turns for --rounds "
                         "rounds; prints median tok/s and median per-round ratios")
    args = ap.parse_args()
    if args.paired:
        rows = paired_speed(args.variants.split(","), args.threads, args.new_tokens, args.rounds)
        print(_paired_table(rows))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=2)
        return 0
    if args.one:
        res = (run_quantize_time(args.threads, args.samples, args.seq_len) if args.one == "quantize"
               else run_variant(args.one, args.threads, args.new_tokens, args.engine))
        print(json.dumps(res))
        return 0
    rounds: dict[str, list[dict]] = {}
    for _ in range(args.rounds):  # variants interleaved, so drift spreads over all of them
        for v in args.variants.split(","):
            cmd = [sys.executable, __file__, "--one", v, "--threads", str(args.threads),
                   "--new-tokens", str(args.new_tokens), "--samples", str(args.samples),
                   "--seq-len", str(args.seq_len)] + (["--engine"] if args.engine else [])
            p = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(),
                               check=False)
            if p.returncode:
                print(p.stderr[-2000:], file=sys.stderr)
                return 1
            res = json.loads(p.stdout.strip().splitlines()[-1])
            rounds.setdefault(v, []).append(res)
            print(json.dumps(res), flush=True)
    results = [_median_of_rounds(runs) for runs in rounds.values()]
    by = {r["variant"]: r for r in results}
    if "bf16" in by:
        for v in [r["variant"] for r in results if r["variant"] != "bf16"]:
            if "tok_s_b1" in by[v]:
                r, b = by[v], by["bf16"]
                print(f"{v}: b1 {r['tok_s_b1'] / b['tok_s_b1']:.2f}x bf16, "
                      f"b8 {r['tok_s_b8'] / b['tok_s_b8']:.2f}x bf16, "
                      f"weights {r['weight_bytes'] / b['weight_bytes']:.2f}x bf16"
                      + (f", b1 {r['tok_s_b1'] / by['fp32']['tok_s_b1']:.2f}x fp32"
                         if "fp32" in by else ""))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
