"""Prompt encoding on callers' threads: each thread its own tokenizer copy (no shared lock, no
"Already borrowed"), the same ids as the model's tokenizer, and a per-thread memory of the last
prompt that never hands out stale ids."""

from __future__ import annotations

import threading

import pytest
from npu_console.engine.runtime.prompting import PromptEncoder, render_chat
from npu_console.engine.runtime.types import GenerationRequest


@pytest.fixture(scope="module")
def tokenizer(demo_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(demo_model_dir))


def test_many_threads_encode_at_once_and_agree_with_the_tokenizer(tokenizer):
    enc = PromptEncoder(tokenizer)
    texts = [f"Once upon a time {i} " * (1 + i % 7) for i in range(48)]
    want = [tokenizer.encode(t) for t in texts]
    got: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(k):
        start.wait()
        try:
            for i in range(k, len(texts), 8):
                for _ in range(3):
                    got[i] = enc.encode(GenerationRequest(prompt=texts[i]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [got[i] for i in range(len(texts))] == want
    # every thread worked on a copy: the shared tokenizer was never used by them
    assert enc.thread_tokenizer() is not tokenizer


def test_the_last_prompt_memory_never_returns_stale_ids(tokenizer):
    enc = PromptEncoder(tokenizer)
    text = "Once upon a time"
    with_bos = enc.encode(GenerationRequest(prompt=text))
    without = enc.encode(GenerationRequest(prompt=text, add_special_tokens=False))
    assert with_bos == tokenizer.encode(text) and without == tokenizer.encode(
        text, add_special_tokens=False) and with_bos != without
    messages = [{"role": "user", "content": "Hi"}]
    first = enc.encode(GenerationRequest(messages=messages))
    assert first == tokenizer.encode(render_chat(tokenizer, messages), add_special_tokens=False)
    assert enc.encode(GenerationRequest(messages=messages)) == first  # n choices: encoded once
    messages.append({"role": "assistant", "content": "Hello"})  # the same list, changed
    messages.append({"role": "user", "content": "More"})
    second = enc.encode(GenerationRequest(messages=messages))
    assert second == tokenizer.encode(render_chat(tokenizer, messages), add_special_tokens=False)
    assert second != first
    out = enc.encode(GenerationRequest(messages=messages))
    out.append(-1)  # a caller changing its list does not change the memory
    assert enc.encode(GenerationRequest(messages=messages)) == second


def test_a_prompt_too_long_for_the_context_is_refused_with_submits_message(tokenizer):
    """With max_len, a prompt of max_len tokens or more is refused on its token count (before
    its ids are listed) with the message submit's context check gives; one that fits gets the
    same ids as without the limit, text and chat alike."""
    from npu_console.engine.runtime.types import ContextLengthError
    from npu_console.engine.runtime.validation import check_context

    enc = PromptEncoder(tokenizer)
    long_text = "Once upon a time there was a dog. " * 300
    n = len(tokenizer.encode(long_text))
    messages = [{"role": "user", "content": long_text}]
    n_chat = len(tokenizer.encode(render_chat(tokenizer, messages), add_special_tokens=False))
    for req, count in ((GenerationRequest(prompt=long_text), n),
                       (GenerationRequest(messages=messages), n_chat)):
        with pytest.raises(ContextLengthError) as got:
            enc.encode(req, max_len=count)  # exactly the context: no room for one token
        with pytest.raises(ContextLengthError) as want:
            check_context(count, 16, count)
        assert got.value.message == want.value.message and got.value.param == "prompt"
        assert f"prompt has {count} tokens" in got.value.message
        assert enc.encode(req, max_len=count + 1) == enc.encode(req) and len(enc.encode(req)) \
            == count
