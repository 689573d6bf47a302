"""Where W8A16's perplexity loss comes from, on the dev text only (never an evaluation text):
round-to-nearest weights per output channel and per group of 32, each scored on the exact
float64 reference backend and on the kernels that run by default. Equal columns mean the
kernels' activation rounding costs nothing and the loss is the weights' rounding.

    python tests/bench/w8a16_loss_split.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", default="assets/calib/heldout_en.txt", help="a dev text")
    ap.add_argument("--groups", default="0,32", help="0 = one scale per output channel")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    from npu_console.engine.models.loader import load_model
    from npu_console.engine.quant import eval_methods as em
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.config import QuantConfig

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, device="cpu", dtype="float32")
    whole, docs = em.read_eval_text(args.text, loaded.tokenizer)

    def ppl(model) -> float:
        with torch.inference_mode():
            return em.evaluate_texts(model, loaded.tokenizer, docs, "chunks", 512,
                                     whole=whole).perplexity

    base = ppl(loaded.model)
    print(json.dumps({"float_perplexity": base}), flush=True)
    for group in (int(g) for g in args.groups.split(",")):
        model = copy.deepcopy(loaded.model)
        quantize_model(model, QuantConfig(method="w8a16", group_size=group))
        for backend in ("reference", "auto"):
            for m in model.modules():
                if hasattr(m, "backend"):
                    m.backend = backend
            t0 = time.perf_counter()
            got = ppl(model)
            print(json.dumps({"group": group, "backend": backend,
                              "change_pct": round(100 * (got / base - 1), 4),
                              "seconds": round(time.perf_counter() - t0)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
