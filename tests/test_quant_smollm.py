"""Issue 20's quality bars on a real instruct model: SmolLM2-135M-Instruct (the GGUF in
../shared/models), default ("auto") recipe of each method, perplexity by llama.cpp's chunk
method (ctx 512) on assets/calib/heldout_en.txt, which no recipe calibrates on."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from npu_console.engine.paths import CALIB_DIR
from npu_console.engine.quant import eval_methods as em
from npu_console.engine.quant.auto import calibration_samples, run_auto, self_tokens_for
from npu_console.engine.quant.config import QuantConfig
from support.gguf import SMOLLM_GGUF

pytestmark = pytest.mark.quality  # the quality lane (tests/conftest.py)

HELDOUT = CALIB_DIR / "heldout_en.txt"
# method: (max perplexity increase %, min share of linear weights in int8)
BARS = {"w8a16": (0.3, 1.0), "w8a8-dynamic": (1.0, 0.85), "w8a8-static": (1.5, 0.85)}


@pytest.fixture(scope="module")
def smollm():
    if not SMOLLM_GGUF.is_file():
        pytest.skip("../shared/models/smollm2-135m-instruct is not available")
    return _smollm()


def _smollm():
    from npu_console.engine.models.loader import load_model

    loaded = load_model(SMOLLM_GGUF, device="cpu", dtype="float32")
    whole, docs = em.read_eval_text(HELDOUT)

    def ppl(model):
        return em.evaluate_texts(model, loaded.tokenizer, docs, "chunks", 512,
                                 whole=whole).perplexity

    calib = {}
    for method in BARS:  # static calibrates on longer samples (engine.quant.auto)
        calib[method] = calibration_samples(loaded.model, loaded.tokenizer, None, 0, 0,
                                            loaded.files_dir, None, None,
                                            self_tokens=self_tokens_for(method))
    with torch.inference_mode():
        base = ppl(loaded.model)
    return {"loaded": loaded, "ppl": ppl, "base": base, "calib": calib}


@pytest.fixture()
def torch_threads(request):
    """Run the test body with this many torch threads (0: every core, as `quantize` does)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param or os.cpu_count() or 1)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "torch_threads"),
                         [("w8a16", 0), ("w8a8-dynamic", 0), ("w8a8-static", 0),
                          # the static recipe once moved with the thread count (+1.464 % on
                          # two threads, +1.530 % on one); it must hold on either
                          ("w8a8-static", 1)],
                         indirect=["torch_threads"])
def test_default_recipe_meets_the_bar(smollm, method, torch_threads):
    max_pct, min_int8 = BARS[method]
    loaded = smollm["loaded"]
    model = copy.deepcopy(loaded.model)
    samples, source = smollm["calib"][method]
    res = run_auto(model, loaded.tokenizer, QuantConfig(method=method), samples, source)
    assert "self-generated" in res.calibration
    with torch.inference_mode():
        delta = 100 * (smollm["ppl"](res.model) / smollm["base"] - 1)
    print(f"SmolLM2 {method} ({torch.get_num_threads()} threads): {delta:+.3f}% perplexity, "
          f"{res.int8_weight_fraction:.1%} int8, {len(res.kept_float)} layers float")
    assert res.int8_weight_fraction >= min_int8
    assert delta <= max_pct, f"{method}: {delta:+.3f}% (bar {max_pct}%)"
