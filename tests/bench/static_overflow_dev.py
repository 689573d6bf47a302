"""Where static W8A8 loses on code: how often each int8 layer's input overflows its calibrated
range, and what the loss would be if the rows that overflow were not clipped. Dev data only:
the dev text, the model's own text drawn with a calibration seed no recipe calibrates on, and a
dev *code* text made of this project's own sources (no evaluation text in assets/eval/ is read).

    python tests/bench/static_overflow_dev.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --widen "down_proj=1.5;down_proj=2"

The default static recipe runs once (`run_auto`, seed-0 calibration). Printed, as JSON lines:
the perplexity change on the three texts through the int8 kernels; the layers whose inputs
overflow most often on the code text (rows over the range, and the largest ratio); the tokens
at which they overflow by more than 2x; then each variant, which replaces the int8 layers'
forward by float32 products of the same int8 values: static as it is, static with each
overflowing row quantized with its own per-token scale instead of clipped (what no export
format can carry: a bound on what better ranges could buy), and static with the ranges of the
layers matching a pattern widened by a factor (--widen). Results are in docs/quantization.md
("Rows clipped at the range, on code")."""

from __future__ import annotations

import argparse
import collections
import copy
import json
import re
from pathlib import Path

import torch
from npu_console.engine.kernels import qmath

ROOT = Path(__file__).resolve().parents[2]
# this project's own code: technical text no recipe choice looked at, and not the evaluation's
CODE_SOURCES = ("engine/quant/gptq.py", "engine/quant/search.py", "engine/runtime/scheduler.py")


def code_text() -> str:
    return "\n\n".join((ROOT / p).read_text(encoding="utf-8") for p in CODE_SOURCES)


def code_perplexity(tok):
    """Perplexity on the dev code text (CODE_SOURCES), llama.cpp's chunks at ctx 512."""
    from npu_console.engine.quant import eval_methods as em

    code = code_text()

    def ppl(model) -> float:
        with torch.inference_mode():
            return em.evaluate_texts(model, tok, [code], "chunks", 512, whole=code).perplexity
    return ppl


def fake_forward(mod, step: torch.Tensor, per_token_overflow: bool):
    """mod's product in float32 on its own int8 weights, activations rounded to the static grid
    of `step`; with per_token_overflow, a row whose largest |x| exceeds the range takes its own
    per-token step instead of being clipped."""
    w = qmath.dequantize_weight(mod.plain_weight(), mod.plain_scale()).float()

    def forward(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        st = step.expand(*xf.shape[:-1], 1)
        if per_token_overflow:
            own = xf.abs().amax(-1, keepdim=True).clamp_min(1e-8) / qmath.QMAX
            st = torch.where(own > step, own, st)
        q = torch.clamp(torch.round(xf / st), -qmath.QMAX, qmath.QMAX)
        y = (q * st) @ w.t()
        return (y if mod.bias is None else y + mod.bias).to(x.dtype)
    return forward


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--widen", default="", help="PATTERN=FACTOR;...: ranges widened by FACTOR "
                                                "for the layers whose name matches PATTERN")
    ap.add_argument("--own-text-seed", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from npu_console.engine.quant.auto import run_auto
    from npu_console.engine.quant.qlinear import QuantLinear
    from npu_console.engine.quant.workflow import QuantizeRequest
    from static_dev import dev_data  # beside this script

    d = dev_data(args.model, "w8a8-static", args.own_text_seed)
    tok = d.loaded.tokenizer
    code_ppl = code_perplexity(tok)

    base = {"dev": d.base_dev, "own": d.base_own, "code": code_ppl(d.loaded.model)}
    print(json.dumps({"float": base}), flush=True)
    cfg = QuantizeRequest(model_dir="", out_dir=None, method="w8a8-static").config()
    model = run_auto(copy.deepcopy(d.loaded.model), tok, cfg, d.samples, d.source).model
    layers = {n: m for n, m in model.named_modules()
              if isinstance(m, QuantLinear) and m.method == "w8a8-static"}

    def report(variant: str) -> None:
        got = {"dev": d.dev(model), "own": d.own(model), "code": code_ppl(model)}
        print(json.dumps({"variant": variant, **{k: round(100 * (got[k] / base[k] - 1), 3)
                                                  for k in got}}), flush=True)

    report("int8 kernels")

    # overflow on the code text: rows, rows over the range, the largest ratio; the tokens
    rows: dict[str, list] = collections.defaultdict(lambda: [0, 0, 0.0])
    tokens: collections.Counter = collections.Counter()
    chunk_ids: list[int] = []

    def hook_for(name: str, mod):
        bound = float(mod.input_scale) * qmath.QMAX

        def hook(_mod, inputs):
            x = inputs[0].detach().float().reshape(-1, inputs[0].shape[-1])
            ratio = x.abs().amax(-1) / bound
            r = rows[name]
            r[0] += x.shape[0]
            r[1] += int((ratio > 1).sum())
            r[2] = max(r[2], float(ratio.max()))
            for i in torch.nonzero(ratio > 2).flatten().tolist():
                tokens[chunk_ids[i]] += 1
        return hook

    handles = [m.register_forward_pre_hook(hook_for(n, m)) for n, m in layers.items()]
    ids = tok(code_text(), return_tensors="pt").input_ids[0]
    with torch.inference_mode():
        for s in range(0, len(ids) - 1, 512):
            chunk_ids[:] = ids[s:s + 512].tolist()
            model(ids[s:s + 512][None])
    for h in handles:
        h.remove()
    worst = sorted(rows.items(), key=lambda kv: -kv[1][1])[:12]
    print(json.dumps({"overflow_on_code": [{"layer": n, "rows": r, "over": o,
                                            "max_ratio": round(mx, 2)}
                                           for n, (r, o, mx) in worst]}), flush=True)
    print(json.dumps({"tokens_over_2x": [(tok.decode([t]), c)
                                         for t, c in tokens.most_common(12)]}), flush=True)

    steps = {n: m.input_scale.float().clone() for n, m in layers.items()}
    for variant, per_token in (("float32 products, static", False),
                               ("float32 products, overflowing rows per token", True)):
        for n, m in layers.items():
            m.forward = fake_forward(m, steps[n], per_token)
        report(variant)
    for spec in filter(None, args.widen.split(";")):
        pattern, factor = spec.rsplit("=", 1)
        for n, m in layers.items():
            f = float(factor) if re.search(pattern, n) else 1.0
            m.forward = fake_forward(m, steps[n] * f, False)
        report(f"float32 products, {pattern} ranges x{float(factor):g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
