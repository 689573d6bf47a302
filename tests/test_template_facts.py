"""What a chat template implies (end-of-turn token, default system prompt) and how many tokens
each KV slot gets, on the demo model's real tokenizer with real templates of other families."""

from __future__ import annotations

import copy
import types

import pytest
from npu_console.engine.runtime import context_budget as cb
from npu_console.engine.runtime.template_facts import default_system_prompt, end_of_turn_id

# the shapes of Llama 3's and Qwen2.5's templates: another end-of-turn token than EOS, and a
# system prompt inserted when the conversation has none
LLAMA3_LIKE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
    "\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
QWEN_LIKE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are Qwen, a helpful "
    "assistant.<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture()
def tok(demo_model_dir):
    from npu_console.engine.models.loader import load_tokenizer

    t = copy.deepcopy(load_tokenizer(demo_model_dir))
    t.add_special_tokens({"additional_special_tokens": [
        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"]})
    return t


def test_end_of_turn_is_found_in_the_template(tok):
    assert end_of_turn_id(tok) == tok.eos_token_id  # the demo template ends turns with EOS
    tok.chat_template = LLAMA3_LIKE
    eot = end_of_turn_id(tok)
    assert eot == tok.convert_tokens_to_ids("<|eot_id|>") and eot != tok.eos_token_id
    tok.chat_template = QWEN_LIKE
    assert end_of_turn_id(tok) == tok.convert_tokens_to_ids("<|im_end|>")
    tok.chat_template = None
    assert end_of_turn_id(tok) is None


def test_the_engine_stops_on_the_templates_end_of_turn_too(tok):
    from npu_console.engine.runtime.variant import eos_ids

    tok.chat_template = LLAMA3_LIKE
    loaded = types.SimpleNamespace(tokenizer=tok, model=types.SimpleNamespace(
        generation_config=types.SimpleNamespace(eos_token_id=tok.eos_token_id)))
    assert eos_ids(loaded) == {tok.eos_token_id, tok.convert_tokens_to_ids("<|eot_id|>")}


def test_default_system_prompt_comes_from_the_template(tok):
    assert default_system_prompt(tok) is None  # the demo template adds none
    tok.chat_template = QWEN_LIKE
    assert default_system_prompt(tok) == "You are Qwen, a helpful assistant."
    tok.chat_template = LLAMA3_LIKE
    assert default_system_prompt(tok) is None
    tok.chat_template = "{{ raise_exception('roles must alternate') }}"
    assert default_system_prompt(tok) is None and end_of_turn_id(tok) is None


def test_slots_get_the_models_context_when_memory_allows():
    per_token = 2 * 30 * 3 * 64 * 4  # SmolLM2-135M, fp32 KV
    gib = 2**30
    assert cb.choose_max_len(8192, slots=16, per_token=per_token, free=20 * gib) == 8192
    tight = cb.choose_max_len(8192, slots=16, per_token=per_token, free=8 * gib)
    assert 2048 < tight < 8192 and tight % cb.STEP == 0
    assert 16 * tight * per_token <= 0.4 * 8 * gib
    # the floor of 2,048 when it fits in most of the free memory, else what does fit there:
    # 16 x 2,048 fp32 rows are 1.4 GiB
    assert cb.choose_max_len(8192, slots=16, per_token=per_token, free=2 * gib) == 2048
    short = cb.choose_max_len(8192, slots=16, per_token=per_token, free=1 * gib)
    assert short == 1024 and 16 * short * per_token <= 0.8 * gib
    # a 7B model's fp32 cache for 8 sequences on a 24 GB machine that holds its weights
    llama7b = 2 * 32 * 32 * 128 * 4
    assert cb.choose_max_len(4096, slots=8, per_token=llama7b, free=15 * gib) == 1536
    with pytest.raises(MemoryError, match=r"8 sequences x 256 tokens need 2\.00 GiB, 1\.00 GiB"):
        cb.choose_max_len(4096, slots=8, per_token=llama7b, free=1 * gib)
    assert cb.choose_max_len(512, slots=16, per_token=per_token, free=None) == 512
    assert cb.choose_max_len(8192, slots=16, per_token=per_token, free=20 * gib, cap=512) == 512
    assert cb.choose_max_len(8192, slots=16, per_token=per_token, free=1 * gib,
                             max_model_len=4096) == 4096


def test_sampling_panel_shows_the_template_default_and_keeps_the_users_text(qtbot):
    from npu_console.console.widgets.sampling_panel import SamplingPanel

    panel = SamplingPanel()
    qtbot.addWidget(panel)
    panel.set_template_system("You are SmolLM.")
    assert panel.values()["system_prompt"] == "You are SmolLM."
    panel.set_template_system(None)  # another model without one: the default goes
    assert panel.values()["system_prompt"] == ""
    panel.system.setPlainText("Answer in French.")
    panel.set_template_system("You are SmolLM.")
    assert panel.values()["system_prompt"] == "Answer in French."
