"""The reasoning parser on its own: text in pieces (one piece = one token's text) -> reasoning,
answer and how many pieces were reasoning. The engine-level tests (test_reasoning_engine.py) run
the same code on a real model."""

from __future__ import annotations

import pytest
from npu_console.engine.runtime.reasoning import ReasoningParser, choose_parser, prompt_state

REPLY = "<think>\nI add 2 and 2.\nThat is 4.\n</think>\n\nThe answer is 4."


def run(parser: ReasoningParser, pieces: list[str]) -> tuple[str, str, int, list[int]]:
    reasoning, answer, per_piece = [], [], []
    for p in pieces:
        s = parser.feed(p)
        reasoning.append(s.reasoning)
        answer.append(s.answer)
        per_piece.append(s.reasoning_tokens)
    f = parser.finish()
    reasoning.append(f.reasoning)
    answer.append(f.answer)
    total = sum(per_piece) + f.reasoning_tokens
    assert total == parser.reasoning_tokens
    assert parser.reasoning_tokens + parser.answer_tokens == len(pieces)
    return "".join(reasoning), "".join(answer), total, per_piece


def chars(text: str) -> list[str]:
    return list(text)


@pytest.mark.parametrize("kind", ["deepseek_r1", "qwen3"])
@pytest.mark.parametrize("split", ["whole", "chars", "tags-split"])
def test_reasoning_and_answer_whatever_the_split(kind, split):
    if split == "whole":
        pieces = [REPLY]
    elif split == "chars":
        pieces = chars(REPLY)
    else:  # the tags cut the way a BPE tokenizer without tag tokens cuts them
        pieces = ["<", "th", "ink", ">\n", "I add 2 and 2.", "\nThat is 4.\n", "</", "think",
                  ">\n\n", "The", " answer is 4."]
    reasoning, answer, n, _ = run(ReasoningParser(kind), pieces)
    assert reasoning == "I add 2 and 2.\nThat is 4."
    assert answer == "The answer is 4."
    # every piece up to and including the end of </think> is reasoning
    end = REPLY.index("</think>") + len("</think>")
    starts, pos = [], 0
    for p in pieces:
        starts.append(pos)
        pos += len(p)
    assert n == sum(1 for s in starts if s < end)


def test_tag_pieces_are_held_until_known():
    p = ReasoningParser("qwen3")
    assert p.feed("<").reasoning == "" and p.feed("thi").answer == ""
    s = p.feed("nk>\nHm")
    assert (s.reasoning, s.answer, s.reasoning_tokens) == ("Hm", "", 3)
    assert p.feed(" ok\n</th").reasoning == " ok"  # the possible tag and its newline wait
    s = p.feed("ink>Yes")
    assert (s.reasoning, s.answer, s.reasoning_tokens) == ("", "Yes", 1)


def test_a_lookalike_tag_is_released_as_reasoning():
    r, a, _, _ = run(ReasoningParser("deepseek_r1"), ["<think>a </thin", "g> b", "</think>c"])
    assert (r, a) == ("a </thing> b", "c")


def test_unclosed_block_is_all_reasoning():
    pieces = ["<think>", "\nstill", " thinking", " when max", "_tokens hit\n", "</thi"]
    r, a, n, _ = run(ReasoningParser("qwen3"), pieces)
    assert a == "" and r == "still thinking when max_tokens hit\n</thi"
    assert n == len(pieces)


def test_r1_without_opening_tag_starts_in_the_reasoning():
    r, a, n, _ = run(ReasoningParser("deepseek_r1"), ["Let me", " see.", "</think>", "\n\nNo."])
    assert (r, a, n) == ("Let me see.", "No.", 3)


def test_r1_reply_that_never_closes_is_reasoning():
    r, a, n, _ = run(ReasoningParser("deepseek_r1"), ["Just", " text"])
    assert (r, a, n) == ("Just text", "", 2)


def test_qwen3_without_tags_is_all_answer():
    r, a, n, per = run(ReasoningParser("qwen3"), ["  ", "Hello", " there <think> is text"])
    assert (r, a, n) == ("", "Hello there <think> is text", 0)
    assert per == [0, 0, 0]


def test_qwen3_undecided_whitespace_then_tag_counts_as_reasoning():
    r, a, n, per = run(ReasoningParser("qwen3"), ["\n", "<think>", "x", "</think>", "y"])
    assert (r, a, n) == ("x", "y", 4)
    assert per == [0, 2, 1, 1, 0]  # the whitespace piece is counted once the tag decides it


def test_template_that_opens_the_block():
    assert prompt_state("<|assistant|>\n<think>\n") == "open"
    r, a, n, _ = run(ReasoningParser("qwen3", prompt_tail="<|assistant|>\n<think>\n"),
                     ["Step", " one.", "\n</", "think>", "\n\n", "Done."])
    assert (r, a, n) == ("Step one.", "Done.", 4)


def test_template_that_closes_the_block_means_no_reasoning():
    tail = "<|assistant|>\n<think>\n\n</think>\n\n"
    assert prompt_state(tail) == "closed"
    r, a, n, _ = run(ReasoningParser("deepseek_r1", prompt_tail=tail), ["Hi", "</think>"])
    assert (r, a, n) == ("", "Hi</think>", 0)


def test_empty_reply():
    for kind in ("deepseek_r1", "qwen3"):
        r, a, _, _ = run(ReasoningParser(kind), [""])
        assert (r, a) == ("", "")
    assert run(ReasoningParser("deepseek_r1"), [""])[2] == 1  # R1: the lone token was thinking
    assert run(ReasoningParser("qwen3"), [""])[2] == 0


def test_choose_parser_from_the_template():
    r1 = "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}"
    qwen3 = "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>"
    plain = "{% for m in messages %}<|im_start|>{{ m['content'] }}{% endfor %}"
    assert choose_parser("auto", r1) == "deepseek_r1"
    assert choose_parser("auto", qwen3) == "qwen3"
    assert choose_parser("auto", plain) is None
    assert choose_parser("auto", None) is None
    assert choose_parser("auto", {"default": r1, "tool_use": plain}) == "deepseek_r1"
    assert choose_parser("none", r1) is None
    assert choose_parser("qwen3", plain) == "qwen3"
    with pytest.raises(ValueError, match="unknown reasoning parser"):
        choose_parser("deepseek", r1)
