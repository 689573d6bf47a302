"""`npu-console bench offline|serve`: batch sweep through the local engine, or a load generator
against any OpenAI-compatible server. Progress goes to stderr; Ctrl-C stops the run and still
prints and writes what was measured."""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

from ..engine.runtime.config import KV_DTYPES
from .errors import CliError

API_KEY_ENV = "NPU_CONSOLE_API_KEY"


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark the local engine or an OpenAI-compatible server",
                       description="offline: batch-size sweep through the local engine; "
                                   "serve: load test of a running server.")
    bsub = p.add_subparsers(dest="bench_command", metavar="MODE")

    o = bsub.add_parser("offline", help="batch-size sweep through the local engine",
                        description="Decode --output-len tokens for batches of random "
                                    "--input-len-token prompts and report tokens/s, TTFT, TPOT, "
                                    "peak memory and the share of the memory-bandwidth roofline.")
    from ..engine.paths import DEMO_MODEL_DIR

    o.add_argument("--model", default=str(DEMO_MODEL_DIR), help="model folder (default: demo)")
    o.add_argument("--quant", default="none",
                   choices=["none", "w8a16", "w8a8-dynamic", "w8a8-static"],
                   help="quantize in memory before the sweep (default: none)")
    o.add_argument("--int8-head", nargs="?", const="on", default="auto",
                   choices=["auto", "on", "off"],
                   help="with --quant: lm_head and embedding in int8 too; auto (default): when "
                        "they are at least 15 %% of the weights; --int8-head alone = on")
    o.add_argument("--act-scales", default="auto", choices=["auto", "block", "token"],
                   help="with --quant w8a8-dynamic: int8 activations per block of 32 (auto) "
                        "or per token (as `quantize --act-scales`)")
    o.add_argument("--device", default="auto", help="auto, cpu, npu[:N] or cuda[:N]")
    o.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    o.add_argument("--load-as", default="float", choices=["float", "int8"],
                   help="int8: a GGUF file straight into INT8 weights, no float copy")
    o.add_argument("--batch-sizes", default="1,2,4,8,16", help="comma-separated (default 1,2,4,8,16)")
    o.add_argument("--input-len", type=int, default=128, help="prompt tokens (default 128)")
    o.add_argument("--output-len", type=int, default=128, help="new tokens (default 128)")
    o.add_argument("--bandwidth", type=float, default=None, metavar="GBPS",
                   help="memory bandwidth for the roofline (default: measured on CPU, "
                        "spec sheet on accelerators)")
    o.add_argument("--threads", type=int, default=None, help="torch threads of the engine")
    o.add_argument("--kv-dtype", default="auto", choices=KV_DTYPES,
                   help="the KV cache's dtype (auto: float16 on CPU with the native kernels)")
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--out", default=None, metavar="PREFIX",
                   help="write PREFIX.json and PREFIX.csv")
    o.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    o.set_defaults(func=run_offline)

    s = bsub.add_parser("serve", help="load-test an OpenAI-compatible server",
                        description="Stream --num-prompts requests to BASE_URL/v1/completions "
                                    "(or chat) and report TTFT, TPOT, ITL and E2EL percentiles, "
                                    "throughput and goodput, with vLLM's definitions.")
    s.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    s.add_argument("--model", default=None, help="model id (default: the first one served)")
    s.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"bearer key (or set {API_KEY_ENV})")
    s.add_argument("--endpoint", default="completions", choices=["completions", "chat"])
    s.add_argument("--concurrency", type=int, default=None, metavar="N",
                   help="most requests in flight at once")
    s.add_argument("--rate", type=float, default=None, metavar="R",
                   help="requests per second, Poisson arrivals (gamma with --burstiness)")
    s.add_argument("--burstiness", type=float, default=1.0, metavar="B",
                   help="gamma shape of the arrival gaps: 1 Poisson, <1 bursty, >1 even")
    s.add_argument("--num-prompts", type=int, required=True, metavar="N")
    s.add_argument("--input-len", type=int, default=128, help="random prompt tokens")
    s.add_argument("--output-len", type=int, default=128, help="tokens asked per request")
    s.add_argument("--dataset", default=None, metavar="FILE",
                   help=".txt (one prompt a line) or .jsonl ({\"prompt\": ...}) instead of "
                        "random prompts")
    s.add_argument("--tokenizer", default=None, metavar="DIR",
                   help="local tokenizer folder: random prompts of exactly --input-len tokens")
    s.add_argument("--no-ignore-eos", action="store_true",
                   help="do not ask the server to ignore EOS (answers may be shorter)")
    s.add_argument("--slo-ttft-ms", type=float, default=None)
    s.add_argument("--slo-tpot-ms", type=float, default=None)
    s.add_argument("--slo-e2el-ms", type=float, default=None)
    s.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", default=None, metavar="PREFIX",
                   help="write PREFIX.json, PREFIX.csv (summary) and PREFIX_requests.csv")
    s.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    s.set_defaults(func=run_serve)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CliError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise CliError(f"--batch-sizes must be positive integers, got {text!r}")
    return sizes


class _StderrProgress:
    def __init__(self):
        self.tty = sys.stderr.isatty()
        self._last = ""

    def __call__(self, p) -> None:
        line = f"[{p.fraction * 100:3.0f}%] {p.message}"
        if line == self._last:
            return
        self._last = line
        if self.tty:
            print(f"\r{line:<70}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty and self._last:
            print(file=sys.stderr)


@contextmanager
def _ctrl_c_sets(event: threading.Event):
    """First Ctrl-C asks the run to stop and keep its results; a second one aborts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if event.is_set():
            raise KeyboardInterrupt
        event.set()
        print("\nstopping: finishing with what was measured (Ctrl-C again to abort)",
              file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _emit(result, args) -> int:
    import json

    if args.out:
        try:
            paths = result.write(args.out)
        except OSError as exc:
            raise CliError(f"cannot write results to {args.out}: {exc.strerror}") from None
        print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    if args.json:
        from ..engine.bench.progress import _clean

        print(json.dumps(_clean(result.to_dict()), indent=2, default=str))
    else:
        print(result.summary_text())
    return 130 if result.cancelled else 0


def run_offline(args) -> int:
    from ..engine.bench import OfflineConfig, run_offline_sweep
    from .common import resolve_device_dtype

    device, dtype = resolve_device_dtype(args)
    cfg = OfflineConfig(model=args.model, quant=args.quant, int8_head=args.int8_head,
                        act_scales=args.act_scales,
                        device=device, dtype=dtype,
                        batch_sizes=_batch_sizes(args.batch_sizes), input_len=args.input_len,
                        output_len=args.output_len, seed=args.seed,
                        bandwidth_gbps=args.bandwidth, num_threads=args.threads,
                        load_as=args.load_as, kv_dtype=args.kv_dtype)
    return _run(run_offline_sweep, cfg, args)


def run_serve(args) -> int:
    from ..engine.bench import SLO, ServingConfig, run_serving_benchmark

    if args.concurrency is None and args.rate is None:
        raise CliError("give --concurrency N, --rate R, or both")
    cfg = ServingConfig(
        base_url=args.base_url, model=args.model, api_key=args.api_key, endpoint=args.endpoint,
        num_prompts=args.num_prompts, concurrency=args.concurrency, rate=args.rate,
        burstiness=args.burstiness, input_len=args.input_len, output_len=args.output_len,
        dataset=args.dataset, tokenizer=args.tokenizer, seed=args.seed,
        slo=SLO(args.slo_ttft_ms, args.slo_tpot_ms, args.slo_e2el_ms),
        ignore_eos=not args.no_ignore_eos, timeout_s=args.timeout)
    return _run(run_serving_benchmark, cfg, args)


def _run(bench, cfg, args) -> int:
    """Either benchmark with progress on stderr and Ctrl-C as its cancel; its result printed."""
    from ..engine.bench import BenchError

    cancel = threading.Event()
    progress = _StderrProgress()
    try:
        with _ctrl_c_sets(cancel):
            result = bench(cfg, progress=progress, cancel=cancel)
    except BenchError as exc:
        raise CliError(str(exc)) from None
    finally:
        progress.close()
    return _emit(result, args)
