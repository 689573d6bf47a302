"""Incremental detokenization (real tokenizer), stop-string hold-back and the batched sampler."""

from __future__ import annotations

import math

import pytest
import torch
from npu_console.engine.runtime.detokenizer import IncrementalDetokenizer, StopStringFilter
from npu_console.engine.runtime.sampler import sample
from npu_console.engine.runtime.sequence import Sequence
from npu_console.engine.runtime.types import SamplingParams


@pytest.fixture(scope="module")
def tokenizer(stories_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(stories_dir))


# ----------------------------------------------------------------------------- detokenizer


@pytest.mark.parametrize("text", [
    "Once upon a time, there was a little dog.",
    "café naïve — 日本語 ☃ 🙂 end",  # multi-byte characters through byte-fallback tokens
    "  leading spaces and\nnew lines\n\n",
])
def test_incremental_detokenization_matches_full_decode(tokenizer, text):
    prompt = tokenizer.encode("Hello", add_special_tokens=True)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) > 5
    detok = IncrementalDetokenizer(tokenizer, prompt)
    deltas = [detok.step(t) for t in ids]
    assert all("\ufffd" not in d for d in deltas)  # never half a character
    full = tokenizer.decode(prompt + ids, skip_special_tokens=True)
    head = tokenizer.decode(prompt, skip_special_tokens=True)
    assert head + "".join(deltas) == full


def test_multibyte_character_is_held_until_complete(tokenizer):
    ids = tokenizer.encode("☃", add_special_tokens=False)
    assert len(ids) >= 3  # one byte token per UTF-8 byte in this 512-token vocabulary
    detok = IncrementalDetokenizer(tokenizer, tokenizer.encode("a", add_special_tokens=False))
    out = [detok.step(t) for t in ids]
    # the snowman's first two byte tokens show nothing; the third completes the character
    assert out[-3:-1] == ["", ""]
    assert out[-1] == "☃"


# ----------------------------------------------------------------------------- stop strings


def feed_all(stops, pieces):
    f = StopStringFilter(stops)
    shown, hit = [], None
    for p in pieces:
        text, hit = f.feed(p)
        shown.append(text)
        if hit:
            break
    if not hit:
        shown.append(f.flush())
    return shown, hit


def test_stop_string_split_across_deltas_never_leaks():
    shown, hit = feed_all(["END"], ["abc E", "N", "D tail"])
    assert hit == "END"
    assert "".join(shown) == "abc "
    assert shown[0] == "abc "  # "E" held back: it could start "END"
    assert shown[1] == ""


def test_held_text_is_released_when_the_stop_does_not_complete():
    shown, hit = feed_all(["END"], ["abc E", "N", "x"])
    assert hit is None
    assert "".join(shown) == "abc ENx"


def test_earliest_of_several_stops_wins_and_flush_at_end():
    shown, hit = feed_all(["\n\n", "bye"], ["hi b", "ye\n\nmore"])
    assert hit == "bye" and "".join(shown) == "hi "
    shown, hit = feed_all(["xyz"], ["tail x"])
    assert hit is None and "".join(shown) == "tail x"


def test_no_stops_passes_through():
    f = StopStringFilter(())
    assert f.feed("abc") == ("abc", None)


# ----------------------------------------------------------------------------- sampler


def seqs_for(*params, outputs=None):
    out = []
    for i, p in enumerate(params):
        s = Sequence(f"s{i}", [3], p)  # prompt token 3: out of the way of the tests below
        if outputs:
            s.output_ids = list(outputs[i])
        out.append(s)
    return out


def test_greedy_rows_take_the_argmax():
    logits = torch.randn(3, 50)
    toks, errs = sample(logits, seqs_for(*[SamplingParams(temperature=0)] * 3))
    assert not errs and toks == logits.argmax(-1).tolist()


def test_greedy_rows_break_ties_and_nans_as_torch_does():
    logits = torch.randn(4, 151936)
    logits[0, [70, 90000]] = 50.0  # a tie: the first one
    logits[1, 123] = float("nan")  # NaN counts as the maximum
    logits[2, -1] = 60.0
    params = [SamplingParams(temperature=0)] * 3 + [SamplingParams(temperature=1.0, seed=1)]
    with torch.inference_mode():  # as the engine calls it
        toks, errs = sample(logits, seqs_for(*params))
    assert not errs and toks[:3] == logits[:3].argmax(-1).tolist() == [70, 123, 151935]


def test_seeded_sampling_is_independent_of_batch_composition():
    torch.manual_seed(0)
    row = torch.randn(1, 200)
    p = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=1234)
    alone = []
    s = seqs_for(p)
    for _ in range(20):
        alone.append(sample(row, s)[0][0])
    batched = []
    s2 = seqs_for(SamplingParams(temperature=1.3), p, SamplingParams(temperature=0))
    for _ in range(20):
        logits = torch.cat([torch.randn(1, 200), row, torch.randn(1, 200)])
        batched.append(sample(logits, s2)[0][1])
    assert alone == batched
    assert len(set(alone)) > 1  # it really samples


def test_top_k_top_p_min_p_restrict_the_choice():
    logits = torch.tensor([[5.0, 4.0, 3.0, 0.0, -1.0, -2.0]]).repeat(200, 1)
    cases = {
        "top_k": (SamplingParams(temperature=1.0, top_k=2), {0, 1}),
        "top_p": (SamplingParams(temperature=1.0, top_p=0.5), {0}),
        "min_p": (SamplingParams(temperature=1.0, min_p=0.3), {0, 1}),
    }
    for name, (p, allowed) in cases.items():
        seqs = [Sequence(f"{name}{i}", [1], dataclass_replace(p, seed=i)) for i in range(200)]
        toks, errs = sample(logits, seqs)
        assert not errs
        assert set(toks) == allowed, name


def dataclass_replace(p, **kw):
    import dataclasses

    return dataclasses.replace(p, **kw)


def test_penalties_push_repeated_tokens_down():
    logits = torch.tensor([[3.0, 2.9, 0.0, 0.0]])
    greedy = SamplingParams(temperature=0)
    assert sample(logits, seqs_for(greedy))[0] == [0]
    rep = SamplingParams(temperature=0, repetition_penalty=2.0)
    assert sample(logits, seqs_for(rep, outputs=[[0]]))[0] == [1]
    pres = SamplingParams(temperature=0, presence_penalty=0.5)
    assert sample(logits, seqs_for(pres, outputs=[[0]]))[0] == [1]
    freq = SamplingParams(temperature=0, frequency_penalty=0.06)
    assert sample(logits, seqs_for(freq, outputs=[[0]]))[0] == [0]  # 3.0 - 0.06 > 2.9
    assert sample(logits, seqs_for(freq, outputs=[[0, 0]]))[0] == [1]  # 3.0 - 0.12 < 2.9


def test_overflowing_temperature_fails_only_its_row():
    logits = torch.randn(3, 100) * 10
    p_bad = SamplingParams(temperature=1e-40, seed=1)
    seqs = seqs_for(SamplingParams(temperature=0), p_bad, SamplingParams(temperature=0.7, seed=2))
    toks, errs = sample(logits, seqs)
    assert set(errs) == {1} and "not finite" in errs[1]
    assert toks[0] == int(logits[0].argmax()) and toks[2] is not None and toks[1] is None
    assert not math.isnan(float(toks[2]))


def test_repetition_penalty_of_a_batch_equals_each_row_alone_as_its_sequence_grows():
    """The batched penalty (one gather / scatter for every row, the seen ids kept on each
    sequence and grown step by step) gives each row what the penalty alone would: positive
    logits of seen tokens divided, negative ones multiplied, other tokens untouched."""
    g = torch.Generator().manual_seed(0)
    params = [SamplingParams(temperature=0, repetition_penalty=p) for p in (1.3, 1.0, 2.0)]
    seqs = seqs_for(*params, outputs=[[5], [], [7, 7]])
    for step in range(3):
        logits = torch.randn(3, 50, generator=g)
        expect = logits.clone()
        for r, seq in enumerate(seqs):
            pen = seq.params.repetition_penalty
            for t in {t for t in seq.prompt_ids + seq.output_ids if 0 <= t < 50}:
                v = expect[r, t]
                expect[r, t] = v / pen if v > 0 else v * pen
        toks, errs = sample(logits.clone(), seqs)
        assert not errs and toks == expect.argmax(-1).tolist()
        from npu_console.engine.runtime.sampler import _apply_penalties
        assert torch.equal(_apply_penalties(logits.clone(), seqs), expect)
        for seq, t in zip(seqs, (3 + step, 60, 7)):  # 60 is outside the vocabulary
            seq.output_ids.append(t)
