"""Streaming overhead of the HTTP API: output tokens/s at a fixed concurrency, in-process vs
through HTTP on loopback, with the same engine, model and requests.

Closed loop: `--concurrency` workers each send `--requests` streaming requests one after the
other (`--max-tokens` each, EOS ignored so every request has the same length). In-process the
workers iterate the engine's request handles on an asyncio loop; over HTTP they are httpx
clients in a separate process (as real clients are) reading SSE from the server.

    nice -n 10 python tests/bench/bench_api.py --model ../shared/models/stories260K
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["Once upon a time", "The little dog", "One day, Lily", "Tom had a red ball",
           "The sun was", "In the park", "A big cat", "She found a"]


def _default_model() -> Path:
    from npu_console.engine.paths import DEMO_MODEL_DIR

    if (DEMO_MODEL_DIR / "config.json").exists():
        return DEMO_MODEL_DIR
    return ROOT.parent / "shared" / "models" / "stories260K"


# ----------------------------------------------------------------------------- in-process


def run_in_process(engine, concurrency: int, requests: int, max_tokens: int) -> dict:
    from npu_console.engine.runtime.types import (
        MODEL_DEFAULT_FIELDS,
        GenerationRequest,
        SamplingParams,
        TokenEvent,
    )

    # the same request as the HTTP body: what it leaves unset takes the model's own defaults
    # (generation_config.json: the demo model's repetition_penalty 1.2), as the server does
    unset = tuple(f for f in MODEL_DEFAULT_FIELDS if f != "temperature")

    async def worker(w: int) -> int:
        tokens = 0
        for i in range(requests):
            h = engine.submit(GenerationRequest(
                prompt=PROMPTS[(w + i) % len(PROMPTS)],
                params=SamplingParams(max_tokens=max_tokens, temperature=0.8, seed=w * 1000 + i,
                                      ignore_eos=True, model_defaults=unset)))
            async for ev in h:
                if not isinstance(ev, TokenEvent):
                    tokens += ev.usage.completion_tokens
        return tokens

    async def main():
        t0 = time.perf_counter()
        counts = await asyncio.gather(*[worker(w) for w in range(concurrency)])
        return sum(counts), time.perf_counter() - t0

    tokens, wall = asyncio.run(main())
    return {"tokens": tokens, "wall_s": wall, "tok_s": tokens / wall}


# ----------------------------------------------------------------------------- over HTTP


def client_main(url: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    import httpx

    async def worker(client, w: int) -> int:
        tokens = 0
        for i in range(requests):
            body = {"prompt": PROMPTS[(w + i) % len(PROMPTS)], "max_tokens": max_tokens,
                    "temperature": 0.8, "seed": w * 1000 + i, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if line.startswith("data: {") and '"usage":{' in line:
                        tokens += json.loads(line[6:])["usage"]["completion_tokens"]
        return tokens

    async def main():
        limits = httpx.Limits(max_connections=concurrency)
        async with httpx.AsyncClient(limits=limits, timeout=600) as client:
            await client.get(url + "/health")  # connection set-up outside the timing
            t0 = time.perf_counter()
            counts = await asyncio.gather(*[worker(client, w) for w in range(concurrency)])
            return sum(counts), time.perf_counter() - t0

    tokens, wall = asyncio.run(main())
    return {"tokens": tokens, "wall_s": wall, "tok_s": tokens / wall}


def run_over_http(engine, concurrency: int, requests: int, max_tokens: int,
                  stream_interval_ms: float | None = None) -> dict:
    from npu_console.engine.api import ServerController

    controller = ServerController(engine)
    extra = {} if stream_interval_ms is None else {"stream_interval_ms": stream_interval_ms}
    url = controller.start("127.0.0.1", 0, **extra)
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--client", url, "--concurrency", str(concurrency),
             "--requests", str(requests), "--max-tokens", str(max_tokens)],
            capture_output=True, text=True, timeout=3600, check=False)
        if out.returncode != 0:
            raise SystemExit(f"client failed: {out.stderr[-2000:]}")
        return json.loads(out.stdout)
    finally:
        controller.stop()


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=4, help="per worker")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    p.add_argument("--repeats", type=int, default=3, help="alternating in-process/HTTP runs")
    p.add_argument("--stream-interval-ms", type=float, default=None,
                   help="the server's stream_interval_ms (default: the server's default)")
    p.add_argument("--client", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.client:
        print(json.dumps(client_main(args.client, args.concurrency, args.requests,
                                     args.max_tokens)))
        return 0

    import gc

    from npu_console.engine.runtime import EngineConfig, LocalEngine

    model = args.model or _default_model()
    engine = LocalEngine(EngineConfig(num_threads=args.threads,
                                      max_running=max(16, args.concurrency)))
    info = engine.load(model, name=model.name).result()
    gc.collect()
    gc.freeze()
    # warm both paths once (first-call imports, allocator) before measuring
    run_in_process(engine, args.concurrency, 1, 8)
    run_over_http(engine, args.concurrency, 1, 8)
    rows = []
    for _ in range(args.repeats):  # alternate, so drift of a shared machine hits both
        rows.append(("in-process", run_in_process(engine, args.concurrency, args.requests,
                                                  args.max_tokens)))
        rows.append(("http", run_over_http(engine, args.concurrency, args.requests,
                                           args.max_tokens, args.stream_interval_ms)))
    engine.shutdown()
    import statistics

    # medians: a shared machine's load swings more than the difference being measured
    best = {k: statistics.median(r["tok_s"] for n, r in rows if n == k)
            for k in ("in-process", "http")}
    result = {
        "model": info.name, "params": info.num_parameters, "concurrency": args.concurrency,
        "requests_per_worker": args.requests, "max_tokens": args.max_tokens,
        "threads": args.threads, "cpu_count": os.cpu_count(),
        "stream_interval_ms": args.stream_interval_ms, "uvloop": _has_uvloop(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "runs": [{"path": n, **{k: round(v, 2) for k, v in r.items()}} for n, r in rows],
        "median_tok_s": {k: round(v, 1) for k, v in best.items()},
        "http_over_in_process": round(best["http"] / best["in-process"], 3),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
