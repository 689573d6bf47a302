"""Routed experts unrolled into one nn.Linear per expert and projection (engine.models.experts),
so that INT8 reaches them: the unrolled model computes what transformers' 3-D tables compute,
the weights are views (no copy), the names are the hub's, and an INT8 model with int8 experts
survives each export format and its load bit for bit."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.models.experts import LinearExperts, expert_tables, unroll_experts
from support.models import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

MOE = ["qwen2_moe", "qwen3_moe"]


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits[0]


@pytest.mark.parametrize("family", MOE)
def test_unrolled_experts_compute_what_the_tables_compute(family):
    model = tiny(family).model
    ids = torch.randint(3, 295, (1, 23), generator=torch.Generator().manual_seed(2))
    want = _logits(model, ids)
    table = model.model.layers[0].mlp.experts.down_proj
    assert unroll_experts(model) == 2
    assert unroll_experts(model) == 0  # idempotent
    experts = model.model.layers[0].mlp.experts
    assert isinstance(experts, LinearExperts) and len(experts) == 4
    # views of the tables, not copies
    assert experts[3].down_proj.weight.data_ptr() == table[3].data_ptr()
    names = set(model.state_dict())
    assert {"model.layers.1.mlp.experts.3.gate_proj.weight",
            "model.layers.1.mlp.experts.3.up_proj.weight",
            "model.layers.1.mlp.experts.3.down_proj.weight"} <= names
    got = _logits(model, ids)
    assert (got - want).abs().max() < 1e-5


def test_a_layout_it_does_not_know_is_left_alone():
    experts = tiny("qwen2_moe").model.model.layers[0].mlp.experts
    assert expert_tables(experts) is not None
    experts.has_bias = True  # e.g. GPT-OSS: biased experts, another forward
    assert expert_tables(experts) is None


@pytest.mark.parametrize("method", ["w8a16", "w8a8-dynamic"])
@pytest.mark.parametrize("family", MOE)
def test_int8_experts_survive_export_and_load(tmp_path, family, method):
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.config import QuantConfig
    from npu_console.engine.quant.io import export, load_quantized_model
    from npu_console.engine.quant.qlinear import QuantLinear

    model = tiny(family).model
    ids = torch.randint(3, 295, (1, 19), generator=torch.Generator().manual_seed(5))
    want = _logits(model, ids)
    info = quantize_model(model, QuantConfig(method=method))
    experts = [n for n in info.quantized if ".mlp.experts." in n]
    assert len(experts) == 2 * 4 * 3
    assert all(isinstance(model.get_submodule(n), QuantLinear) for n in experts)
    got = _logits(model, ids)
    # int8 error, not a different model: same greedy tokens where the float margin is clear
    top2 = want.topk(2, -1).values
    clear = (top2[:, 0] - top2[:, 1]) > 0.05
    assert clear.any()
    assert (got.argmax(-1) == want.argmax(-1))[clear].all()
    # W8A8 also goes out as vLLM's compressed-tensors and MindIE's msmodelslim
    fmts = ["native"] + (["compressed-tensors", "msmodelslim"] if method == "w8a8-dynamic"
                         else [])
    for fmt in fmts:
        export(model, tmp_path / fmt, fmt=fmt)
        back = load_quantized_model(tmp_path / fmt)
        assert isinstance(back.model.layers[1].mlp.experts[2].up_proj, QuantLinear), fmt
        assert torch.equal(_logits(back, ids), got), fmt


def test_static_w8a8_keeps_an_expert_no_calibration_token_chose_float():
    """Static W8A8 needs an input range per layer: a routed expert that calibration never
    reached stays float (and says so in `skipped`); any other layer without data is an error."""
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.calib import collect_stats
    from npu_console.engine.quant.config import QuantConfig, QuantError, select_layers
    from npu_console.engine.quant.qlinear import QuantLinear

    cfg = QuantConfig(method="w8a8-static")
    model = tiny("qwen2_moe").model
    unroll_experts(model)
    samples = [torch.randint(3, 295, (1, 40), generator=torch.Generator().manual_seed(s))
               for s in range(2)]
    names = select_layers(model, cfg).quantize
    stats = collect_stats(model, samples, names)
    assert all(n in stats for n in names)  # every expert was routed some rows here
    unrouted = "model.layers.1.mlp.experts.2.down_proj"
    del stats[unrouted]
    info = quantize_model(model, cfg, stats)
    assert unrouted in info.skipped and unrouted not in info.quantized
    assert isinstance(model.get_submodule(unrouted), torch.nn.Linear)
    assert isinstance(model.get_submodule("model.layers.1.mlp.experts.2.up_proj"), QuantLinear)

    model = tiny("qwen2_moe").model
    unroll_experts(model)
    stats = collect_stats(model, samples, names)
    del stats["model.layers.0.self_attn.o_proj"]
    with pytest.raises(QuantError, match="no calibration data reached"):
        quantize_model(model, cfg, stats)
