"""What tokenizing one huge prompt costs the other threads of the serving process, in-process.

The tokenizer's work itself runs without the GIL; what stalls the server's event loop (and so
every open stream) is what holds it before and after. Two views, on the demo model's tokenizer
and a 900 KB prompt (~300,000 tokens):
* each step timed alone on one thread (time.perf_counter): template rendering, the GIL-free
  encode, listing the ids, freeing the encoding (with offsets, as `encode_batch` keeps them, and
  without, as `encode_batch_fast`);
* the largest gap a second thread that wakes every 1 ms sees while PromptEncoder.encode (the
  engine's path, with the model's context as `max_len`) refuses the prompt, for a text prompt
  and a chat message (and, for comparison, on the path before: offsets kept, ids listed first).

    .venv/bin/python tests/bench/bench_encode_gil.py [--model DIR] [--repeats 5]

Results: docs/benchmarks.md#one-huge-request-and-the-other-streams-issue-21.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = ("Once upon a time there was a little dog named Max. " * 20000)[:900_000]


def steps(tok) -> dict[str, float]:
    from npu_console.engine.runtime.prompting import render_chat

    be, out, t = tok.backend_tokenizer, {}, time.perf_counter
    a = t()
    text = render_chat(tok, [{"role": "user", "content": TEXT}])
    out["render chat template"] = t() - a
    for name, encode in (("encode_batch", be.encode_batch),
                         ("encode_batch_fast", be.encode_batch_fast)):
        a = t()
        encs = encode([text], add_special_tokens=False)
        out[f"{name} (GIL released)"] = t() - a
        a = t()
        ids = encs[0].ids
        out[f"{name}: ids -> list"] = t() - a
        a = t()
        del encs
        out[f"{name}: free the encoding"] = t() - a
        del ids
    return out


def largest_gap(work) -> float:
    gaps, stop = [], threading.Event()

    def tick():
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.05)
    gaps.clear()
    work()
    time.sleep(0.02)
    stop.set()
    ticker.join()
    return max(gaps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "assets" / "models" / "demo"))
    ap.add_argument("--max-len", type=int, default=1024, help="the context refused against")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from npu_console.engine.runtime.prompting import PromptEncoder
    from npu_console.engine.runtime.types import ContextLengthError, GenerationRequest
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    print(f"load average {os.getloadavg()[0]:.2f}, {args.repeats} repeats, median (max) ms")
    runs = []
    for _ in range(args.repeats):
        gc.collect()
        runs.append(steps(tok))
    for name in runs[0]:
        v = [r[name] * 1000 for r in runs]
        print(f"  {name:38s} {statistics.median(v):8.1f} ({max(v):.1f})")
    enc = PromptEncoder(tok)

    def refuse(req):
        try:
            enc.encode(req, args.max_len)
        except ContextLengthError:
            return
        raise SystemExit("the prompt was not refused: --max-len too large?")
    def listed_then_refused():  # the path before: offsets kept, ids listed, then the check
        ids = tok.backend_tokenizer.encode_batch([TEXT], add_special_tokens=True)[0].ids
        assert len(ids) >= args.max_len

    for label, req in (("prompt", GenerationRequest(prompt=TEXT)), (
            "chat", GenerationRequest(messages=[{"role": "user", "content": TEXT}])),
            ("prompt, the path before", None)):
        work = listed_then_refused if req is None else (lambda r=req: refuse(r))
        work()  # the thread's first use makes its tokenizer copy: not measured
        v = []
        for _ in range(args.repeats):
            gc.collect()
            v.append(largest_gap(work) * 1000)
        quiet = [largest_gap(lambda: time.sleep(1.0)) * 1000 for _ in range(args.repeats)]
        print(f"  largest 1 ms-ticker gap, {label} refused: median {statistics.median(v):.1f}"
              f" (max {max(v):.1f}); idle 1 s: median {statistics.median(quiet):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
