"""The searched ("auto") recipe: error-compensating rounding, the per-input search, the model's
own calibration text, mixed precision to a budget, and bit-exact exports of its results."""

from __future__ import annotations

import pytest
import torch
from fakes.stories_text import load_float, sampled_ids
from npu_console.engine.kernels import qmath
from npu_console.engine.quant import gptq, io, mixed
from npu_console.engine.quant.auto import run_auto
from npu_console.engine.quant.config import QuantConfig
from npu_console.engine.quant.search import search_input


def _correlated_inputs(n=512, k=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 8, generator=g)
    return base @ torch.randn(8, k, generator=g) + 0.1 * torch.randn(n, k, generator=g)


def test_gptq_rounding_beats_nearest_on_the_calibration_inputs():
    x = _correlated_inputs()
    w = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    q, s = gptq.round_weight(w, x.t() @ x)
    qn, sn = qmath.quantize_weight(w)
    assert q.dtype == torch.int8 and torch.equal(s, sn)  # same scales: any reader loads it
    err = (x @ (qmath.dequantize_weight(q, s) - w).t()).pow(2).sum()
    err_nearest = (x @ (qmath.dequantize_weight(qn, sn) - w).t()).pow(2).sum()
    assert err < 0.5 * err_nearest


def test_search_smooths_an_outlier_channel_and_reports_the_gain():
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(2))
    x[:, 3] *= 60.0  # one outlier channel, as in real down_proj inputs
    w = torch.randn(48, 64, generator=torch.Generator().manual_seed(3))
    ch = search_input(x, x[:0], [w], x.abs().amax(0), "w8a8-dynamic", smoothable=True)
    assert ch.alpha is not None
    assert ch.error < 0.5 * ch.error_plain
    st = search_input(x, x[:0], [w], x.abs().amax(0), "w8a8-static", smoothable=False)
    assert st.alpha is None and 0 < st.clip <= 1.0


def test_self_calibration_is_seeded_and_cached(stories_dir, tmp_path, monkeypatch):
    from npu_console.engine.quant.selfcalib import self_calibration

    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path))
    model, tok = load_float(stories_dir)
    a = self_calibration(model, tok, n=3, new_tokens=12, model_dir=stories_dir)
    b = self_calibration(model, tok, n=3, new_tokens=12, model_dir=stories_dir)
    assert not a.cached and b.cached
    assert [s.tolist() for s in a.samples] == [s.tolist() for s in b.samples]
    assert all(s.shape[1] == p + 12 for s, p in zip(a.samples, a.prompt_lens))
    assert "self-generated" in a.description


def test_static_calibration_asks_for_code_too_under_its_own_cache_key(demo_model_dir, tmp_path,
                                                                      monkeypatch):
    """Static W8A8's self-calibration adds programming requests to the neutral ones; the other
    methods keep the neutral set and the cache keys their samples were stored under."""
    from npu_console.engine.models.loader import load_model
    from npu_console.engine.quant import selfcalib
    from npu_console.engine.quant.auto import self_prompts_for

    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path))
    static = self_prompts_for("w8a8-static")
    assert static[:len(selfcalib.PROMPTS)] == selfcalib.PROMPTS
    assert set(static) - set(selfcalib.PROMPTS) == set(selfcalib.CODE_PROMPTS)
    assert self_prompts_for("w8a16") == self_prompts_for("w8a8-dynamic") == selfcalib.PROMPTS
    key = selfcalib._cache_path  # the key is the contract with caches already stored
    assert key(demo_model_dir, 16, 8, 0) == key(demo_model_dir, 16, 8, 0, selfcalib.PROMPTS)
    assert key(demo_model_dir, 16, 8, 0, static) != key(demo_model_dir, 16, 8, 0)

    loaded = load_model(demo_model_dir, device="cpu", dtype="float32")
    starts = selfcalib._starts(loaded.tokenizer, 12, static)
    asked = [loaded.tokenizer.decode(s) for s in starts[1::2]]
    assert sum("Python program" in a for a in asked) == 1  # 6 chat slots over 6 requests
    assert sum("programming task" in a for a in asked) == 1
    a = selfcalib.self_calibration(loaded.model, loaded.tokenizer, 12, 6, model_dir=demo_model_dir,
                                   prompts=static)
    b = selfcalib.self_calibration(loaded.model, loaded.tokenizer, 12, 6, model_dir=demo_model_dir)
    assert not a.cached and not b.cached  # two keys, two draws
    assert "4 neutral and 2 programming prompts" in a.description
    assert "4 neutral prompts" in b.description
    assert [s.tolist() for s in a.samples] != [s.tolist() for s in b.samples]
    again = selfcalib.self_calibration(loaded.model, loaded.tokenizer, 12, 6,
                                       model_dir=demo_model_dir, prompts=static)
    assert again.cached and [s.tolist() for s in again.samples] == [s.tolist() for s in a.samples]


@pytest.fixture(scope="module")
def cal(stories_dir):
    return [r.unsqueeze(0) for r in sampled_ids(str(stories_dir), 2, 8, 64)]


@pytest.mark.parametrize("method,formats", [
    ("w8a8-dynamic", ("native", "compressed-tensors", "msmodelslim")),
    ("w8a8-static", ("native", "compressed-tensors", "msmodelslim")),
    ("w8a16", ("native", "msmodelslim")),
])
def test_auto_recipe_exports_load_back_bit_exactly(stories_dir, tmp_path, cal, method, formats):
    model, tok = load_float(stories_dir)
    res = run_auto(model, tok, QuantConfig(method=method), cal, "test samples")
    assert res.info.config["recipe"]["calibration"] == "test samples"
    assert 0.85 <= res.int8_weight_fraction <= 1.0
    probe = sampled_ids(str(stories_dir), 3, 2, 40)
    with torch.inference_mode():
        ref = model(input_ids=probe).logits
    for fmt in formats:
        out = io.export(model, tmp_path / fmt, fmt, source_dir=stories_dir)
        back = io.load_quantized_model(out)
        assert sorted(back.npu_quant.quantized) == sorted(model.npu_quant.quantized)
        with torch.inference_mode():
            got = back(input_ids=probe).logits
        assert torch.equal(ref, got), f"{fmt}: {(ref - got).abs().max()}"


def test_budget_keeps_layers_float_until_met_or_says_why(stories_dir, cal):
    model, tok = load_float(stories_dir)
    res = run_auto(model, tok, QuantConfig(method="w8a8-static"), cal, "test samples",
                   budget_pct=0.5)
    b = res.budget
    assert b is not None and b["evaluations"] >= 1
    if b["met"]:
        assert res.perplexity_change_pct <= 0.5 + 1e-9
    else:
        assert "still" in b["why"] and res.int8_weight_fraction >= mixed.MIN_INT8_FRACTION
    for name, why in res.kept_float.items():
        assert name in model.npu_quant.skipped and "budget" in why
    assert res.int8_weight_fraction >= mixed.MIN_INT8_FRACTION


def test_impossible_budget_says_why(stories_dir, cal, monkeypatch):
    # A positive budget on a real model can be met by luck (on stories260K one float layer
    # lands below float perplexity), so the budget is made impossible by the int8 floor: with
    # every linear weight required int8 no layer may go float, and +1e-6 % cannot be met.
    import functools

    monkeypatch.setattr(mixed, "fit_budget", functools.partial(mixed.fit_budget, min_int8=1.0))
    model, tok = load_float(stories_dir)
    res = run_auto(model, tok, QuantConfig(method="w8a8-static"), cal, "test samples",
                   budget_pct=1e-6)
    b = res.budget
    assert b["met"] is False and res.perplexity_change_pct > 1e-6
    assert "floor is 100%" in b["why"] and "still" in b["why"] and "larger budget" in b["why"]
    assert res.kept_float == {} and res.int8_weight_fraction == 1.0
    assert [k for k, _ in b["tried"]] == [0] and b["evaluations"] == 1
    assert res.perplexity_change_pct == pytest.approx(b["tried"][0][1])


def test_whole_model_sensitivity_finds_the_damaged_layer(stories_dir, cal):
    from npu_console.engine.quant.config import select_layers
    from npu_console.engine.quant.fisher import fisher_scores

    model, _ = load_float(stories_dir)
    names = select_layers(model, QuantConfig(method="w8a8-static")).quantize
    bad = "model.layers.2.mlp.up_proj"
    # one layer's static input range far too narrow (its inputs are O(1)): mostly clipped
    bounds = {bad: 1e-3}
    scores = fisher_scores(model, cal, names, "w8a8-static", bounds)
    assert set(scores) == set(names) and all(v >= 0 for v in scores.values())
    assert max(scores, key=scores.get) == bad
    params = mixed.layer_params(model, names)
    keep = mixed.keep_most_sensitive(scores, params)
    assert bad in keep and "rank" in keep[bad]
    assert mixed.int8_fraction(params, [n for n in names if n not in keep]) >= 0.85
    # nothing estimated above the floor: nothing kept float
    assert mixed.keep_most_sensitive(dict.fromkeys(names, 1e-6), params) == {}


def test_static_sensitivity_is_scored_on_the_half_its_ranges_never_saw(stories_dir, cal):
    """Cross-fitting (engine.quant.fisher.crossfit_scores): ranges searched on the even
    samples are scored on the odd ones and the other way round. With halves that agree there is
    nothing out of sample to see, and the estimate is the in-sample one; with halves that differ
    (the odd ones hold one token at every other position) each half is scored with the other's
    ranges, not its own."""
    from npu_console.engine.quant import recipe as recipe_mod
    from npu_console.engine.quant.capture import capture
    from npu_console.engine.quant.config import select_layers
    from npu_console.engine.quant.fisher import crossfit_scores, recipe_scores

    model, tok = load_float(stories_dir)
    names = select_layers(model, QuantConfig(method="w8a8-static")).quantize
    bos = tok.bos_token_id

    def scored(fit, on):
        caps = capture(model, fit, names, bos_id=bos)
        rec = recipe_mod.search(model, "w8a8-static", caps)
        return recipe_scores(model, rec, recipe_mod.body_stats(caps), names, on)

    twice = [x for s in cal for x in (s, s.clone())]
    same = crossfit_scores(model, "w8a8-static", names, twice, bos_id=bos)
    inside = scored(cal, cal)
    assert set(same) == set(names)
    for n in names:
        assert same[n] == pytest.approx(inside[n], rel=1e-4, abs=1e-9), n

    odd = [s.clone() for s in cal]
    for s in odd:
        s[0, 1::2] = int(cal[0][0, -1])
    mixed_halves = [x for pair in zip(cal, odd, strict=True) for x in pair]
    seen = []
    got = crossfit_scores(model, "w8a8-static", names, mixed_halves, bos_id=bos,
                          progress=lambda *a: seen.append(a))
    # one stage, counted over both halves: a run's progress bar never steps back
    assert seen == [("sensitivity", i + 1, len(mixed_halves)) for i in range(len(mixed_halves))]
    a_on_b, b_on_a = scored(cal, odd), scored(odd, cal)
    for n in names:
        assert got[n] == pytest.approx((a_on_b[n] + b_on_a[n]) / 2, rel=1e-4, abs=1e-9), n
    own = scored(cal, cal), scored(odd, odd)  # each half on its own ranges: another answer
    assert any(abs(got[n] - (own[0][n] + own[1][n]) / 2) > 0.05 * got[n] for n in names)
