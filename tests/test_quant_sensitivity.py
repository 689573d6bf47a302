"""Per-layer sensitivity ranking and the skip-list recommendation, on the real stories260K."""

from __future__ import annotations

import pytest
import torch
from fakes.stories_text import load_float, sampled_ids
from npu_console.engine.quant import calib
from npu_console.engine.quant.config import QuantConfig, select_layers
from npu_console.engine.quant.evaluate import perplexity
from npu_console.engine.quant.sensitivity import layer_sensitivity, recommend_skip
from npu_console.engine.quant.smooth import find_groups, smooth_model


@pytest.fixture(scope="module")
def data(stories_dir):
    ids = sampled_ids(str(stories_dir), 2, 4, 64)
    return [r.unsqueeze(0) for r in ids]


def test_smoothing_preserves_the_float_function(stories_dir, data):
    model, _ = load_float(stories_dir)
    cfg = QuantConfig(method="w8a8-static", smoothquant=0.5)
    names = select_layers(model, cfg).quantize
    stats = calib.collect_stats(model, data, names)
    with torch.inference_mode():
        before = model(input_ids=data[0]).logits
    groups = smooth_model(model, stats, 0.5, set(names))
    # stories260K has GQA (8 heads, 4 kv heads): one global alpha leaves v->o alone
    kinds = {g.producer.rsplit(".", 1)[-1] for g in groups}
    assert kinds == {"input_layernorm", "post_attention_layernorm", "up_proj"}
    assert len(groups) == 15 == len(find_groups(model))
    with torch.inference_mode():
        after = model(input_ids=data[0]).logits
    assert torch.allclose(before, after, atol=1e-4)
    # stats now describe the smoothed inputs: what calibration would measure again
    again = calib.collect_stats(model, data[:], names)
    q = "model.layers.1.self_attn.q_proj"
    assert torch.allclose(stats[q].absmax, again[q].absmax, rtol=1e-4, atol=1e-6)
    # per-producer alphas (a search's choice) may fold v->o under GQA as well: one factor
    # per value channel, shared by the two query heads that read it, still exact
    tied = [g for g in find_groups(model, gqa=True) if g.repeat > 1]
    assert len(tied) == 5 and all(g.producer.endswith("v_proj") for g in tied)
    done = smooth_model(model, again, {g.producer: 0.8 for g in tied}, set(names))
    assert [g.producer for g in done] == [g.producer for g in tied]
    with torch.inference_mode():
        folded = model(input_ids=data[0]).logits
    assert torch.allclose(before, folded, atol=1e-4)
    o = "model.layers.1.self_attn.o_proj"
    fresh = calib.collect_stats(model, data, names)[o].absmax
    assert torch.allclose(again[o].absmax, fresh, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_sensitivity_ranking_and_recommendation(stories_dir, data):
    model, _ = load_float(stories_dir)
    cfg = QuantConfig(method="w8a8-static")
    stats = calib.collect_stats(model, data, select_layers(model, cfg).quantize)
    seen = []
    ranking = layer_sensitivity(model, cfg, data[:2], stats, progress=lambda *a: seen.append(a))
    assert len(ranking) == 35 and seen[-1] == ("sensitivity", 35, 35)
    kls = [r.kl for r in ranking]
    assert kls == sorted(kls, reverse=True) and kls[0] > 0 and kls[0] > 3 * kls[-1]
    ids = sampled_ids(str(stories_dir), 1, 2, 128).reshape(-1)
    rec = recommend_skip(model, cfg, ranking, ids, budget_pct=0.5, stats=stats, window=256)
    assert rec.skip == [r.name for r in ranking[:len(rec.skip)]]  # most sensitive first
    if rec.met:
        assert rec.delta_pct <= 0.5
    # the recommendation is what you get when you skip those layers for real
    from npu_console.engine.quant.apply import quantize_model

    q, _ = load_float(stories_dir)
    quantize_model(q, QuantConfig(method="w8a8-static", skip=tuple(rec.skip)), stats)
    assert perplexity(q, ids, window=256).perplexity == pytest.approx(rec.quant_ppl, rel=1e-5)
    assert not hasattr(model, "npu_quant")
