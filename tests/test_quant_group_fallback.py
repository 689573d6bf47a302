"""Grouped W8A16 on layers whose input size is not a multiple of the group: they fall back to
one scale per output channel (and the result says so) instead of refusing the model."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.quant import io
from npu_console.engine.quant.apply import quant_modules, quantize_model
from npu_console.engine.quant.config import QuantConfig
from npu_console.engine.quant.workflow import QuantizeRequest, run_workflow


@pytest.fixture()
def demo(demo_model_dir):
    from npu_console.engine.models.loader import load_model

    return load_model(demo_model_dir)


def test_layers_off_the_group_get_per_channel_scales_and_are_listed(demo, demo_model_dir,
                                                                    tmp_path):
    model = demo.model
    downs = [n for n, m in model.named_modules()
             if n.endswith("mlp.down_proj") and isinstance(m, torch.nn.Linear)]
    assert downs and all(model.get_submodule(n).in_features == 688 for n in downs)
    ref = {n: model.get_submodule(n).weight.detach().clone() for n in downs}
    info = quantize_model(model, QuantConfig(method="w8a16", group_size=32))
    mods = quant_modules(model)
    assert sorted(info.group_fallback) == sorted(downs)
    assert "688 is not a multiple of group size 32" in info.group_fallback[downs[0]]
    for name, m in mods.items():
        assert m.group_size == (0 if name in downs else 32), name
    assert set(info.quantized) == set(mods)  # nothing left float
    d = mods[downs[0]]
    assert d.weight_scale.numel() == d.out_features  # one scale per output channel
    err = (d.dequantized_weight() - ref[downs[0]]).abs().max()
    assert err <= ref[downs[0]].abs().amax(1).max() / 127 * 0.51
    out = io.export(model, tmp_path / "q", "native", source_dir=demo_model_dir)
    back = io.load_quantized(out)
    assert back.model.npu_quant.group_fallback == info.group_fallback
    for name, m in quant_modules(back.model).items():
        assert m.group_size == mods[name].group_size
        assert torch.equal(m.plain_weight(), mods[name].plain_weight())


def test_a_model_whose_layers_all_fit_the_group_has_no_fallback(demo):
    info = quantize_model(demo.model, QuantConfig(method="w8a16", group_size=32,
                                                  skip=("*.down_proj",)))
    assert info.group_fallback == {}
    assert {m.group_size for m in quant_modules(demo.model).values()} == {32}


def test_quantize_json_names_the_fallback_layers(demo_model_dir, tmp_path):
    res = run_workflow(QuantizeRequest(str(demo_model_dir), str(tmp_path / "q"),
                                       method="w8a16", group_size=64, recipe="plain"))
    d = res.to_dict()
    assert d["group_fallback"], d
    assert all("not a multiple of group size 64" in why for why in d["group_fallback"].values())
    # hidden 256 is a multiple of 64, the MLP's 688 is not: exactly the down_proj layers
    assert sorted(d["group_fallback"]) == sorted(n for n in d["quantized"]
                                                 if n.endswith("down_proj"))
