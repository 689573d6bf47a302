"""Static W8A8 with down_proj's input turned at run time (QuaRot's online Hadamard, "R4";
engine.quant.turn), scored on dev data only: the dev text, the model's own text (seed 9) and
the dev code text of static_overflow_dev.py. No evaluation text (assets/eval/) is read.

    python tests/bench/static_r4_dev.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --variants base,r4s0,r4s1 [--seed 1]

`base`: the default static recipe without the turn (`--turn-down off`); `r4sN`: with the turn
drawn with seed N (the recipe's is turn.SEED = 0); `r4sNh` adds the int8 head (`--int8-head
on`); `r4sNfPP` keeps at least PP % of the linear weights int8 (the float allowance is 15 %). `--seed`: the calibration seed. One JSON line a variant: the perplexity change on the
three texts, the int8 share, the layers kept float and the seconds. Results are in
docs/quantization.md ("down_proj's input turned at run time")."""

from __future__ import annotations

import argparse
import copy
import functools
import json
import re
import time
from unittest import mock

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--variants", default="base,r4s0")
    ap.add_argument("--seed", type=int, default=0, help="calibration seed")
    ap.add_argument("--own-text-seed", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from npu_console.engine.quant import auto, mixed, turn
    from npu_console.engine.quant.workflow import QuantizeRequest
    from static_dev import dev_data  # beside this script
    from static_overflow_dev import code_perplexity

    d = dev_data(args.model, "w8a8-static", args.own_text_seed, calib_seed=args.seed)
    tok, samples, source = d.loaded.tokenizer, d.samples, d.source
    code = code_perplexity(tok)
    base = {"dev": d.base_dev, "own": d.base_own, "code": code(d.loaded.model)}
    print(json.dumps({"float": base, "calibration": source}), flush=True)

    for variant in args.variants.split(","):
        m = re.fullmatch(r"r4s(\d+)(h?)(?:f(\d+))?", variant)
        if not m and variant != "base":
            ap.error(f"unknown variant {variant!r}")
        req = QuantizeRequest(model_dir="", out_dir=None, method="w8a8-static",
                              turn_down="on" if m else "off",
                              int8_head="on" if m and m[2] else "off")
        seeded = functools.partial(turn.turn_down_inputs, seed=int(m[1]) if m else turn.SEED)
        t0 = time.perf_counter()
        share = int(m[3]) / 100 if m and m[3] else mixed.MIN_INT8_FRACTION
        keep = functools.partial(mixed.keep_most_sensitive, min_int8=share)
        with mock.patch.object(turn, "turn_down_inputs", seeded), \
                mock.patch.object(mixed, "keep_most_sensitive", keep):
            res = auto.run_auto(copy.deepcopy(d.loaded.model), tok, req.config(), samples, source)
        got = {"dev": d.dev(res.model), "own": d.own(res.model), "code": code(res.model)}
        print(json.dumps({"variant": variant, "seed": args.seed,
                          **{k: round(100 * (got[k] / base[k] - 1), 3) for k in got},
                          "int8": round(res.int8_weight_fraction, 4),
                          "float_layers": len(res.kept_float),
                          "head": type(res.model.get_output_embeddings()).__name__,
                          "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
