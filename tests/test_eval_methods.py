"""Perplexity by llama.cpp's chunk method and lm-eval's per-document method, checked against
plain transformers loops written out here, on the real stories260K model."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from fakes.stories_text import load_float, sampled_text, write_text_file
from npu_console.engine.quant import eval_methods as em
from support.cli import cli_in_process


@pytest.fixture(scope="module")
def stories(stories_dir):
    model, tok = load_float(stories_dir)
    return model, tok


@pytest.fixture(scope="module")
def paragraphs(stories_dir):
    # TinyStories-style paragraphs the model never saw: its own samples from seed 11
    return sampled_text(stories_dir, 11, 6, 150)


def test_per_document_matches_a_plain_loop_with_bos_first(stories, paragraphs):
    model, tok = stories
    nll, n = 0.0, 0
    with torch.inference_mode():
        for text in paragraphs:
            ids = torch.tensor([[tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids])
            logits = model(input_ids=ids).logits[0, :-1]
            nll += F.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
            n += ids.shape[1] - 1
    plain = math.exp(nll / n)
    got = em.documents(model, tok, paragraphs, ctx=512)
    assert got.method == "documents" and got.pieces == len(paragraphs) and got.tokens == n
    assert got.perplexity == pytest.approx(plain, rel=0.02)
    # one stream without BOS per window scores the same text far worse (the reason for the fix)
    assert em.sliding(model, tok, paragraphs, ctx=64).perplexity > got.perplexity


def test_chunks_follow_llama_perplexity(stories, paragraphs):
    model, tok = stories
    text = "\n\n".join(paragraphs)
    ctx = 128
    tokens = tok(text).input_ids
    assert tokens[0] == tok.bos_token_id and em.adds_bos(tok)
    n_chunks = len(tokens) // ctx
    assert n_chunks >= 3
    # written out: BOS replaces each chunk's first token, the second half is scored
    nll, n = 0.0, 0
    with torch.inference_mode():
        for i in range(n_chunks):
            chunk = tokens[i * ctx:(i + 1) * ctx]
            inp = torch.tensor([[tok.bos_token_id] + chunk[1:]])
            logits = model(input_ids=inp).logits[0]
            first = ctx // 2
            nll += F.cross_entropy(logits[first:ctx - 1], torch.tensor(chunk[first + 1:]),
                                   reduction="sum").item()
            n += ctx - 1 - first
    got = em.chunks(model, tok, text, ctx=ctx)
    assert (got.method, got.ctx, got.pieces, got.tokens) == ("chunks", ctx, n_chunks, n)
    assert got.perplexity == pytest.approx(math.exp(nll / n), rel=1e-5)
    capped = em.evaluate_texts(model, tok, paragraphs, "chunks", ctx, max_tokens=2 * ctx)
    assert capped.pieces == 2


def test_chunks_cap_ctx_at_the_model_context_and_take_short_texts_whole(stories):
    model, tok = stories
    res = em.chunks(model, tok, "Once upon a time there was a cat. " * 400, ctx=4096)
    assert res.ctx == model.config.max_position_embeddings
    short = em.chunks(model, tok, "Once upon a time there was a little cat.", ctx=512)
    assert short.pieces == 1 and short.ctx == len(tok("Once upon a time there was a little cat."
                                                       ).input_ids)
    with pytest.raises(ValueError, match="unknown perplexity method"):
        em.evaluate_texts(model, tok, ["x"], "bogus")


@pytest.mark.slow
def test_cli_names_the_method(stories_dir, paragraphs, tmp_path, capsys):
    data = write_text_file(tmp_path / "held.txt", paragraphs)
    out = {}
    for flags in ((), ("--per-document",), ("--window", "256")):
        r = cli_in_process(capsys, "eval", "--model", stories_dir, "--data", data, "--ctx", "128",
                           "--json", *flags)
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        out[res["method"]] = res
    assert set(out) == {"chunks", "documents", "sliding"}
    assert out["chunks"]["ctx"] == 128 and out["sliding"]["ctx"] == 256
    assert out["documents"]["pieces"] == len(paragraphs)
