"""Two questions about static W8A8, on dev data only (the dev text and the model's own text
drawn with a calibration seed no recipe calibrates on; no evaluation text is read):

1. Would one fixed activation scale per block of 32 inputs (each block's calibrated max,
   optionally widened) do better than static's one scale per tensor?
2. How much does the measurement move with float rounding alone? The same quantized model is
   scored through the int8 kernels, then with its int8 products computed in float32 and in
   float64 (activations rounded to the same int8 grid, weights dequantized).

    python tests/bench/static_blocks_dev.py --model ../shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf

The default static recipe runs once (`run_auto`); the block scales are read with forward
hooks on its int8 layers over the same calibration samples, and each variant replaces the
int8 layers' forward. One JSON line per variant: the perplexity change on both texts.
Results are in docs/quantization.md ("Static scales per block, and float rounding")."""

from __future__ import annotations

import argparse
import copy
import json

import torch
from npu_console.engine.kernels import qmath


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--widen", default="1,1.5,2,3", help="factors on the calibrated block maxima")
    ap.add_argument("--own-text-seed", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from npu_console.engine.quant.auto import run_auto
    from npu_console.engine.quant.qlinear import QuantLinear
    from npu_console.engine.quant.workflow import QuantizeRequest
    from static_dev import dev_data  # beside this script

    d = dev_data(args.model, "w8a8-static", args.own_text_seed)
    loaded, tok, dev, own, samples, source = (d.loaded, d.loaded.tokenizer, d.dev, d.own,
                                              d.samples, d.source)
    base = {"dev": d.base_dev, "own": d.base_own}
    cfg = QuantizeRequest(model_dir="", out_dir=None, method="w8a8-static").config()
    model = run_auto(copy.deepcopy(loaded.model), tok, cfg, samples, source).model

    def report(variant: str) -> None:
        got = {"dev": dev(model), "own": own(model)}
        print(json.dumps({"variant": variant, **{k: round(100 * (got[k] / base[k] - 1), 3)
                                                  for k in got}}), flush=True)

    layers = {n: m for n, m in model.named_modules()
              if isinstance(m, QuantLinear) and m.method == "w8a8-static"}
    block_max: dict[str, torch.Tensor] = {}

    def hook_for(name: str):
        def hook(_mod, inputs):
            x = inputs[0].detach().float()
            b = x.reshape(-1, x.shape[-1] // qmath.ACT_BLOCK, qmath.ACT_BLOCK).abs().amax(-1).amax(0)
            block_max[name] = torch.maximum(block_max.get(name, b), b)
        return hook

    handles = [m.register_forward_pre_hook(hook_for(n)) for n, m in layers.items()]
    with torch.inference_mode():
        for s in samples:
            model(s.view(1, -1))
    for h in handles:
        h.remove()

    def fake(mod, step: torch.Tensor, dtype: torch.dtype):
        w = qmath.dequantize_weight(mod.plain_weight(), mod.plain_scale()).to(dtype)
        step = step.to(dtype)

        def forward(x: torch.Tensor) -> torch.Tensor:
            q = torch.clamp(torch.round(x.to(dtype) / step), -qmath.QMAX, qmath.QMAX)
            return ((q * step) @ w.t()).to(x.dtype)
        return forward

    report("per tensor, int8 kernels")
    for dtype in (torch.float32, torch.float64):
        for m in layers.values():
            m.forward = fake(m, m.input_scale.float(), dtype)
        report(f"per tensor, {str(dtype).removeprefix('torch.')} products")
    for f in map(float, args.widen.split(",")):
        for n, m in layers.items():
            step = (block_max[n] * f).clamp_min(1e-8) / qmath.QMAX
            m.forward = fake(m, step.repeat_interleave(qmath.ACT_BLOCK), torch.float32)
        report(f"per block of {qmath.ACT_BLOCK}, calibrated max x{f:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
