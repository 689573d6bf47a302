"""How long one huge request stalls the other streams of `npu-console serve`.

One client keeps a stream open (back to back, `--stream-interval-ms 0`, so every token is its
own chunk) while another posts a 900 KB prompt with n=8. Reported: the largest gap the open
streams saw while the big request was in flight (chunk to chunk, or request to first chunk
for a stream opened meanwhile), and the same figure without the big request.

    .venv/bin/python tests/bench/bench_prompt_stall.py [--root DIR] [--chat] [--json]

--root runs another checkout's code (e.g. a `git worktree` of an older commit) for a
before/after comparison. Results: docs/benchmarks.md#one-huge-request-and-the-other-streams.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from serve_proc import start_serve

ROOT = Path(__file__).resolve().parents[2]


def start_server(root: Path, model: str) -> tuple[subprocess.Popen, str]:
    return start_serve(root, "--model", model, "--threads", "1", "--stream-interval-ms", "0",
                       "--max-body-bytes", "2000000")


class OpenStreams:
    """Streams opened back to back; records (request sent, [chunk times]) per stream."""

    def __init__(self, url: str):
        self.url = url
        self.streams: list[tuple[float, list[float]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with httpx.Client(timeout=120) as client:
            while not self.stop.is_set():
                times: list[float] = []
                self.streams.append((time.perf_counter(), times))
                with client.stream("POST", self.url + "/v1/completions", json={
                        "prompt": "Once upon a time", "max_tokens": 1000, "ignore_eos": True,
                        "stream": True}) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: "):
                            times.append(time.perf_counter())
                        if self.stop.is_set():
                            break

    def largest_gap(self, t0: float, t1: float) -> tuple[float, float]:
        """(the largest gap touching [t0, t1], when it began relative to t0)."""
        gap, at = 0.0, 0.0
        for sent, times in self.streams:
            points = [sent, *times]
            for a, b in itertools.pairwise(points):
                if b >= t0 and a <= t1 and b - a > gap:
                    gap, at = b - a, a - t0
        return gap, at


def measure(url: str, chat: bool) -> dict:
    streams = OpenStreams(url)
    streams.thread.start()
    while not (streams.streams and streams.streams[0][1]):
        time.sleep(0.01)
    time.sleep(1.0)
    q0 = time.perf_counter()
    time.sleep(1.5)
    q1 = time.perf_counter()
    text = ("Once upon a time there was a little dog named Max. " * 20000)[:900_000]
    body = ({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text})
    t0 = time.perf_counter()
    r = httpx.post(url + ("/v1/chat/completions" if chat else "/v1/completions"), timeout=300,
                   json={**body, "max_tokens": 8, "n": 8})
    t1 = time.perf_counter()
    time.sleep(0.3)
    streams.stop.set()
    streams.thread.join(120)
    busy, quiet = streams.largest_gap(t0, t1), streams.largest_gap(q0, q1)
    return {"route": "chat" if chat else "completions", "status": r.status_code,
            "answer": (r.json().get("error") or {}).get("code") if r.status_code >= 400
            else "ok", "big_request_s": round(t1 - t0, 3),
            "largest_gap_ms_during_big_request": round(busy[0] * 1000, 1),
            "largest_gap_began_s_after_it_was_sent": round(busy[1], 3),
            "largest_gap_ms_quiet_1.5s_before": round(quiet[0] * 1000, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose code to run")
    ap.add_argument("--model", default=str(ROOT / "assets" / "models" / "demo"))
    ap.add_argument("--chat", action="store_true", help="a chat request instead of a prompt")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    proc, url = start_server(args.root, args.model)
    try:
        result = measure(url, args.chat)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    result["root"] = str(args.root)
    print(json.dumps(result) if args.json else
          "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
