"""Soak of `npu-console serve` with bad requests mixed in (issue 35; a script, not a CI test):
N closed-loop clients for M minutes (or until --max-requests) on the demo model on loopback,
1 request in 10 from the fuzz corpus the tests keep (tests/data/bad_requests.json), the rest
good completions and chats (tests/bench/soak.py's mix).

    nice -n 10 .venv/bin/python tests/bench/soak_api.py --minutes 30 --concurrency 32 [--json]

Bars: every good request 200 and complete, every bad one its 4xx, none lost (each request
sent gets an answer: no client errors, no 5xx), the server's RSS growth after the warm-up under
5 %. Results: docs/benchmarks.md#soak-with-bad-requests-issue-35.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter

import httpx
from soak import ROOT, one_request, rss_mb, start_server

sys.path.insert(0, str(ROOT / "tests"))
from support.bad_requests import load_corpus, request_args

BAD_SHARE = 0.1


async def soak(url: str, pid: int, minutes: float, concurrency: int, warmup_s: float,
               max_requests: int) -> dict:
    corpus = load_corpus()
    good: Counter = Counter()
    bad: Counter = Counter()
    wrong_bad: list[str] = []
    incomplete = lost = sent = 0
    rss: list[tuple[float, float]] = []
    t_start = time.monotonic()
    t_end = t_start + minutes * 60

    async def client_loop(k: int) -> None:
        nonlocal incomplete, lost, sent
        rng = random.Random(k)
        limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
        async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
            while time.monotonic() < t_end and sent < max_requests:
                sent += 1
                is_bad = rng.random() < BAD_SHARE
                try:
                    if is_bad:
                        entry = rng.choice(corpus)
                        r = await client.request(**request_args(entry))
                        bad[r.status_code] += 1
                        if r.status_code not in entry["expect"]:
                            wrong_bad.append(f"{entry['name']}: {r.status_code}")
                        continue
                    status, complete = await one_request(client, rng)
                    good[status] += 1
                    incomplete += not complete
                except httpx.HTTPError as exc:  # lost: counted where it was sent
                    lost += 1
                    (bad if is_bad else good)[f"client error: {type(exc).__name__}"] += 1

    async def sampler() -> None:
        while time.monotonic() < t_end and sent < max_requests:
            rss.append((time.monotonic() - t_start, rss_mb(pid)))
            await asyncio.sleep(10)

    await asyncio.gather(sampler(), *(client_loop(k) for k in range(concurrency)))
    elapsed = time.monotonic() - t_start
    rss.append((elapsed, rss_mb(pid)))
    after_warmup = next((mb for t, mb in rss if t >= warmup_s), rss[0][1])
    end = rss[-1][1]
    return {"minutes": round(elapsed / 60, 2), "concurrency": concurrency, "requests": sent,
            "good": sum(good.values()), "bad": sum(bad.values()),
            "requests_per_s": round(sent / elapsed, 2),
            "good_statuses": {str(k): v for k, v in sorted(good.items(), key=str)},
            "bad_statuses": {str(k): v for k, v in sorted(bad.items(), key=str)},
            "bad_not_as_expected": wrong_bad[:20], "lost": lost, "incomplete": incomplete,
            "rss_mb_after_warmup": round(after_warmup, 1), "rss_mb_end": round(end, 1),
            "rss_mb_max": round(max(mb for _, mb in rss), 1),
            "rss_growth_pct": round(100 * (end - after_warmup) / after_warmup, 2),
            "rss_samples": [(round(t), round(mb, 1)) for t, mb in rss]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-requests", type=int, default=1_000_000,
                    help="stop after this many requests even before --minutes")
    ap.add_argument("--warmup-s", type=float, default=120.0,
                    help="RSS is compared from this point on (allocator caches fill first)")
    ap.add_argument("--model", default=str(ROOT / "assets" / "models" / "demo"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    proc, url = start_server(args.model, args.concurrency)
    try:
        result = asyncio.run(soak(url, proc.pid, args.minutes, args.concurrency,
                                  args.warmup_s, args.max_requests))
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
    ok = (set(result["good_statuses"]) <= {"200"} and not result["bad_not_as_expected"]
          and result["lost"] == 0 and result["incomplete"] == 0
          and result["rss_growth_pct"] < 5)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
