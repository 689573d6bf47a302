"""Engine throughput and latency against transformers `generate`.

Same workload for every mode, all requests arriving at t=0 (offline, like vLLM's
`benchmark_serving --request-rate inf`):
  (a) generate, one request at a time (optionally only the first --subset-a requests, with the
      total time extrapolated from their mean; that extrapolation is reported as such)
  (b) generate on static left-padded batches of 16 in arrival order (a batch runs until its
      longest request is done; only requested tokens count as output)
  (c) LocalEngine with all requests submitted at once (continuous batching)
plus a concurrency-1 decode comparison (one request, engine vs generate).

Every transformers run and every model build runs on a thread that ends before the engine steps,
and the engine's thread ends whenever it is idle: a thread that keeps an OpenMP team beside the
engine's makes both slow (engine.runtime.threads), which made earlier (c) runs pay ~40 % more
per decode step than they needed to.

Usage:
  nice -n 10 python tests/bench/bench_engine.py --model qwen05b --threads 1 --subset-a 4
  nice -n 10 python tests/bench/bench_engine.py --model demo --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from npu_console.engine.runtime.threads import run_in_fresh_thread

# ----------------------------------------------------------------------------- models


def qwen05b(dtype: str):
    """Random-initialised Qwen2.5-0.5B configuration (no download)."""
    from npu_console.engine.bench.random_model import QWEN25_05B, word_tokenizer
    from npu_console.engine.models.loader import LoadedModel
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(**QWEN25_05B, architectures=["Qwen2ForCausalLM"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype)).eval()
    return LoadedModel(name="qwen05b-random", path=Path("<random Qwen2.5-0.5B config>"),
                       model=model, tokenizer=word_tokenizer(cfg.vocab_size), config=cfg,
                       device="cpu", dtype=dtype, architecture="Qwen2ForCausalLM")


def folder_model(path: str, dtype: str):
    from npu_console.engine.models import load_model

    return load_model(path, device="cpu", dtype=dtype)


# ----------------------------------------------------------------------------- workload


def workload(n: int, vocab: int, ctx: int, seed: int):
    """Prompt lengths 16-512, output lengths 16-256 (scaled down when the context is short)."""
    rng = np.random.default_rng(seed)
    scale = min(1.0, ctx / 800)
    p_hi, o_hi = max(17, int(512 * scale)), max(17, int(256 * scale))
    plens = rng.integers(16, p_hi + 1, n)
    olens = rng.integers(16, o_hi + 1, n)
    prompts = [rng.integers(10, vocab - 10, int(p)).tolist() for p in plens]
    return prompts, [int(o) for o in olens]


class StepTimes:
    """A generate() streamer that only timestamps each generation step."""

    def __init__(self):
        self.times: list[float] = []
        self._first = True

    def put(self, value):
        if self._first:  # the prompt
            self._first = False
            return
        self.times.append(time.perf_counter())

    def end(self):
        pass


def hf_generate(model, batch: list[list[int]], max_new: int, pad_id: int) -> StepTimes:
    width = max(len(p) for p in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, p in enumerate(batch):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    st = StepTimes()
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new,
                       min_new_tokens=max_new, do_sample=False, streamer=st,
                       pad_token_id=pad_id, eos_token_id=None)
    return st


def pct(xs, q):
    xs = [x for x in xs if x is not None]
    return float(np.percentile(xs, q)) if xs else None


def summary(name, total_s, out_tokens, ttfts, tpots, note=""):
    return {"mode": name, "total_s": total_s, "output_tokens": out_tokens,
            "output_tok_s": out_tokens / total_s if total_s else None,
            "ttft_p50_s": pct(ttfts, 50), "ttft_p99_s": pct(ttfts, 99),
            "tpot_p50_s": pct(tpots, 50), "tpot_p99_s": pct(tpots, 99), "note": note}


# ----------------------------------------------------------------------------- modes


def mode_a(loaded, prompts, olens, subset):
    n = len(prompts) if subset is None else min(subset, len(prompts))
    t0 = time.perf_counter()
    ttfts, tpots, spent = [], [], []
    for p, o in zip(prompts[:n], olens[:n]):
        s = time.perf_counter()
        st = hf_generate(loaded.model, [p], o, 0)
        spent.append(time.perf_counter() - s)
        ttfts.append(st.times[0] - s)  # service TTFT: queueing behind earlier requests excluded
        tpots.append((st.times[o - 1] - st.times[0]) / (o - 1))
    measured = time.perf_counter() - t0
    total = measured if n == len(prompts) else float(np.mean(spent)) * len(prompts)
    note = ("all requests" if n == len(prompts) else
            f"measured {n} requests ({measured:.1f} s), total extrapolated x{len(prompts) / n:.1f}"
            f" from their mean; TTFT excludes queueing")
    out = sum(olens) if n == len(prompts) else sum(olens[:n]) / n * len(prompts)
    return summary("a: generate, one at a time", total, out, ttfts, tpots, note)


def mode_b(loaded, prompts, olens, batch=16):
    t0 = time.perf_counter()
    ttfts, tpots = [], []
    for b in range(0, len(prompts), batch):
        ps, os_ = prompts[b:b + batch], olens[b:b + batch]
        st = hf_generate(loaded.model, ps, max(os_), 0)
        for o in os_:
            ttfts.append(st.times[0] - t0)
            tpots.append((st.times[o - 1] - st.times[0]) / (o - 1))
    total = time.perf_counter() - t0
    return summary(f"b: generate, static batches of {batch}", total, sum(olens), ttfts, tpots)


def mode_c(loaded, prompts, olens, args):
    from npu_console.engine.runtime import EngineConfig, LocalEngine
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

    ctx = max(len(p) + o for p, o in zip(prompts, olens))
    eng = LocalEngine(EngineConfig(max_running=16, max_batched_tokens=args.max_batched_tokens,
                                   max_model_len=ctx, num_threads=args.threads,
                                   max_waiting=1024, linear_kernels=args.linear_kernels))
    try:
        eng.add_model(loaded, name="bench").result()
        eng.generate(GenerationRequest(prompt_token_ids=prompts[0][:16], params=SamplingParams(
            max_tokens=2, temperature=0, ignore_eos=True)))  # warm-up
        t0 = time.perf_counter()
        hs = [eng.submit(GenerationRequest(prompt_token_ids=p, params=SamplingParams(
            max_tokens=o, temperature=0, ignore_eos=True))) for p, o in zip(prompts, olens)]
        res = [h.result() for h in hs]
        total = time.perf_counter() - t0
        steps = eng.metrics.series("batch_size")[1]
    finally:
        eng.shutdown()
    assert all(r.finish.usage.completion_tokens == o for r, o in zip(res, olens))
    s = summary("c: LocalEngine, all at once", total, sum(olens),
                [r.finish.timings.ttft_s for r in res], [r.finish.timings.tpot_s for r in res],
                note=f"max_batched_tokens={args.max_batched_tokens}, {len(steps)} steps, "
                     f"mean batch {float(np.mean(steps)):.1f}")
    return s


def concurrency_one(hf_loaded, eng_loaded, vocab, args, n_out=64, repeats=3):
    """Decode tokens/s of one request alone: generate vs the engine, alternating `repeats`
    times (this VM's speed drifts by several percent within a minute), medians. Each side runs
    while the other has no thread: generate on a fresh thread, the engine after that thread
    ended; the engine's own thread ends when idle and is waited for before generate runs."""
    from npu_console.engine.runtime import EngineConfig, LocalEngine
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

    prompt = np.random.default_rng(1).integers(10, vocab - 10, 32).tolist()
    eng = LocalEngine(EngineConfig(max_running=1, num_threads=args.threads, max_model_len=256,
                                   idle_thread_s=0.05, linear_kernels=args.linear_kernels))

    def engine_idle() -> None:
        t = eng._thread  # the bench may look inside: it must know the thread has ended
        if t is not None:
            t.join()

    gen, ours = [], []
    try:
        eng.add_model(eng_loaded, name="c1").result()
        req = GenerationRequest(prompt_token_ids=prompt, params=SamplingParams(
            max_tokens=n_out, temperature=0, ignore_eos=True))
        eng.generate(GenerationRequest(prompt_token_ids=prompt[:8], params=SamplingParams(
            max_tokens=4, temperature=0, ignore_eos=True)))  # warm-up
        engine_idle()
        run_in_fresh_thread(hf_generate, hf_loaded.model, [prompt], 4, 0)
        for _ in range(repeats):
            engine_idle()
            st = run_in_fresh_thread(hf_generate, hf_loaded.model, [prompt], n_out, 0)
            gen.append((n_out - 1) / (st.times[-1] - st.times[0]))
            ours.append(1.0 / eng.generate(req).finish.timings.tpot_s)
    finally:
        eng.shutdown()
    return {"generate_decode_tok_s": float(np.median(gen)),
            "engine_decode_tok_s": float(np.median(ours)),
            "runs": {"generate": gen, "engine": ours}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen05b",
                    help="qwen05b (random Qwen2.5-0.5B config), demo, or a model folder")
    ap.add_argument("--dtype", default=None, help="default bfloat16 for qwen05b, float32 else")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--subset-a", type=int, default=None,
                    help="run mode (a) on the first N requests only and extrapolate")
    ap.add_argument("--modes", default="a,b,c,c1")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    ap.add_argument("--max-batched-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--linear-kernels", choices=("auto", "torch"), default="auto",
                    help="the engine's fp32 decode products: native kernel (auto) or BLAS")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    def load():
        if args.model == "qwen05b":
            return qwen05b(args.dtype or "bfloat16")
        from npu_console.engine.paths import DEMO_MODEL_DIR

        path = DEMO_MODEL_DIR if args.model == "demo" else args.model
        return folder_model(path, args.dtype or "float32")

    # two copies: the engine may re-lay out weights for its kernels (a transposed lm_head on
    # CPU), and the transformers baselines must run on the model as transformers loads it
    loaded = run_in_fresh_thread(load)
    hf_loaded = (run_in_fresh_thread(load) if {"a", "b", "c1"} & set(args.modes.split(","))
                 else loaded)
    cfg = loaded.model.config
    vocab = cfg.vocab_size
    ctx = getattr(cfg, "max_position_embeddings", 2048)
    prompts, olens = workload(args.requests, vocab, ctx, args.seed)
    print(f"model {loaded.name} ({loaded.dtype}), {len(prompts)} requests, prompt tokens "
          f"{sum(map(len, prompts))}, output tokens {sum(olens)}, threads "
          f"{torch.get_num_threads()}", flush=True)
    results = {"model": loaded.name, "dtype": loaded.dtype, "requests": len(prompts),
               "threads": torch.get_num_threads(), "modes": []}
    modes = args.modes.split(",")
    for m in modes:
        t = time.perf_counter()
        if m == "a":
            r = run_in_fresh_thread(mode_a, hf_loaded, prompts, olens, args.subset_a)
        elif m == "b":
            r = run_in_fresh_thread(mode_b, hf_loaded, prompts, olens)
        elif m == "c":
            r = mode_c(loaded, prompts, olens, args)
        elif m == "c1":
            r = concurrency_one(hf_loaded, loaded, vocab, args)
            results["concurrency_1"] = r
            print(f"[c1] {json.dumps(r)} ({time.perf_counter() - t:.0f} s)", flush=True)
            continue
        else:
            raise SystemExit(f"unknown mode {m!r}")
        results["modes"].append(r)
        print(f"[{m}] {json.dumps(r)} ({time.perf_counter() - t:.0f} s)", flush=True)
    by = {r["mode"][0]: r for r in results["modes"]}
    if "c" in by:
        for k in ("a", "b"):
            if k in by:
                print(f"c / {k} output tok/s: {by['c']['output_tok_s'] / by[k]['output_tok_s']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
