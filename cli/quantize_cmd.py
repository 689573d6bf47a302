"""`npu-console quantize`: INT8-quantize a model folder and export it (progress on stderr)."""

from __future__ import annotations

import json
import sys
import threading
import time


def register(sub) -> None:
    from ..engine.quant.config import FORMATS, METHODS, PRESETS

    p = sub.add_parser("quantize", help="INT8-quantize a model and export it")
    p.add_argument("--model", required=True, help="float model folder (Hugging Face layout)")
    p.add_argument("--method", required=True, help=f"one of: {', '.join(METHODS)}")
    p.add_argument("--smoothquant", type=float, default=None, metavar="ALPHA",
                   help="SmoothQuant migration strength in [0, 1] (w8a8-* only), e.g. 0.5")
    p.add_argument("--skip", default="", metavar="PATTERNS",
                   help="comma-separated layer names to keep float: fnmatch (*.down_proj) or "
                        "re:REGEX")
    p.add_argument("--preset", default="all", help=f"layer preset: {', '.join(PRESETS)}")
    p.add_argument("--group-size", type=int, default=0, help="w8a16 per-group scales (0 = per channel)")
    p.add_argument("--calib", default=None, metavar="FILE",
                   help=".txt or .jsonl ({\"text\": ...}); default: text the model generates "
                        "itself (--recipe plain: the shipped calibration set)")
    p.add_argument("--recipe", default="auto", choices=["auto", "plain"],
                   help="auto (default): per-layer SmoothQuant and clipping searched on "
                        "calibration data, error-compensating rounding, the most sensitive "
                        "layers kept float; plain: one alpha, min-max ranges, nearest rounding")
    p.add_argument("--budget", type=float, default=None, metavar="PCT",
                   help="keep the most sensitive layers float until the perplexity increase "
                        "is within PCT %% (measured on --eval-data, else on the calibration "
                        "text), or say why it cannot")
    p.add_argument("--samples", type=int, default=64, help="calibration samples (default 64)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per calibration sample")
    p.add_argument("--int8-head", nargs="?", const="on", default="auto",
                   choices=["auto", "on", "off"],
                   help="lm_head and the token embedding in int8 (weight-only; native format "
                        "only). auto (default): on when they are at least 15 %% of the weights "
                        "(small models: SmolLM2, Qwen2.5-0.5B), float for other formats and "
                        "for w8a8-static; "
                        "--int8-head alone = on")
    p.add_argument("--format", dest="fmt", default="native", help=f"one of: {', '.join(FORMATS)}")
    p.add_argument("--out", required=True, help="output folder (written atomically)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--device", default="cpu", help="device to quantize on (cpu, npu, cuda)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--report", default=None, metavar="FILE",
                   help="also evaluate float vs quantized and write a report (.md and .json)")
    p.add_argument("--eval-data", default=None, metavar="FILE",
                   help="held-out text: --budget and the JSON's perplexity_change_pct are "
                        "measured on it, and the report's perplexity (default: calibration text)")
    p.add_argument("--act-scales", default="auto", choices=["auto", "block", "token"],
                   help="w8a8-dynamic activations: one int8 scale per block of 32 values "
                        "(block: as llama.cpp's Q8_0, on the native CPU kernels) or per token "
                        "(token: what NPU, CUDA and vLLM run; the fastest product on "
                        "AVX512-VNNI); auto: block for --format native, else token")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="quantize N times with the self-generated calibration drawn from seeds "
                        "0..N-1 and report each seed's perplexity change on --eval-data, their "
                        "mean, worst and spread (the checkpoint written is seed 0's)")
    p.add_argument("--rotate", default="off", choices=["off", "on"],
                   help="turn the residual stream and the value heads by orthogonal matrices "
                        "before calibrating (the same float function, outlier channels spread "
                        "out; Llama-style models with RMSNorm; unties a tied head; "
                        "docs/quantization.md)")
    p.add_argument("--turn-down", default="auto", choices=["auto", "on", "off"],
                   help="w8a8-static: turn each MLP's down_proj input at run time by a "
                        "Hadamard-based orthogonal, so an outlier channel does not set the "
                        "static range (the same float function; native format only); auto: on "
                        "for w8a8-static with --format native, else off")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=run)


class _StderrProgress:
    """StageEvents of the workflow as a few lines on stderr (one per tenth of each step)."""

    def __init__(self) -> None:
        self.last: tuple = ("", -1)
        self.t0 = time.perf_counter()

    def __call__(self, ev) -> None:
        if ev.step == "evaluate":  # the comparison's own steps: its message, once each
            key, line = (ev.message.rsplit(" ", 1)[0], 0), ev.message
        elif ev.step and ev.total:
            pct = int(100 * ev.done / max(ev.total, 1))
            key, line = (ev.step, pct // 10), f"{ev.step}: {ev.done}/{ev.total}"
            if ev.done == ev.total:
                key = (ev.step, 11)
        else:
            return
        if key == self.last:
            return
        self.last = key
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {line}", file=sys.stderr, flush=True)


def run(args) -> int:
    from ..engine.models.folder import ModelFolderError
    from ..engine.models.loader import ModelLoadError
    from ..engine.quant.calib import Cancelled
    from ..engine.quant.config import QuantError
    from ..engine.quant.workflow import QuantizeRequest, run_workflow
    from .errors import CliError

    skip = tuple(s.strip() for s in args.skip.split(",") if s.strip())
    req = QuantizeRequest(model_dir=args.model, out_dir=args.out, method=args.method,
                          fmt=args.fmt, preset=args.preset, skip=skip,
                          smoothquant=args.smoothquant, group_size=args.group_size,
                          calib_file=args.calib, samples=args.samples, seq_len=args.seq_len,
                          device=args.device, dtype=args.dtype, overwrite=args.overwrite,
                          int8_head=args.int8_head, recipe=args.recipe,
                          budget_pct=args.budget, eval_file=args.eval_data, report=args.report,
                          seeds=args.seeds, act_scales=args.act_scales, rotate=args.rotate,
                          turn_down=args.turn_down)
    cancel = threading.Event()
    try:
        result = run_workflow(req, on_event=_StderrProgress(), cancel=cancel)
    except (QuantError, ModelFolderError, ModelLoadError) as exc:
        raise CliError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    except KeyboardInterrupt:
        cancel.set()
        raise
    except Cancelled:
        raise CliError("cancelled; nothing was written") from None
    info = result.info
    print(f"{info.method}: {len(info.quantized)} layers int8, {len(info.skipped)} float; "
          f"{result.float_weight_bytes / 2**20:.1f} MiB -> {result.quant_weight_bytes / 2**20:.1f}"
          f" MiB; wrote {result.out_dir} ({result.fmt}) in {result.seconds:.1f}s", file=sys.stderr)
    _print_recipe(result)
    _print_head(result)
    if result.report_files:
        print(f"report written to {' and '.join(result.report_files)}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict()))
    return 0


def _print_recipe(result) -> None:
    """Calibration, int8 share, layers kept float and the budget verdict, on stderr."""
    if result.calibration:
        print(f"calibration: {result.calibration}", file=sys.stderr)
    print(f"int8 share of linear weights: {result.int8_weight_fraction:.1%}", file=sys.stderr)
    if result.rotation is not None and result.rotation.rotate:
        print(f"residual stream rotated ({result.rotation.reason})", file=sys.stderr)
    turned = result.info.config.get("recipe", {}).get("turned_down_inputs")
    if turned:
        print(f"down_proj inputs turned at run time: {turned} layers", file=sys.stderr)
    if result.info.config.get("act_blocks"):
        print("activations: int8 with one scale per block of 32 values (native CPU kernels)",
              file=sys.stderr)
    for name, why in result.kept_float.items():
        print(f"  kept float: {name} ({why})", file=sys.stderr)
    if result.perplexity_change_pct is not None:
        print(f"perplexity {result.float_perplexity:.4f} -> {result.quant_perplexity:.4f} "
              f"({result.perplexity_change_pct:+.2f} %)", file=sys.stderr)
    seeds = result.seeds_dict().get("seeds")
    if seeds:
        print(f"over {len(seeds['runs'])} calibration seeds: mean {seeds['mean_pct']:+.2f} %, "
              f"worst {seeds['worst_pct']:+.2f} %, spread {seeds['spread_pct']:.2f} points",
              file=sys.stderr)
    budget = result.budget
    if budget is not None and not budget.get("met"):
        print(f"budget of {budget['budget_pct']:g} % not met: {budget.get('why', '')}",
              file=sys.stderr)


def _print_head(result) -> None:
    """Whether the head went int8, why, and what it alone costs when that was measured."""
    if result.head is None:
        return
    state = "int8" if result.info.int8_head else "float"
    print(f"lm_head and embedding: {state} ({result.head.reason})", file=sys.stderr)
    cost = result.head_cost
    if cost is not None:
        print(f"  the int8 head alone: perplexity {cost.perplexity_change_pct:+.2f} %, next token "
              f"unchanged at {cost.top1_agreement:.1%} of {cost.tokens} positions",
              file=sys.stderr)
