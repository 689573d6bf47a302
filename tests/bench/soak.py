"""Soak test of `npu-console serve` (a script, not a CI test): concurrency N closed-loop
clients for M minutes on the demo model, a mix of streaming and non-streaming completions and
chats. Reported: requests, statuses (any 5xx is a failure), incomplete answers (a stream
without its finish reason and [DONE], a JSON answer without usage), and the server's RSS after
the warm-up against its RSS at the end.

    .venv/bin/python tests/bench/soak.py --minutes 30 --concurrency 32 [--json]

Bars (issue 21): RSS growth under 5 %, no 5xx, every request complete. Results:
docs/benchmarks.md#soak.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
from serve_proc import start_serve

ROOT = Path(__file__).resolve().parents[2]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_server(model: str, concurrency: int) -> tuple[subprocess.Popen, str]:
    return start_serve(ROOT, "--model", model, "--max-queue", str(max(256, concurrency * 2)))


async def one_request(client: httpx.AsyncClient, rng: random.Random) -> tuple[int, bool]:
    """(status, complete) of one random request."""
    chat, stream = rng.random() < 0.5, rng.random() < 0.5
    body = {"max_tokens": rng.randint(8, 128), "temperature": 0.8, "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": rng.choice(
            ["Tell me a story", "What does a dog do?", "Once upon a time"])}]
    else:
        body["prompt"] = "Once upon a time " * rng.randint(1, 40)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    if not stream:
        r = await client.post(path, json=body)
        ok = r.status_code == 200 and r.json().get("usage", {}).get("completion_tokens", 0) > 0
        return r.status_code, ok
    finish, done = None, False
    async with client.stream("POST", path, json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return r.status_code, False
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                for choice in json.loads(line[6:]).get("choices", []):
                    finish = choice.get("finish_reason") or finish
    return 200, done and finish in ("stop", "length")


async def soak(url: str, pid: int, minutes: float, concurrency: int, warmup_s: float) -> dict:
    statuses: Counter = Counter()
    incomplete = 0
    rss: list[tuple[float, float]] = []
    t_start = time.monotonic()
    t_end = t_start + minutes * 60

    async def client_loop(k: int) -> None:
        nonlocal incomplete
        rng = random.Random(k)
        limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
        async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
            while time.monotonic() < t_end:
                try:
                    status, complete = await one_request(client, rng)
                except httpx.HTTPError as exc:
                    status, complete = f"client error: {type(exc).__name__}", False
                statuses[status] += 1
                incomplete += not complete

    async def sampler() -> None:
        while time.monotonic() < t_end:
            rss.append((time.monotonic() - t_start, rss_mb(pid)))
            await asyncio.sleep(10)

    await asyncio.gather(sampler(), *(client_loop(k) for k in range(concurrency)))
    rss.append((time.monotonic() - t_start, rss_mb(pid)))
    after_warmup = next((mb for t, mb in rss if t >= warmup_s), rss[0][1])
    end = rss[-1][1]
    total = sum(statuses.values())
    return {"minutes": minutes, "concurrency": concurrency, "requests": total,
            "requests_per_s": round(total / (minutes * 60), 2),
            "statuses": {str(k): v for k, v in sorted(statuses.items(), key=str)},
            "server_errors_5xx": sum(v for k, v in statuses.items()
                                     if isinstance(k, int) and k >= 500),
            "incomplete": incomplete, "rss_mb_after_warmup": round(after_warmup, 1),
            "rss_mb_end": round(end, 1), "rss_mb_max": round(max(mb for _, mb in rss), 1),
            "rss_growth_pct": round(100 * (end - after_warmup) / after_warmup, 2),
            "rss_samples": [(round(t), round(mb, 1)) for t, mb in rss]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--warmup-s", type=float, default=120.0,
                    help="RSS is compared from this point on (allocator caches fill first)")
    ap.add_argument("--model", default=str(ROOT / "assets" / "models" / "demo"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    proc, url = start_server(args.model, args.concurrency)
    try:
        result = asyncio.run(soak(url, proc.pid, args.minutes, args.concurrency, args.warmup_s))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    result["server_exit"] = proc.returncode
    result["server_traceback"] = "Traceback" in err
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            if k != "rss_samples":
                print(f"{k}: {v}")
    ok = (result["server_errors_5xx"] == 0 and result["incomplete"] == 0
          and result["rss_growth_pct"] < 5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
