"""Exports (native, compressed-tensors, msModelSlim): layout, atomic writes, and loading back."""

from __future__ import annotations

import json

import pytest
import torch
from fakes.stories_text import load_float, sampled_ids
from npu_console.engine.quant import calib, io
from npu_console.engine.quant.apply import quantize_model
from npu_console.engine.quant.config import QuantConfig, QuantError, select_layers
from safetensors.torch import load_file


def _quantized(stories_dir, method, alpha=None, skip=()):
    model, _ = load_float(stories_dir)
    cfg = QuantConfig(method=method, smoothquant=alpha, skip=skip)
    stats = None
    if cfg.needs_calibration:
        samples = [r.unsqueeze(0) for r in sampled_ids(str(stories_dir), 2, 4, 64)]
        stats = calib.collect_stats(model, samples, select_layers(model, cfg).quantize)
    quantize_model(model, cfg, stats)
    return model


@pytest.fixture(scope="module")
def probe_ids(stories_dir):
    return sampled_ids(str(stories_dir), 3, 2, 48)


def _same_outputs(a, b, ids):
    with torch.inference_mode():
        la = a(input_ids=ids).logits
        lb = b(input_ids=ids).logits
    assert torch.allclose(la, lb, atol=1e-4), (la - lb).abs().max()


@pytest.mark.parametrize("method,fmt,alpha", [
    ("w8a16", "native", None),
    ("w8a8-dynamic", "compressed-tensors", None),
    ("w8a8-static", "msmodelslim", 0.5),
    ("w8a8-static", "compressed-tensors", 0.5),
    ("w8a8-dynamic", "msmodelslim", None),
    ("w8a16", "msmodelslim", None),
])
def test_round_trip_same_outputs(stories_dir, tmp_path, probe_ids, method, fmt, alpha):
    model = _quantized(stories_dir, method, alpha, skip=("*.down_proj",))
    out = io.export(model, tmp_path / "q", fmt, source_dir=stories_dir)
    assert io.detect_format(out) == fmt
    assert (out / "tokenizer.json").is_file() or (out / "tokenizer.model").is_file()
    back = io.load_quantized_model(out)
    assert back.npu_quant.method == method
    assert sorted(back.npu_quant.quantized) == sorted(model.npu_quant.quantized)
    _same_outputs(model, back, probe_ids)


def test_compressed_tensors_layout(stories_dir, tmp_path):
    model = _quantized(stories_dir, "w8a8-dynamic", skip=("model.layers.0.mlp.*",))
    out = io.export(model, tmp_path / "ct", "compressed-tensors")
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "int-quantized"
    group = qc["config_groups"]["group_0"]
    assert group["weights"]["strategy"] == "channel" and group["weights"]["symmetric"] is True
    assert group["input_activations"] == {**group["input_activations"], "strategy": "token",
                                          "dynamic": True, "num_bits": 8}
    assert "lm_head" in qc["ignore"] and "model.layers.0.mlp.up_proj" in qc["ignore"]
    t = load_file(str(out / "model.safetensors"))
    assert t["model.layers.1.self_attn.q_proj.weight"].dtype == torch.int8
    assert t["model.layers.1.self_attn.q_proj.weight_scale"].shape == (64, 1)
    assert "model.layers.1.self_attn.q_proj.input_scale" not in t  # dynamic: no input scale
    assert t["model.layers.0.mlp.up_proj.weight"].dtype == torch.float32


def test_msmodelslim_layout(stories_dir, tmp_path):
    model = _quantized(stories_dir, "w8a8-static", alpha=0.5, skip=("*.down_proj",))
    out = io.export(model, tmp_path / "ms", "msmodelslim")
    desc = json.loads((out / "quant_model_description.json").read_text())
    t = load_file(str(out / "quant_model_weights.safetensors"))
    assert desc["model_quant_type"] == "W8A8" and desc["version"] == "1.0.0"
    assert set(desc) - {"model_quant_type", "version"} == set(t)  # every tensor typed
    p = "model.layers.2.self_attn.k_proj"
    assert desc[f"{p}.weight"] == "W8A8" and desc["model.layers.2.mlp.down_proj.weight"] == "FLOAT"
    assert t[f"{p}.weight"].dtype == torch.int8 and t[f"{p}.weight"].shape == (32, 64)
    assert t[f"{p}.input_scale"].shape == (1,) and t[f"{p}.input_offset"].shape == (1,)
    assert t[f"{p}.quant_bias"].dtype == torch.int32 and t[f"{p}.quant_bias"].shape == (32,)
    # fp32 model: deq_scale is the fp32 bit pattern widened to int64 (msModelSlim's encoding)
    deq = t[f"{p}.deq_scale"]
    assert deq.dtype == torch.int64
    expect = t[f"{p}.input_scale"] * t[f"{p}.weight_scale"].reshape(-1)
    assert torch.equal(deq.to(torch.int32).view(torch.float32), expect)
    assert "quantization_config" not in json.loads((out / "config.json").read_text())


def test_export_is_atomic(stories_dir, tmp_path, monkeypatch):
    model = _quantized(stories_dir, "w8a8-dynamic")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(io, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        io.export(model, tmp_path / "out", "native")
    assert list(tmp_path.iterdir()) == []  # no folder, no partial temp dir
    monkeypatch.undo()
    io.export(model, tmp_path / "out", "native")
    with pytest.raises(QuantError, match="already exists"):
        io.export(model, tmp_path / "out", "native")
    io.export(model, tmp_path / "out", "msmodelslim", overwrite=True)
    assert io.detect_format(tmp_path / "out") == "msmodelslim"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_export_refusals(stories_dir, tmp_path):
    float_model, _ = load_float(stories_dir)
    with pytest.raises(QuantError, match="not quantized"):
        io.export(float_model, tmp_path / "x")
    w8a16 = _quantized(stories_dir, "w8a16")
    with pytest.raises(QuantError, match="compressed-tensors"):
        io.export(w8a16, tmp_path / "x", "compressed-tensors")
    assert not (tmp_path / "x").exists()
