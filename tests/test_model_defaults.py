"""A model's generation_config.json sampling settings (temperature, top_p, top_k, min_p,
repetition_penalty) are the defaults of API requests that leave those fields unset, as in
transformers' `generate` and vLLM; explicit fields win; `--generation-config none` turns it
off. Real engine and server on stories260K with its generation config edited in memory."""

from __future__ import annotations

import httpx
import pytest
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
from npu_console.engine.runtime.variant import sampling_defaults
from support.api import STORY_PROMPT, own_engine, running_server

pytestmark = pytest.mark.slow

PENALTY = 1.3


def _model_with(**gen):
    from transformers import GenerationConfig

    class M:
        generation_config = GenerationConfig(**gen)

    return M()


def test_only_settings_away_from_transformers_defaults_and_valid_ones_are_taken():
    qwen_like = _model_with(do_sample=True, temperature=0.7, top_p=0.8, top_k=20,
                            repetition_penalty=1.05, bos_token_id=1, max_new_tokens=64)
    assert sampling_defaults(qwen_like) == {"temperature": 0.7, "top_p": 0.8, "top_k": 20,
                                            "repetition_penalty": 1.05}
    assert sampling_defaults(_model_with(bos_token_id=1, eos_token_id=2)) == {}
    assert sampling_defaults(_model_with(do_sample=True, top_p=1.5, temperature=0.5)) == {
        "temperature": 0.5}  # a top_p no request could carry is dropped, not applied
    assert sampling_defaults(object()) == {}


@pytest.fixture(scope="module")
def engine(stories_dir):
    from npu_console.engine.models import load_model

    loaded = load_model(stories_dir, name="stories")
    # greedy by default (top_k 1) and a repetition penalty: deterministic and visible
    loaded.model.generation_config.top_k = 1
    loaded.model.generation_config.repetition_penalty = PENALTY
    with own_engine(loaded, timeout=120) as eng:
        yield eng


def _text(engine, **params) -> str:
    p = SamplingParams(max_tokens=32, ignore_eos=True, **params)
    return engine.submit(GenerationRequest(prompt=STORY_PROMPT, params=p)).result(120).text


def test_the_engine_applies_the_model_defaults_only_to_the_fields_named(engine):
    info = engine.models()[0]
    assert dict(info.sampling_defaults) == {"top_k": 1, "repetition_penalty": PENALTY}
    greedy_penalized = _text(engine, temperature=0, repetition_penalty=PENALTY)
    plain_greedy = _text(engine, temperature=0)
    assert greedy_penalized != plain_greedy  # the penalty shows in 32 tokens of this model
    # temperature 1 but the model's top_k 1: greedy, with the model's penalty
    assert _text(engine, model_defaults=("top_k", "repetition_penalty")) == greedy_penalized
    # a field the caller set is not overridden
    assert _text(engine, temperature=0, repetition_penalty=1.0,
                 model_defaults=("top_k",)) == plain_greedy


@pytest.mark.parametrize("generation_config", ["auto", "none"])
def test_the_api_uses_them_for_unset_fields(engine, generation_config):
    greedy_penalized = _text(engine, temperature=0, repetition_penalty=PENALTY)
    plain_greedy = _text(engine, temperature=0)
    with running_server(engine, model_defaults=generation_config == "auto") as (_, url):
        card = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]
        assert card["sampling_defaults"] == {"top_k": 1, "repetition_penalty": PENALTY}

        def complete(**fields) -> str:
            r = httpx.post(url + "/v1/completions", timeout=120, json={
                "prompt": STORY_PROMPT, "max_tokens": 32, "ignore_eos": True, **fields})
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["text"]

        if generation_config == "auto":
            assert complete() == greedy_penalized  # no sampling field at all: the model's
            assert complete(temperature=0, repetition_penalty=1.0) == plain_greedy
        else:  # OpenAI's defaults: no penalty; greedy only when asked
            assert complete(temperature=0) == plain_greedy


def test_a_remote_client_keeps_its_explicit_fields_and_can_ask_for_the_models(engine):
    """The console in remote mode: what the user set explicitly is what the server runs, even
    at a value the server would replace with the model's default if it were left out."""
    from npu_console.engine.remote.client import RemoteEngine

    greedy_penalized = _text(engine, temperature=0, repetition_penalty=PENALTY)
    plain_greedy = _text(engine, temperature=0)
    with running_server(engine) as (_, url), RemoteEngine(url, poll_interval_s=None) as remote:
        assert dict(remote.models()[0].sampling_defaults) == {"top_k": 1,
                                                              "repetition_penalty": PENALTY}
        assert _text(remote, temperature=0) == plain_greedy  # repetition_penalty 1.0 sent
        assert _text(remote, temperature=0,
                     model_defaults=("repetition_penalty",)) == greedy_penalized
