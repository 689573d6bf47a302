"""The reasoning parser in the engine's output path, on the reasoning demo model (a real model
that writes `<think> ... </think>` before its answers, the tags split across several tokens)."""

from __future__ import annotations

import json
import shutil

import pytest
from npu_console.engine.demo.think_chat import render
from npu_console.engine.runtime.types import (
    FinishEvent,
    GenerationRequest,
    SamplingParams,
    TokenEvent,
)
from support.api import own_engine

pytestmark = pytest.mark.slow

QUESTION = "What is 23 + 58?"
GREEDY = SamplingParams(max_tokens=200, temperature=0.0)


def make_engine(**config):
    return own_engine(None, max_running=4, **config)


@pytest.fixture(scope="module")
def engine(think_model_dir, demo_model_dir):
    with make_engine() as eng:
        eng.load(think_model_dir, name="think", default=True).result(300)
        eng.load(demo_model_dir, name="demo").result(300)
        yield eng


def ask(engine, question=QUESTION, params=GREEDY, model=None):
    handle = engine.submit(GenerationRequest(messages=[{"role": "user", "content": question}],
                                             params=params, model=model))
    events = list(handle)
    return handle.result(0), [e for e in events if isinstance(e, TokenEvent)], events[-1]


def raw_reply(engine, question=QUESTION, params=GREEDY) -> tuple[str, tuple[int, ...]]:
    """The same reply as plain text: the rendered chat as a text prompt gets no parser."""
    c = engine.generate(GenerationRequest(
        prompt=render([{"role": "user", "content": question}], add_generation_prompt=True),
        add_special_tokens=False, params=params))
    return c.text, c.token_ids


def test_model_and_parser_are_chosen_from_the_template(engine):
    infos = {m.name: m for m in engine.models()}
    assert infos["think"].reasoning_parser == "deepseek_r1"  # its template strips </think>
    assert infos["demo"].reasoning_parser is None


def test_reply_splits_into_reasoning_and_answer(engine):
    done, tokens, fin = ask(engine)
    assert isinstance(fin, FinishEvent) and fin.finish_reason == "stop"
    assert done.reasoning.strip() and done.text.strip()
    for part in (done.text, done.reasoning):
        assert "<think>" not in part and "</think>" not in part
    assert done.reasoning.startswith("I need") and "=" in done.text  # it did the sum
    # every token is either reasoning or answer: the counts add up
    usage = fin.usage
    answer_tokens = sum(1 for e in tokens if e.reasoning_tokens == 0)
    assert usage.reasoning_tokens == sum(e.reasoning_tokens for e in tokens) > 0
    assert usage.reasoning_tokens + answer_tokens == usage.completion_tokens == len(tokens)
    # the raw reply is exactly the tags around the two parts
    raw, raw_ids = raw_reply(engine)
    assert raw == f"<think>\n{done.reasoning}\n</think>\n\n{done.text}"
    assert raw_ids == done.token_ids
    # timings: the answer starts after the reasoning
    t = fin.timings
    assert 0 < t.ttft_s < t.first_answer_s <= t.e2e_s and t.reasoning_s > 0


def test_tags_arrive_split_across_tokens(engine, think_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(think_model_dir)
    done, tokens, _ = ask(engine)
    pieces = [tok.decode([i]) for i in done.token_ids]
    joined = "".join(pieces)
    assert joined.startswith("<think>") and "</think>" in joined
    assert not any("think>" in p for p in pieces)  # each tag is spread over several tokens
    # while those tokens arrived, no event leaked a part of a tag
    assert all("<" not in e.text + e.reasoning for e in tokens)


def test_unclosed_block_when_max_tokens_is_reached_while_thinking(engine):
    done, tokens, fin = ask(engine, params=SamplingParams(max_tokens=12, temperature=0.0))
    assert fin.finish_reason == "length" and done.text == ""
    assert all(e.text == "" and e.reasoning_tokens == 1 for e in tokens)
    assert done.reasoning.startswith("I need")
    assert fin.usage.reasoning_tokens == fin.usage.completion_tokens == 12
    assert fin.timings.first_answer_s is None


def test_stop_string_inside_the_reasoning_does_not_end_the_reply(engine):
    full, _, _ = ask(engine)
    assert "Ones" in full.reasoning and "Ones" not in full.text
    done, _, fin = ask(engine, params=SamplingParams(max_tokens=200, temperature=0.0,
                                                     stop=("Ones",)))
    assert fin.finish_reason == "stop" and fin.stop_reason is None  # ended by end of sequence
    assert (done.reasoning, done.text) == (full.reasoning, full.text)
    # "=" is in the reasoning too, but only the answer is cut by it
    assert "=" in full.reasoning
    done, _, fin = ask(engine, params=SamplingParams(max_tokens=200, temperature=0.0,
                                                     stop=("=",)))
    assert fin.stop_reason == "=" and done.text == full.text.split("=")[0]
    assert done.reasoning == full.reasoning


def test_template_that_opens_the_think_block(engine, think_model_dir, tmp_path):
    folder = tmp_path / "opens"
    shutil.copytree(think_model_dir, folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["chat_template"] = cfg["chat_template"].replace(
        "{% if open_thinking is defined and open_thinking %}<think>\n{% endif %}", "<think>\n")
    assert cfg["chat_template"].endswith("<think>\n{% endif %}")
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    engine.load(folder, name="opens").result(300)
    try:
        full, _, _ = ask(engine)
        done, tokens, fin = ask(engine, model="opens")
        assert not any("<think>" in e.text + e.reasoning for e in tokens)
        assert (done.reasoning, done.text) == (full.reasoning, full.text)
        assert fin.usage.reasoning_tokens == sum(e.reasoning_tokens for e in tokens) > 0
    finally:
        engine.unload("opens").result(60)


def test_qwen3_parser_reads_the_same_reply(think_model_dir):
    with make_engine(reasoning_parser="qwen3") as eng:
        eng.load(think_model_dir, name="think").result(300)
        assert eng.models()[0].reasoning_parser == "qwen3"
        done, _, fin = ask(eng)
        raw, _ = raw_reply(eng)
    assert raw == f"<think>\n{done.reasoning}\n</think>\n\n{done.text}"
    assert fin.usage.reasoning_tokens > 0


def test_parser_none_leaves_the_raw_text(think_model_dir):
    with make_engine(reasoning_parser="none") as eng:
        eng.load(think_model_dir, name="think").result(300)
        assert eng.models()[0].reasoning_parser is None
        done, tokens, fin = ask(eng)
    assert done.text.startswith("<think>\n") and "\n</think>\n\n" in done.text
    assert done.reasoning == "" and not any(e.reasoning or e.reasoning_tokens for e in tokens)
    assert fin.usage.reasoning_tokens is None
    assert fin.timings.first_answer_s == fin.timings.ttft_s


def test_models_without_reasoning_are_unchanged(engine):
    done, tokens, fin = ask(engine, "What does json.dumps do?",
                            SamplingParams(max_tokens=24, temperature=0.0), model="demo")
    assert done.text and done.reasoning == ""
    assert not any(e.reasoning or e.reasoning_tokens for e in tokens)
    assert fin.usage.reasoning_tokens is None
    assert fin.timings.first_answer_s == fin.timings.ttft_s
    # raw prompts to the reasoning model are not parsed either (completions stay raw)
    raw, _ = raw_reply(engine)
    assert raw.startswith("<think>\n")


def test_terminal_chat_prints_the_thinking_then_the_answer(think_model_dir):
    import subprocess
    import sys
    from pathlib import Path

    def chat(*extra: str) -> str:
        res = subprocess.run(
            [sys.executable, "-m", "npu_console.cli.main", "chat", "--model", str(think_model_dir),
             "--temperature", "0", "--threads", "1", *extra],
            input="Spell rocket backwards.\n/exit\n", capture_output=True, text=True,
            timeout=300, cwd=Path(__file__).resolve().parent.parent, check=True)
        return res.stdout

    out = chat()
    thinking, _, answer = out.partition("bot> [thinking] ")[2].partition(" [/thinking]\n")
    assert thinking.startswith("The letters of rocket") and "<think>" not in out
    assert answer.startswith("rocket backwards is")
    raw = chat("--reasoning-parser", "none")
    assert "bot> <think>\nThe letters of rocket" in raw and "</think>" in raw
