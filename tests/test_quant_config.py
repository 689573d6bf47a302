"""Layer selection, presets, skip patterns, calibration input handling."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from fakes.stories_text import load_float
from npu_console.engine.quant import calib
from npu_console.engine.quant.config import QuantConfig, QuantError, select_layers


@pytest.fixture(scope="module")
def model(stories_dir):
    return load_float(stories_dir)[0]


def test_presets_and_always_float_layers(model):
    every = select_layers(model, QuantConfig(preset="all")).quantize
    assert len(every) == 5 * 7 and not any("lm_head" in n or "embed" in n for n in every)
    attn = select_layers(model, QuantConfig(preset="attention")).quantize
    assert len(attn) == 5 * 4 and all(".self_attn." in n for n in attn)
    nodown = select_layers(model, QuantConfig(preset="no-down-proj"))
    assert len(nodown.quantize) == 5 * 6 and all("down_proj" in n for n in nodown.skipped)


def test_skip_patterns_fnmatch_and_regex(model):
    sel = select_layers(model, QuantConfig(skip=("model.layers.0.*", "re:layers\\.[34]\\.mlp")))
    assert not any(n.startswith("model.layers.0.") for n in sel.quantize)
    assert not any(".3.mlp" in n or ".4.mlp" in n for n in sel.quantize)
    assert "model.layers.3.self_attn.q_proj" in sel.quantize
    leaf = select_layers(model, QuantConfig(skip=("o_proj",)))
    assert not any(n.endswith("o_proj") for n in leaf.quantize)


@pytest.mark.parametrize("kwargs,msg", [
    ({"method": "w4a4"}, "unknown method"),
    ({"preset": "mlp"}, "unknown preset"),
    ({"smoothquant": 1.5}, r"\[0, 1\]"),
    ({"method": "w8a16", "smoothquant": 0.5}, "w8a8"),
    ({"method": "w8a8-dynamic", "group_size": 64}, "w8a16"),
    ({"skip": ("re:(",)}, "bad skip regex"),
])
def test_bad_options_are_one_line_errors(kwargs, msg):
    with pytest.raises(QuantError, match=msg) as exc:
        QuantConfig(**kwargs)
    assert "\n" not in str(exc.value)


def test_pattern_matching_nothing_is_an_error(model):
    with pytest.raises(QuantError, match="matches no layer"):
        select_layers(model, QuantConfig(skip=("*.dwon_proj",)))


def test_model_without_linear_layers_is_refused():
    with pytest.raises(QuantError, match="no linear layers"):
        select_layers(torch.nn.Sequential(torch.nn.Embedding(4, 4)), QuantConfig())


def test_read_texts_txt_jsonl_and_errors(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("first para\nline two\n\nsecond para\n\n\n", encoding="utf-8")
    assert calib.read_texts(txt) == ["first para\nline two", "second para"]
    jl = tmp_path / "b.jsonl"
    jl.write_text(json.dumps({"text": "hello"}) + "\n\n" + json.dumps({"text": "world"}) + "\n")
    assert calib.read_texts(jl) == ["hello", "world"]
    (tmp_path / "empty.txt").write_text("  \n\n")
    with pytest.raises(QuantError, match="contains no text"):
        calib.read_texts(tmp_path / "empty.txt")
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    with pytest.raises(QuantError, match=r"bad.jsonl:1: .*\"text\""):
        calib.read_texts(tmp_path / "bad.jsonl")
    with pytest.raises(QuantError, match="not found"):
        calib.read_texts(tmp_path / "missing.txt")


def test_samples_stats_progress_and_cancel(stories_dir):
    model, tok = load_float(stories_dir)
    texts = ["Once upon a time there was a little cat. " * 20, "The dog ran to the park. " * 20]
    samples = calib.build_samples(tok, texts, n_samples=4, seq_len=32)
    assert len(samples) == 4 and all(s.shape == (1, 32) for s in samples)
    assert len(calib.build_samples(tok, ["tiny text"], 8, 64)) == 1  # shorter than one window
    names = select_layers(model, QuantConfig()).quantize
    seen = []
    stats = calib.collect_stats(model, samples, names, progress=lambda *a: seen.append(a))
    assert seen[-1] == ("calibrate", 4, 4)
    st = stats["model.layers.0.self_attn.q_proj"]
    assert st.absmax.shape == (64,) and st.tensor_absmax > 0
    assert stats["model.layers.0.mlp.down_proj"].absmax.shape == (172,)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(calib.Cancelled):
        calib.collect_stats(model, samples, names, cancel=cancel)
    assert not any(m._forward_pre_hooks for m in model.modules())  # hooks removed
