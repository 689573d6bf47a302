"""QuantLinear's W8A16 / W8A8 kernels on a device against the exact integer reference backend
(float64, on the CPU), over shapes that take every branch of the CUDA backend: up to 16 rows
(torch._int_mm needs more: padded), more rows, K not a multiple of 8 (the dequantizing
fallback), with and without bias, float32 and bfloat16; plus an int8 lm_head of the Qwen2.5-0.5B
vocabulary with its tied int8 embedding (never run on CUDA before).

    python tests/device/gpu_kernels.py --device cuda     # JSON on stdout; exit 1 if one is off
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from npu_console.engine.quant.qlinear import QuantEmbedding, QuantLinear

METHODS = ("w8a16", "w8a8-dynamic", "w8a8-static")
# rows, K, N, bias
SHAPES = ((1, 256, 192, True), (7, 172, 192, False), (64, 896, 4864, True),
          (33, 4864, 896, False))
DTYPES = ("float32", "bfloat16")
HEAD = (8, 896, 151936)  # Qwen2.5-0.5B's tied vocabulary
# the CPU tests' bounds (tests/test_quant_kernels.py): W8A8 is exact integer math and one float
# multiply; W8A16 multiplies by dequantized weights (1e-4 for fp32 activations, 0.01 for bf16);
# bf16 outputs carry 8 bits of mantissa
TOLERANCE = {("w8a8", "float32"): 1e-5, ("w8a16", "float32"): 1e-4,
             ("w8a8", "bfloat16"): 0.01, ("w8a16", "bfloat16"): 0.01}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def compare(method: str, m: int, k: int, n: int, bias: bool, dtype: str, device: str,
            seed: int = 0) -> dict:
    """One layer on `device` against the reference backend on the CPU, same int8 weights."""
    torch.manual_seed(seed)
    lin = torch.nn.Linear(k, n, bias=bias)
    x = torch.randn(m, k)
    x[:, :4] *= 12  # a few outlier channels, as real activations have
    s_in = x.abs().max().item() / 127 if method == "w8a8-static" else None
    q = QuantLinear.from_linear(lin, method, input_scale=s_in).to(getattr(torch, dtype))
    xd = x.to(q.float_dtype)
    ref_mod = copy.deepcopy(q)
    ref_mod.backend = "reference"
    with torch.inference_mode():
        ref = ref_mod(xd)
        dev_mod = q.to(device)
        y = dev_mod(xd.to(device))
        _sync(device)
    tol = TOLERANCE[("w8a16" if method == "w8a16" else "w8a8", dtype)]
    rel = _rel(y, ref)
    return {"method": method, "rows": m, "k": k, "n": n, "bias": bias, "dtype": dtype,
            "out_dtype": str(y.dtype).replace("torch.", ""), "device": str(y.device),
            "rel_err": rel, "tolerance": tol,
            "ok": bool(rel < tol and y.dtype == xd.dtype and y.device.type == device[:4])}


def head_case(device: str, dtype: str = "bfloat16") -> dict:
    """An int8 (w8a16) lm_head of 151,936 rows and the embedding tied to it, on `device`."""
    m, k, n = HEAD
    out = compare("w8a16", m, k, n, False, dtype, device)
    torch.manual_seed(1)
    head = QuantLinear.from_linear(torch.nn.Linear(k, n, bias=False), "w8a16")
    head = head.to(getattr(torch, dtype))
    emb = QuantEmbedding.tied(head)
    ids = torch.randint(0, n, (4, 9))
    with torch.inference_mode():
        want = emb(ids)
        head.to(device)
        got = emb(ids.to(device))
        _sync(device)
    same = bool(torch.equal(got.cpu(), want) and got.device.type == device[:4])
    return {**out, "case": "int8 lm_head + tied int8 embedding", "embedding_exact": same,
            "ok": out["ok"] and same}


def run(device: str) -> dict:
    cases = [compare(meth, m, k, n, bias, dt, device)
             for meth in METHODS for (m, k, n, bias) in SHAPES for dt in DTYPES]
    cases.append(head_case(device))
    bad = [c for c in cases if not c["ok"]]
    return {"ok": not bad, "device": device, "cases": cases,
            "reason": f"{len(bad)} of {len(cases)} cases off the reference" if bad else None}



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    res = run(args.device)
    print(json.dumps(res, indent=2))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
