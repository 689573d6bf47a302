"""Issue 32's quality bars on a real instruct model: SmolLM2-135M-Instruct (the GGUF in
../shared/models), default ("auto") recipe of each method with the self-generated calibration
of seed 0, perplexity by llama.cpp's chunk method (ctx 512) on every held-out evaluation text
in assets/eval/ (prose, chat dialogue through the model's template, technical text and code).
No recipe was chosen on those texts (assets/eval/README.md); the bars hold on the worst one.
The spread over three seeds is a benchmark (tests/bench/quant_quality.py, docs/quantization.md).
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from npu_console.engine.paths import EVAL_DIR
from npu_console.engine.quant import eval_methods as em
from npu_console.engine.quant.auto import (
    calibration_samples,
    run_auto,
    self_prompts_for,
    self_tokens_for,
)
from npu_console.engine.quant.workflow import QuantizeRequest, rotated_config

# the quality lane (tests/conftest.py). The first test also pays the module's set-up (three
# calibrations, the float model on every text): over 600 s on the AVX2-only AMD EPYC when the
# machine is shared, so a generous limit; how long it takes is no part of the bar
pytestmark = [pytest.mark.quality, pytest.mark.timeout(2400)]

# method: (max perplexity increase % on the worst text, min share of linear weights in int8)
BARS = {"w8a16": (0.3, 1.0), "w8a8-dynamic": (0.75, 0.85), "w8a8-static": (1.2, 0.85)}
EVAL_FILES = sorted(p for p in EVAL_DIR.iterdir() if p.suffix in (".txt", ".jsonl"))


@pytest.fixture(scope="module")
def smollm(smollm2_gguf):
    from npu_console.engine.models.loader import load_model

    loaded = load_model(smollm2_gguf, device="cpu", dtype="float32")
    texts = {p.name: em.read_eval_text(p, loaded.tokenizer) for p in EVAL_FILES}

    def ppl(model) -> dict[str, float]:
        with torch.inference_mode():
            return {n: em.evaluate_texts(model, loaded.tokenizer, docs, "chunks", 512,
                                         whole=whole).perplexity
                    for n, (whole, docs) in texts.items()}

    calib = {}
    for method in BARS:  # static calibrates on longer samples (engine.quant.auto)
        calib[method] = calibration_samples(loaded.model, loaded.tokenizer, None, 0, 0,
                                            loaded.files_dir, None, None,
                                            self_tokens=self_tokens_for(method),
                                            self_prompts=self_prompts_for(method))
    return {"loaded": loaded, "ppl": ppl, "base": ppl(loaded.model), "calib": calib}


@pytest.fixture()
def torch_threads(request):
    """Run the test body with this many torch threads (0: every core, as `quantize` does)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param or os.cpu_count() or 1)
    yield request.param
    torch.set_num_threads(before)


def test_the_evaluation_texts_are_three_kinds():
    assert {p.name for p in EVAL_FILES} >= {"prose_en.txt", "dialogue_en.jsonl",
                                            "technical_code.txt"}


@pytest.mark.slow
@pytest.mark.parametrize(("method", "torch_threads"),
                         [("w8a16", 0), ("w8a8-dynamic", 0), ("w8a8-static", 0),
                          # the static recipe once moved with the thread count; it must hold
                          # on either
                          ("w8a8-static", 1)],
                         indirect=["torch_threads"])
def test_default_recipe_meets_the_bar_on_the_worst_text(smollm, method, torch_threads):
    max_pct, min_int8 = BARS[method]
    loaded = smollm["loaded"]
    model = copy.deepcopy(loaded.model)
    samples, source = smollm["calib"][method]
    req = QuantizeRequest(model_dir="", out_dir=None, method=method)  # the defaults
    cfg, _ = rotated_config(req, req.config(), model)
    res = run_auto(model, loaded.tokenizer, cfg, samples, source)
    assert "self-generated" in res.calibration
    # static's default turns every MLP's down_proj input (engine.quant.turn)
    assert res.info.config["recipe"].get("turned_down_inputs") == (
        30 if method == "w8a8-static" else None)
    got = smollm["ppl"](res.model)
    delta = {n: 100 * (got[n] / smollm["base"][n] - 1) for n in got}
    worst = max(delta, key=delta.get)
    print(f"SmolLM2 {method} ({torch.get_num_threads()} threads): "
          + ", ".join(f"{n} {d:+.3f}%" for n, d in delta.items())
          + f"; {res.int8_weight_fraction:.1%} int8, {len(res.kept_float)} layers float")
    assert res.int8_weight_fraction >= min_int8
    assert delta[worst] <= max_pct, f"{method}: {worst} {delta[worst]:+.3f}% (bar {max_pct}%)"
