"""Our INT8 engine beside llama.cpp on the same weights, in one run, interleaved.

    python tests/bench/bench_peer.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
        [--llama-bin /tmp/llama-cpp/build/bin] [--variants w8a16,w8a8-dynamic] [--rounds 3] \\
        [--append-docs docs/benchmarks.md]
    python tests/bench/bench_peer.py --random-shape qwen2.5-0.5b [...]   # or --model /tmp/qwen05b-random
    python tests/bench/bench_peer.py --model /tmp/gemma3-270m-q8_0.gguf --variants load-int8
        # a Q8_0 GGUF (tests/bench/random_gguf.py --q8-0 SHAPE) as it is, by both engines

llama.cpp's tools come from ../shared/tools/build_llama_cpp.sh (or --llama-bin). From one model
(a GGUF, or a Hugging Face folder that llama.cpp's own convert_hf_to_gguf.py turns into one) it
makes the Q8_0 llama.cpp runs, and our engine quantizes the same float weights to each variant.
Each round runs, for every batch size, llama.cpp then each of our variants (decode at batch 1
with `llama-bench`, at 8 and 16 with `llama-batched-bench`, aggregate tokens/s; ours with
`npu-console bench offline`), then prefill of --prefill tokens; figures are medians over rounds
and ratios are ours / llama.cpp Q8_0. The random-weight Qwen2.5-0.5B shape (--random-shape,
or --model on a folder from `python -m npu_console.engine.bench.random_model`) has a word
tokenizer the converter cannot read, so random_gguf.py writes its float32 weights to the GGUF
itself and our engine runs the folder: both engines get the same values. It prints the CPU
flags that decide kernel choices, and with --append-docs adds the table to docs/benchmarks.md. Needs a quiet machine: both engines
spin OpenMP threads, and a busy second core costs either of them up to 100x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from random_gguf import needs_own_writer, write_qwen2_gguf

ROOT = Path(__file__).resolve().parents[2]
RANDOM_SHAPES = ("qwen2.5-0.5b",)
FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
         "avx_vnni", "amx_tile")


def cpu_flags() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from npu_console.engine.devices import cpu_flags as flags

    have = flags()
    return [f for f in FLAGS if f in have]


def run(cmd: list[str], timeout: int = 1800) -> str:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                         timeout=timeout, check=False)
    if res.returncode != 0:
        raise SystemExit(f"failed ({res.returncode}): {' '.join(map(str, cmd))}\n"
                         f"{res.stderr[-2000:]}")
    return res.stdout


def to_gguf(model: Path, llama_bin: Path, work: Path) -> Path:
    if model.suffix == ".gguf":
        return model
    if needs_own_writer(model):
        print(f"writing {model.name} to GGUF (float32, placeholder vocabulary)", file=sys.stderr)
        return write_qwen2_gguf(model, work / f"{model.name}-f32.gguf", "f32")
    script = llama_bin.parents[1] / "convert_hf_to_gguf.py"
    if not script.is_file():  # the build script's layout: OUT/build/bin, OUT/llama_cpp_python-*/...
        found = sorted(llama_bin.parents[1].glob("llama_cpp_python-*/vendor/llama.cpp/"
                                                 "convert_hf_to_gguf.py"))
        if not found:
            raise SystemExit("no convert_hf_to_gguf.py beside the llama.cpp build")
        script = found[-1]
    out = work / f"{model.name}-f16.gguf"
    run([sys.executable, script, model, "--outfile", out, "--outtype", "f16"])
    return out


def llama_decode(bin_dir: Path, q8: Path, batch: int, n: int, threads: int,
                 context: int = 32) -> float:
    """llama.cpp's decode tokens/s of `batch` sequences after `context` prompt tokens each (its
    default KV cache: f16)"""
    if batch == 1:  # -d: the generation runs after that many tokens in the cache
        depth = ["-d", context] if context > 32 else []
        out = run([bin_dir / "llama-bench", "-m", q8, "-t", threads, "-p", 0, "-n", n, *depth,
                   "-r", 1, "-o", "jsonl"])
        return float(json.loads(out.strip().splitlines()[-1])["avg_ts"])
    ctx = max(4096, batch * (context + n) + 64)
    out = run([bin_dir / "llama-batched-bench", "-m", q8, "-t", threads, "-c", ctx, "-b", 512,
               "-ub", 512, "-npp", context, "-ntg", n, "-npl", batch, "--output-format", "jsonl"])
    rows = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    return float(rows[-1]["speed_tg"])


def llama_prefill(bin_dir: Path, q8: Path, n: int, threads: int) -> float:
    out = run([bin_dir / "llama-bench", "-m", q8, "-t", threads, "-p", n, "-n", 0, "-r", 1,
               "-o", "jsonl"])
    return float(json.loads(out.strip().splitlines()[-1])["avg_ts"])


# a variant that quantizes nothing: the GGUF's own blocks loaded as INT8 (Q8_0 -> grouped W8A16)
LOAD_INT8 = "load-int8"


def ours(model: Path, quant: str, batch: int, input_len: int, output_len: int,
         threads: int, kv_dtype: str = "auto") -> dict:
    how = ["--load-as", "int8"] if quant == LOAD_INT8 else ["--quant", quant]
    out = run([sys.executable, "-m", "npu_console.cli.main", "bench", "offline", "--model", model,
               *how, "--batch-sizes", batch, "--input-len", input_len,
               "--output-len", output_len, "--threads", threads, "--kv-dtype", kv_dtype,
               "--json"])
    return json.loads(out)["batches"][0]


def is_q8_0(gguf_file: Path) -> bool:
    """Whether a GGUF is already llama.cpp's Q8_0 (then both engines read it as it is)."""
    import gguf

    field = gguf.GGUFReader(gguf_file).fields.get("general.file_type")
    return field is not None and int(field.contents()) == int(gguf.LlamaFileType.MOSTLY_Q8_0)


def median_table(samples: dict) -> dict:
    return {k: statistics.median(v) for k, v in samples.items() if v}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", type=Path, help="a GGUF file or an HF folder")
    src.add_argument("--random-shape", choices=RANDOM_SHAPES,
                     help="make this shape with random float32 weights and run it on both engines")
    p.add_argument("--seed", type=int, default=0, help="weights seed for --random-shape")
    p.add_argument("--llama-bin", type=Path, default=Path("/tmp/llama-cpp/build/bin"))
    p.add_argument("--variants", default="w8a16,w8a8-dynamic",
                   help=f"our quantization methods, and/or {LOAD_INT8} (a GGUF's blocks as INT8)")
    p.add_argument("--batches", default="1,8,16")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--context", type=int, default=32,
                   help="prompt tokens of each sequence before the decode runs (attention reads "
                        "them every step)")
    p.add_argument("--kv-dtype", default="auto",
                   help="our KV cache (llama.cpp keeps its default, f16)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--append-docs", type=Path, default=None)
    args = p.parse_args(argv)
    for tool in ("llama-bench", "llama-batched-bench", "llama-quantize"):
        if not (args.llama_bin / tool).is_file():
            raise SystemExit(f"{args.llama_bin / tool} missing: run "
                             "../shared/tools/build_llama_cpp.sh or pass --llama-bin")
    variants = args.variants.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    flags = cpu_flags()
    print(f"CPU flags: {' '.join(flags)}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        work = Path(tmp)
        if args.random_shape:
            from npu_console.engine.bench.random_model import make_random_qwen

            print(f"making the random {args.random_shape} model", file=sys.stderr)
            args.model = make_random_qwen(work / f"{args.random_shape}-random", seed=args.seed,
                                          dtype="float32")
        src = args.model.resolve()
        model = to_gguf(src, args.llama_bin, work)
        # the random model's GGUF has a placeholder vocabulary, so our engine runs its folder
        ours_model = src if src.is_dir() and needs_own_writer(src) else model
        q8 = work / "q8_0.gguf"
        if model.suffix == ".gguf" and is_q8_0(model):
            q8 = model
        else:
            run([args.llama_bin / "llama-quantize", "--allow-requantize", model, q8, "Q8_0",
                 args.threads])
        samples: dict[tuple, list[float]] = {}
        t0 = time.monotonic()
        for r in range(args.rounds):
            for b in batches:
                samples.setdefault(("llama.cpp Q8_0", b), []).append(
                    llama_decode(args.llama_bin, q8, b, args.new_tokens, args.threads,
                                 args.context))
                for v in variants:
                    row = ours(ours_model, v, b, args.context, args.new_tokens, args.threads,
                               args.kv_dtype)
                    samples.setdefault((v, b), []).append(row["decode_tokens_per_s"])
            samples.setdefault(("llama.cpp Q8_0", "prefill"), []).append(
                llama_prefill(args.llama_bin, q8, args.prefill, args.threads))
            for v in variants:
                row = ours(ours_model, v, 1, args.prefill, 8, args.threads)
                samples.setdefault((v, "prefill"), []).append(
                    args.prefill / (row["ttft_ms_mean"] / 1000.0))
            print(f"round {r + 1}/{args.rounds} done ({time.monotonic() - t0:.0f} s)",
                  file=sys.stderr)
    med = median_table(samples)
    cols = [*batches, "prefill"]
    head = ("| engine | " + " | ".join(f"batch {c} tok/s" if c != "prefill"
                                       else f"prefill {args.prefill} tok/s" for c in cols)
            + " |")
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for name in ["llama.cpp Q8_0", *variants]:
        cells = []
        for c in cols:
            ours_v = med.get((name, c))
            peer = med.get(("llama.cpp Q8_0", c))
            ratio = "" if name.startswith("llama") or not peer else f" ({ours_v / peer:.2f}x)"
            cells.append(f"{ours_v:.1f}{ratio}" if ours_v is not None else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    source = (f"--random-shape {args.random_shape} --seed {args.seed}" if args.random_shape
              else f"--model {args.model}")
    extra = (f" --context {args.context}" if args.context != 32 else "") + (
        f" --kv-dtype {args.kv_dtype}" if args.kv_dtype != "auto" else "")
    header = (f"`python tests/bench/bench_peer.py {source} --rounds {args.rounds} "
              f"--variants {args.variants}{extra}` ({time.strftime('%Y-%m-%d %H:%M')}, "
              f"{args.threads} threads; CPU flags: {' '.join(flags)}; medians of "
              f"{args.rounds} interleaved rounds, ratios vs llama.cpp Q8_0 of the same file)")
    print(header)
    print(table)
    if args.append_docs:
        with open(args.append_docs, "a", encoding="utf-8") as f:
            f.write(f"\n### Peer run\n\n{header}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
