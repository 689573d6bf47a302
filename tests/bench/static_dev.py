"""Static W8A8 variants scored on dev data only: the dev text (assets/calib/heldout_en.txt)
and the model's own text drawn with a calibration seed no variant calibrates on. No
evaluation text (assets/eval/) is read, so a recipe can be chosen with it.

    python tests/bench/static_dev.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --variants base,hv0,hv1,hv2

A variant is `base` (the default recipe), or a rotation (engine.quant.rotate) and its seed:
`rot` random orthogonal, `had` Hadamard, `rv` / `hv` the same with the value heads turned
too (R2); e.g. `hv0`. One JSON line per variant: the perplexity change on both texts, the
int8 share, the layers kept float and the seconds it took."""

from __future__ import annotations

import argparse
import copy
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

KINDS = {"rot": ("random", False), "had": ("hadamard", False), "rv": ("random", True),
         "hv": ("hadamard", True)}


@dataclass
class DevData:
    """The float model, static's calibration samples and the two dev scores: perplexity on the
    dev text and on the model's own text drawn with `own_text_seed` (never calibrated on)."""
    loaded: Any
    samples: list
    source: str
    dev: Callable[[Any], float]
    own: Callable[[Any], float]
    base_dev: float
    base_own: float


def dev_data(model_path: str, method: str = "w8a8-static", own_text_seed: int = 9,
             calib_seed: int = 0) -> DevData:
    from npu_console.engine.models.loader import load_model
    from npu_console.engine.paths import CALIB_DIR
    from npu_console.engine.quant import eval_methods as em
    from npu_console.engine.quant.auto import (
        calibration_samples,
        eval_measure,
        self_prompts_for,
        self_tokens_for,
    )

    loaded = load_model(model_path, device="cpu", dtype="float32")
    tok = loaded.tokenizer
    whole, docs = em.read_eval_text(CALIB_DIR / "heldout_en.txt", tok)

    def dev(model) -> float:
        with torch.inference_mode():
            return em.evaluate_texts(model, tok, docs, "chunks", 512, whole=whole).perplexity

    def draw(seed: int, tokens: int, prompts=None):
        return calibration_samples(loaded.model, tok, None, 0, 0, loaded.files_dir, None,
                                   None, self_tokens=tokens, seed=seed, self_prompts=prompts)

    samples, source = draw(calib_seed, self_tokens_for(method), self_prompts_for(method))
    own = eval_measure(tok, None, draw(own_text_seed, 256)[0])
    return DevData(loaded, samples, source, dev, own, dev(loaded.model), own(loaded.model))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--variants", default="base,hv0")
    ap.add_argument("--method", default="w8a8-static")
    ap.add_argument("--own-text-seed", type=int, default=9)
    args = ap.parse_args(argv)

    from npu_console.engine.quant.auto import run_auto
    from npu_console.engine.quant.rotate import rotate_residual
    from npu_console.engine.quant.workflow import QuantizeRequest

    d = dev_data(args.model, args.method, args.own_text_seed)
    loaded, tok, dev, own = d.loaded, d.loaded.tokenizer, d.dev, d.own
    samples, source, base_dev, base_own = d.samples, d.source, d.base_dev, d.base_own
    print(json.dumps({"float": {"dev": base_dev, "own": base_own}}), flush=True)
    cfg = QuantizeRequest(model_dir="", out_dir=None, method=args.method).config()
    for variant in args.variants.split(","):
        model = copy.deepcopy(loaded.model)
        t0 = time.perf_counter()
        rotated = variant != "base"
        if rotated:
            m = re.fullmatch(r"(rot|had|rv|hv)(\d+)", variant)
            if m is None:
                ap.error(f"unknown variant {variant!r}")
            kind, values = KINDS[m[1]]
            rotate_residual(model, int(m[2]), kind=kind, values=values)
        res = run_auto(model, tok, replace(cfg, rotate=rotated), samples, source)
        print(json.dumps({"variant": variant, "dev_pct": 100 * (dev(res.model) / base_dev - 1),
                          "own_pct": 100 * (own(res.model) / base_own - 1),
                          "int8": res.int8_weight_fraction, "float_layers": len(res.kept_float),
                          "seconds": time.perf_counter() - t0}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
