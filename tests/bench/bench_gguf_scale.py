"""The scale curve: Q8_0 GGUFs of real shapes loaded straight into INT8 (`--load-as int8`) beside
llama.cpp on the very same file: load time, peak RSS, decode tokens/s at batch 1 and 8.

    python tests/bench/bench_gguf_scale.py qwen2.5-0.5b llama-2-7b [--work /tmp/scale] \\
        [--llama-bin /tmp/llama-cpp/build/bin] [--new-tokens 32] [--keep]

Each shape's random-weight file is written by random_gguf.py --q8-0 (no float copy), measured,
and deleted unless --keep. Ours: a child that only loads (load time and its peak RSS), then
`npu-console bench offline --load-as int8 --batch-sizes 1,8` under /usr/bin/time -v (decode
tokens/s; peak RSS of the whole run, KV cache included). llama.cpp: `llama-bench -n N` (batch 1)
and `llama-batched-bench -npl 8` (aggregate generation tokens/s), both under /usr/bin/time -v.
Prints one JSON line per shape.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from random_gguf import SHAPES, write_random_q8_0

ROOT = Path(__file__).resolve().parents[2]
LOAD_ONLY = ("import sys, time, resource; from npu_console.engine.models import load_model; "
             "t = time.perf_counter(); m = load_model(sys.argv[1], load_as='int8'); "
             "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")


def timed(cmd: list, timeout: int = 3600) -> tuple[str, int]:
    """(stdout, peak RSS bytes) of `cmd` under /usr/bin/time -v."""
    res = subprocess.run(["/usr/bin/time", "-v", *map(str, cmd)], capture_output=True,
                         text=True, cwd=ROOT, timeout=timeout, check=False)
    if res.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{res.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1))
    return res.stdout, rss * 1024


def ours(path: Path, new_tokens: int) -> dict:
    out = subprocess.run([sys.executable, "-c", LOAD_ONLY, str(path)], capture_output=True,
                         text=True, cwd=ROOT, check=True).stdout.split()
    load_s, load_rss = float(out[0]), int(out[1]) * 1024
    text, rss = timed([sys.executable, "-m", "npu_console.cli.main", "bench", "offline",
                       "--model", path, "--load-as", "int8", "--batch-sizes", "1,8",
                       "--input-len", 16, "--output-len", new_tokens, "--threads", 2, "--json"])
    res = json.loads(text)
    tps = {b["batch_size"]: b["decode_tokens_per_s"] for b in res["batches"]}
    return {"load_s": round(load_s, 1), "load_peak_rss": load_rss, "peak_rss": rss,
            "weight_bytes": res["model"]["weight_bytes"], "kv_bytes": res["model"]["kv_bytes"],
            "decode_step": res["model"]["decode_step"], "tps_b1": tps[1], "tps_b8": tps[8]}


def llama_cpp(path: Path, bin_dir: Path, new_tokens: int) -> dict:
    t = time.perf_counter()
    text, rss1 = timed([bin_dir / "llama-bench", "-m", path, "-t", 2, "-p", 0, "-n", new_tokens,
                        "-r", 1, "-o", "jsonl"])
    b1 = json.loads(text.strip().splitlines()[-1])["avg_ts"]
    text, rss8 = timed([bin_dir / "llama-batched-bench", "-m", path, "-t", 2, "-c", 2048,
                        "-b", 512, "-ub", 512, "-npp", 16, "-ntg", new_tokens, "-npl", 8,
                        "--output-format", "jsonl"])
    b8 = json.loads(text.strip().splitlines()[-1])["speed_tg"]
    return {"tps_b1": b1, "tps_b8": b8, "peak_rss": max(rss1, rss8),
            "wall_s": round(time.perf_counter() - t, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="+", choices=sorted(SHAPES))
    p.add_argument("--work", type=Path, default=Path("/tmp/gguf-scale"))
    p.add_argument("--llama-bin", type=Path, default=Path("/tmp/llama-cpp/build/bin"))
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--keep", action="store_true", help="keep the GGUF files")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    for shape in args.shapes:
        path = args.work / f"{shape}-random-q8_0.gguf"
        if not path.exists():
            write_random_q8_0(shape, path)
        try:
            row = {"shape": shape, "file_bytes": path.stat().st_size,
                   "ours": ours(path, args.new_tokens),
                   "llama_cpp": llama_cpp(path, args.llama_bin, args.new_tokens)}
        finally:
            if not args.keep:
                path.unlink(missing_ok=True)
        o, lc = row["ours"], row["llama_cpp"]
        row["rss_over_int8_plus_kv"] = round(o["peak_rss"] / (o["weight_bytes"] + o["kv_bytes"]), 2)
        row["b1_vs_llama"] = round(o["tps_b1"] / lc["tps_b1"], 2)
        row["b8_vs_llama"] = round(o["tps_b8"] / lc["tps_b8"], 2)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
