"""Static W8A8's float layers chosen out of sample, and its calibration with programming
requests: the two choices of 2026-12-07, measured on dev data only (the dev text, the model's
own text drawn with a seed no recipe calibrates on, and the dev code text of
static_overflow_dev.py, this project's own sources; no evaluation text in assets/eval/ is read).

    python tests/bench/static_split_dev.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --variants crossfit,insample [--seed 1] [--neutral]

`crossfit` is the default recipe: its whole-model sensitivity is scored out of sample
(engine.quant.fisher.crossfit_scores). `insample` scores it on the very samples the ranges were
fitted on, as the recipe did before. Ranges and rounding are the default's in both: only the
choice of the 15 % kept float differs. The calibration is static's own (four neutral and two
programming requests, `--seed`), or with `--neutral` the four neutral requests alone, as
before. Results are in docs/quantization.md ("Float layers chosen out of sample"). One JSON
line per variant."""

from __future__ import annotations

import argparse
import copy
import json
import time
from unittest import mock

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--variants", default="crossfit,insample")
    ap.add_argument("--seed", type=int, default=0, help="calibration seed")
    ap.add_argument("--neutral", action="store_true", help="the neutral requests alone")
    ap.add_argument("--own-text-seed", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from npu_console.engine.quant import auto
    from npu_console.engine.quant import recipe as recipe_mod
    from npu_console.engine.quant.fisher import recipe_scores
    from npu_console.engine.quant.selfcalib import PROMPTS
    from npu_console.engine.quant.workflow import QuantizeRequest
    from static_dev import dev_data  # beside this script
    from static_overflow_dev import code_perplexity

    d = dev_data(args.model, "w8a8-static", args.own_text_seed)
    tok = d.loaded.tokenizer
    samples, source = d.samples, d.source
    if args.seed or args.neutral:
        samples, source = auto.calibration_samples(
            d.loaded.model, tok, None, 0, 0, d.loaded.files_dir, None, None,
            self_tokens=auto.self_tokens_for("w8a8-static"), seed=args.seed,
            self_prompts=PROMPTS if args.neutral else auto.self_prompts_for("w8a8-static"))
    code_ppl = code_perplexity(tok)

    base = {"dev": d.base_dev, "own": d.base_own, "code": code_ppl(d.loaded.model)}
    print(json.dumps({"float": base, "calibration": source}), flush=True)
    cfg = QuantizeRequest(model_dir="", out_dir=None, method="w8a8-static").config()

    def insample(model, cfg, names, samples, tok, progress, cancel):
        caps = auto.capture(model, samples, names, bos_id=tok.bos_token_id)
        rec = recipe_mod.search(model, cfg.method, caps, act_blocks=cfg.act_blocks)
        return recipe_scores(model, rec, recipe_mod.body_stats(caps), names, samples)

    for variant in args.variants.split(","):
        if variant not in ("crossfit", "insample"):
            ap.error(f"unknown variant {variant!r}")
        scores = insample if variant == "insample" else auto._static_scores
        t0 = time.perf_counter()
        with mock.patch.object(auto, "_static_scores", scores):
            res = auto.run_auto(copy.deepcopy(d.loaded.model), tok, cfg, samples, source)
        got = {"dev": d.dev(res.model), "own": d.own(res.model), "code": code_ppl(res.model)}
        print(json.dumps({"variant": variant, "seed": args.seed, "neutral": args.neutral,
                          **{k: round(100 * (got[k] / base[k] - 1), 3) for k in got},
                          "int8": round(res.int8_weight_fraction, 4),
                          "float_layers": sorted(res.kept_float),
                          "seconds": round(time.perf_counter() - t0)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
