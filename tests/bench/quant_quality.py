"""Quality of each default recipe on a real model, as the spread over calibration seeds and
the mean and worst over the evaluation texts (issue 32). Speed is not measured here.

    python tests/bench/quant_quality.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --methods w8a16,w8a8-dynamic,w8a8-static --seeds 3 --json-out /tmp/quality.json

Each method is quantized once per seed (the self-generated calibration drawn with that seed),
then every evaluation text (assets/eval/ by default, --texts to name others) is scored by
llama.cpp's chunk method at ctx 512 against the float model. Recipes are never chosen on
these texts: see assets/eval/README.md."""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch


def eval_files(names: str | None) -> list[Path]:
    from npu_console.engine.paths import EVAL_DIR

    if names:
        return [Path(n) for n in names.split(",")]
    return sorted(p for p in EVAL_DIR.iterdir() if p.suffix in (".txt", ".jsonl"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--methods", default="w8a16,w8a8-dynamic,w8a8-static")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--texts", default=None, help="comma-separated files (default: assets/eval/)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--group-size", type=int, default=None,
                    help="weight scales per group of this many inputs (default: the method's)")
    ap.add_argument("--rotate", default="off", choices=["off", "on"],
                    help="as `quantize --rotate`")
    ap.add_argument("--turn-down", default="auto", choices=["auto", "on", "off"],
                    help="as `quantize --turn-down` (w8a8-static)")
    ap.add_argument("--int8-head", default="off", choices=["on", "off"],
                    help="lm_head and embedding in int8 too (the bars are held without)")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--print-only", default=None,
                    help="comma-separated text names to print (the rest goes to --json-out "
                         "only): keeps held-out results out of sight while a recipe is chosen")
    args = ap.parse_args(argv)

    from npu_console.engine.models.loader import load_model
    from npu_console.engine.quant import eval_methods as em
    from npu_console.engine.quant.auto import (
        calibration_samples,
        run_auto,
        self_prompts_for,
        self_tokens_for,
    )
    from npu_console.engine.quant.workflow import QuantizeRequest, rotated_config

    loaded = load_model(args.model, device="cpu", dtype="float32")
    tok = loaded.tokenizer
    texts = {p.name: em.read_eval_text(p, tok) for p in eval_files(args.texts)}

    def ppl(model) -> dict[str, float]:
        with torch.inference_mode():
            return {name: em.evaluate_texts(model, tok, docs, "chunks", args.ctx,
                                            whole=whole).perplexity
                    for name, (whole, docs) in texts.items()}

    shown = set(args.print_only.split(",")) if args.print_only else None

    def visible(d: dict) -> dict:
        return {k: v for k, v in d.items() if shown is None or k in shown}

    base = ppl(loaded.model)
    print(f"float perplexity: {json.dumps({k: round(v, 4) for k, v in visible(base).items()})}",
          flush=True)
    runs = []
    for method in args.methods.split(","):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            t0 = time.perf_counter()
            samples, source = calibration_samples(loaded.model, tok, None, 0, 0,
                                                  loaded.files_dir, None, None,
                                                  self_tokens=self_tokens_for(method), seed=seed,
                                                  self_prompts=self_prompts_for(method))
            extra = {} if args.group_size is None else {"group_size": args.group_size}
            req = QuantizeRequest(model_dir="", out_dir=None, method=method,
                                  rotate=args.rotate,
                                  turn_down=args.turn_down if method == "w8a8-static" else "auto",
                                  int8_head=args.int8_head, **extra)
            model = copy.deepcopy(loaded.model)
            cfg, rotation = rotated_config(req, req.config(), model)
            res = run_auto(model, tok, cfg, samples, source)
            got = ppl(res.model)
            change = {k: 100 * (got[k] / base[k] - 1) for k in got}
            run = {"method": method, "seed": seed, "change_pct": change,
                   "int8_weight_fraction": res.int8_weight_fraction,
                   "kept_float": len(res.kept_float), "rotated": rotation.rotate,
                   "down_turned": res.info.config["recipe"].get("turned_down_inputs", 0),
                   "int8_head": args.int8_head == "on",
                   "seconds": time.perf_counter() - t0,
                   "calibration": res.calibration}
            runs.append(run)
            print(json.dumps({**run, "change_pct": visible(change)}), flush=True)
            del res
    summary = summarize(runs)
    if shown is None:
        print(table(summary))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"float": base, "runs": runs,
                                                   "summary": summary}, indent=1))
    return 0


def summarize(runs: list[dict]) -> dict:
    """Per method: each text's mean over seeds, the mean and worst text, the seeds' spread
    (max - min of the mean over texts)."""
    out = {}
    for method in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == method]
        names = list(mine[0]["change_pct"])
        per_text = {n: statistics.fmean(r["change_pct"][n] for r in mine) for n in names}
        per_seed = [statistics.fmean(r["change_pct"].values()) for r in mine]
        worst_text = max(per_text, key=per_text.get)
        out[method] = {"per_text_mean": per_text, "mean": statistics.fmean(per_text.values()),
                       "worst_text": worst_text, "worst": per_text[worst_text],
                       "worst_single_run": max(max(r["change_pct"].values()) for r in mine),
                       "seed_spread": max(per_seed) - min(per_seed), "seeds": len(mine),
                       "int8_weight_fraction": min(r["int8_weight_fraction"] for r in mine)}
    return out


def table(summary: dict) -> str:
    rows = ["| method | mean | worst text | worst single run | seed spread | int8 |",
            "|---|---|---|---|---|---|"]
    for m, s in summary.items():
        rows.append(f"| {m} | {s['mean']:+.3f} % | {s['worst']:+.3f} % ({s['worst_text']}) | "
                    f"{s['worst_single_run']:+.3f} % | {s['seed_spread']:.3f} | "
                    f"{s['int8_weight_fraction']:.1%} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
