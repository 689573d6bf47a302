"""Quality bars on real weights: held-out perplexity vs fp32 and greedy agreement.

stories260K: held-out text is sampled from the float model (seeded), calibration text from
another seed. Demo model: the shipped calibration and held-out files.
"""

from __future__ import annotations

import pytest
import torch
from fakes.stories_text import PROMPTS, load_float, sampled_ids
from npu_console.engine.quant import calib
from npu_console.engine.quant import evaluate as ev
from npu_console.engine.quant.apply import quantize_model
from npu_console.engine.quant.config import QuantConfig, select_layers

pytestmark = pytest.mark.quality  # the quality lane (tests/conftest.py)

# (method, SmoothQuant alpha, max perplexity increase %, min teacher-forced top-1 agreement,
# min free-running greedy agreement on the hand-written prompts).
# Free-running greedy agreement on these tiny models (hidden 64 / 256) is decided by where a
# near-tie flips (float top-2 margins of 0.002-0.08 logits at the divergences), so it depends
# on the prompts. stories260K is measured on two sets of 20: the hand-written PROMPTS, which
# lead this 260 K-parameter model into near-ties (the float model cast to bf16 agrees with
# fp32 at only 0.744 there; a regression guard, last column), and prompts drawn from the
# held-out distribution (BOS + the first 6 tokens of stories sampled from the float model,
# seed 3, like the held-out text), where the issue's 0.90 bar is held (bf16: 0.984; other
# seeds in docs/benchmarks.md).
BARS = [("w8a16", None, 0.3, 0.985, 0.80), ("w8a8-dynamic", None, 0.6, 0.98, 0.70),
        ("w8a8-static", 0.8, 1.0, 0.965, 0.55)]
ISSUE_AGREEMENT = 0.90  # greedy agreement over the first 32 tokens of 20 prompts


def _quantize(model, method, alpha, samples):
    cfg = QuantConfig(method=method, smoothquant=alpha)
    stats = None
    if cfg.needs_calibration:
        stats = calib.collect_stats(model, samples, select_layers(model, cfg).quantize)
    quantize_model(model, cfg, stats)
    return model


@pytest.fixture(scope="module")
def stories(stories_dir):
    model, tok = load_float(stories_dir)
    held = sampled_ids(str(stories_dir), 1, 8, 200).reshape(-1)
    cal = [r.unsqueeze(0) for r in sampled_ids(str(stories_dir), 2, 16, 128)]
    prompts = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    held_prompts = [r[:7].tolist() for r in sampled_ids(str(stories_dir), 3, 20, 8)]
    with torch.inference_mode():
        base = ev.perplexity(model, held, window=256, stride=128).perplexity
        ref = [ev.greedy_tokens(model, p, 32) for p in prompts]
        held_ref = [ev.greedy_tokens(model, p, 32) for p in held_prompts]
    return {"held": held, "cal": cal, "prompts": prompts, "base": base, "ref": ref,
            "held_prompts": held_prompts, "held_ref": held_ref}


@pytest.mark.slow
@pytest.mark.parametrize("method,alpha,max_pct,min_top1,min_agree", BARS)
def test_stories_quality_bars(stories_dir, stories, method, alpha, max_pct, min_top1, min_agree):
    model, _ = load_float(stories_dir)
    _quantize(model, method, alpha, stories["cal"])
    ppl = ev.perplexity(model, stories["held"], window=256, stride=128).perplexity
    delta = 100 * (ppl / stories["base"] - 1)
    assert delta <= max_pct, f"{method}: +{delta:.3f}% perplexity (bar {max_pct}%)"
    got = [ev.greedy_tokens(model, p, 32) for p in stories["prompts"]]
    agree = ev.greedy_agreement(stories["ref"], got)
    top1 = ev.top1_agreement(model, stories["prompts"], stories["ref"])
    held_agree = ev.greedy_agreement(
        stories["held_ref"], [ev.greedy_tokens(model, p, 32) for p in stories["held_prompts"]])
    print(f"stories {method}: ppl {delta:+.3f}%, greedy agreement {agree:.3f} (hand-written "
          f"prompts), {held_agree:.3f} (held-out prompts), top-1 {top1:.3f}")
    assert top1 >= min_top1
    assert agree >= min_agree
    assert held_agree >= ISSUE_AGREEMENT


@pytest.mark.slow
@pytest.mark.parametrize("method,alpha,max_pct,min_top1,min_agree", BARS)
def test_demo_model_quality_bars(demo_model_dir, method, alpha, max_pct, min_top1, min_agree):
    from npu_console.engine.paths import CALIB_DIR
    from npu_console.engine.quant.eval_methods import text_token_ids
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(demo_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(demo_model_dir), dtype=torch.float32).eval()
    held = text_token_ids(tok, calib.read_texts(CALIB_DIR / "heldout_demo.txt"))[:4096]
    base = ev.perplexity(model, held, window=512, stride=256).perplexity
    prompts = [held[i * 128:i * 128 + 12] for i in range(20)]
    ref = [ev.greedy_tokens(model, p, 32) for p in prompts]
    samples = calib.build_samples(tok, calib.read_texts(None), 32, 256)
    _quantize(model, method, alpha, samples)
    ppl = ev.perplexity(model, held, window=512, stride=256).perplexity
    delta = 100 * (ppl / base - 1)
    assert delta <= max_pct, f"{method}: +{delta:.3f}% perplexity (bar {max_pct}%)"
    got = [ev.greedy_tokens(model, p, 32) for p in prompts]
    agree = ev.greedy_agreement(ref, got)
    top1 = ev.top1_agreement(model, prompts, ref)
    print(f"demo {method}: ppl {delta:+.3f}%, greedy agreement {agree:.3f}, top-1 {top1:.3f}")
    assert top1 >= min_top1
    assert agree >= min_agree
