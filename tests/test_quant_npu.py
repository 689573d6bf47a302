"""The Ascend path, driven through a stand-in torch_npu that enforces the documented op contracts
(tests/fakes/torch_npu_standin.py) and computes their math on the CPU."""

from __future__ import annotations

import pytest
import torch
from fakes import torch_npu_standin
from npu_console.engine.kernels import npu as npu_kernels
from npu_console.engine.quant.config import QuantError
from npu_console.engine.quant.qlinear import QuantLinear


@pytest.fixture
def standin():
    def make(soc="Ascend910B3"):
        return torch_npu_standin.install(soc)
    yield make
    torch_npu_standin.uninstall()


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _module(method, dtype, k=256, n=192, bias=True, group=0):
    torch.manual_seed(1)
    lin = torch.nn.Linear(k, n, bias=bias)
    x = torch.randn(3, 5, k)
    x[..., :3] *= 10
    s_in = x.abs().max().item() / 127 if method == "w8a8-static" else None
    q = QuantLinear.from_linear(lin, method, group_size=group, input_scale=s_in).to(dtype)
    return q, x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("method,ops", [
    ("w8a16", ["npu_weight_quant_batchmatmul"]),
    ("w8a8-dynamic", ["npu_dynamic_quant", "npu_quant_matmul"]),
    ("w8a8-static", ["npu_quantize", "npu_quant_matmul"]),
])
def test_npu_ops_match_reference(standin, dtype, method, ops):
    fake = standin()
    q, x = _module(method, dtype)
    q.backend = "npu"
    y = q(x)
    assert y.shape == (3, 5, 192) and y.dtype == dtype
    assert [c for c in fake.calls if c != "npu_trans_quant_param"][-len(ops):] == ops
    if method == "w8a8-static" and dtype == torch.float16:
        assert "npu_trans_quant_param" in fake.calls  # int64 deq scale for fp16 output
    q.backend = "reference"
    # static: the documented op takes 1/scale in the activation dtype, hence bf16 rounding
    assert _rel(y, q(x)) < (0.03 if method == "w8a8-static" else 0.01)


def test_npu_per_group_w8a16(standin):
    standin()
    q, x = _module("w8a16", torch.float16, group=64)
    q.backend = "npu"
    y = q(x)
    q.backend = "reference"
    assert _rel(y, q(x)) < 0.01


def test_310p_rejects_dynamic_and_bf16(standin):
    standin("Ascend310P3")
    q, x = _module("w8a8-dynamic", torch.float16)
    q.backend = "npu"
    with pytest.raises(QuantError, match="310P"):
        q(x)
    q, x = _module("w8a16", torch.bfloat16)
    q.backend = "npu"
    with pytest.raises(QuantError, match="float16"):
        q(x)
    # the safe 310P paths work
    for method in ("w8a16", "w8a8-static"):
        q, x = _module(method, torch.float16)
        q.backend = "npu"
        ref = q.forward(x)
        q.backend = "reference"
        assert _rel(ref, q(x)) < 0.03


def test_dimension_limit_is_reported():
    with pytest.raises(QuantError, match="65535"):
        npu_kernels.check_supported("w8a16", torch.bfloat16, 896, 151936, soc="Ascend910B3")


def test_standin_enforces_documented_contracts(standin):
    npu = standin()
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    w = torch.randint(-127, 128, (32, 64), dtype=torch.int8)
    s = torch.rand(32, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="does not match"):
        npu.npu_weight_quant_batchmatmul(x, w, s)  # (N, K) instead of (K, N)
    with pytest.raises(RuntimeError, match="bias must be"):
        npu.npu_weight_quant_batchmatmul(x, w.t(), s, bias=torch.zeros(32, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="pertoken_scale"):
        npu.npu_quant_matmul(w[:4], w.t().contiguous(), torch.ones(32),
                             pertoken_scale=torch.ones(3), output_dtype=torch.bfloat16)
    deq = npu.npu_trans_quant_param(torch.tensor([0.0123, 1.5]))
    assert deq.dtype == torch.int64 and bool(((deq >> 46) & 1).all())
    assert torch.allclose(torch_npu_standin._decode_scale(deq).float(),
                          torch.tensor([0.0123, 1.5]), rtol=1e-3)


def test_npu_serving_copy_survives_releasing_the_plain_weight(standin):
    standin()
    q, x = _module("w8a8-dynamic", torch.bfloat16, bias=False)
    q.backend = "npu"
    before = q(x)
    q.release_plain_weight()
    assert q.weight.numel() == 0
    assert torch.equal(q(x), before)
