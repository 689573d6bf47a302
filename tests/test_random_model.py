"""The random-weight benchmark model: its full-vocabulary word tokenizer survives the real
loading code (a qwen2 folder), so serving benchmarks can stream and count its tokens."""

from __future__ import annotations

import pytest
from npu_console.engine.bench.random_model import QWEN25_05B, make_random_qwen
from support.api import own_engine


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    # the real vocabulary, tiny layers: the tokenizer is what is under test
    return make_random_qwen(tmp_path_factory.mktemp("qwen") / "m", dtype="float32",
                            hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            num_attention_heads=2, num_key_value_heads=1)


def test_loader_keeps_the_declared_word_tokenizer(tiny_qwen):
    from npu_console.engine.models import load_model

    loaded = load_model(tiny_qwen, device="cpu", dtype="float32")
    tok = loaded.tokenizer
    assert loaded.config.model_type == "qwen2"
    assert len(tok) == QWEN25_05B["vocab_size"]
    words = "t3 t100000 t151935 t42"
    assert tok.encode(words, add_special_tokens=False) == [3, 100000, 151935, 42]
    assert tok.decode([3, 100000, 151935, 42]) == words
    assert tok.eos_token_id == QWEN25_05B["eos_token_id"]


def test_engine_streams_one_word_per_generated_token(tiny_qwen):
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

    with own_engine(tiny_qwen, "tiny", timeout=120) as engine:
        done = engine.generate(GenerationRequest(
            prompt="t5 t6 t7", params=SamplingParams(max_tokens=12, temperature=0,
                                                    ignore_eos=True)), timeout=120)
    assert done.finish.usage.prompt_tokens == 3
    assert done.finish.usage.completion_tokens == 12
    words = done.text.split()
    assert words == [f"t{i}" for i in done.token_ids if i > 2]  # specials are not shown
