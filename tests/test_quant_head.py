"""The opt-in int8 lm_head + embedding (`--int8-head`): one int8 vocabulary table for a tied
model, quality close to the float head, native round trip, the engine serves it, and formats
whose readers keep the head in float refuse it."""

from __future__ import annotations

import copy

import pytest
import torch
from fakes.stories_text import load_float, sampled_ids
from npu_console.engine.quant import io
from npu_console.engine.quant.apply import prepare_for_serving, quantize_model
from npu_console.engine.quant.config import QuantConfig, QuantError
from npu_console.engine.quant.evaluate import weight_bytes
from npu_console.engine.quant.qlinear import QuantEmbedding, QuantLinear
from support.api import own_engine


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits.float()


@pytest.fixture(scope="module")
def probe_ids(stories_dir):
    return sampled_ids(str(stories_dir), 3, 4, 48)


def test_tied_head_is_one_int8_table_and_stays_close_to_float(stories_dir, probe_ids):
    ref, _ = load_float(stories_dir)
    plain, _ = load_float(stories_dir)
    quantize_model(plain, QuantConfig(method="w8a8-dynamic"))
    model, _ = load_float(stories_dir)
    info = quantize_model(model, QuantConfig(method="w8a8-dynamic", int8_head=True))

    assert info.int8_head == {"head": "lm_head", "embedding": "model.embed_tokens", "tied": True,
                              "group": 32}
    assert isinstance(model.lm_head, QuantLinear) and model.lm_head.method == "w8a16"
    emb = model.get_input_embeddings()
    assert isinstance(emb, QuantEmbedding) and emb.is_tied
    assert not list(emb.buffers())  # reads the head's table: no second copy
    vocab, hidden = ref.lm_head.weight.shape
    saved = weight_bytes(plain) - weight_bytes(model)
    # fp32 table (4 bytes) -> int8 (1 byte) plus one fp32 scale per 32 values of a row
    assert model.lm_head.group_size == 32
    assert saved == vocab * hidden * 3 - vocab * (hidden // 32) * 4

    # a looked-up row is the dequantized head row
    ids = torch.tensor([[5, 17, 300]])
    rows = emb(ids)
    scale = model.lm_head.weight_scale[ids].repeat_interleave(32, -1)
    expect = model.lm_head.weight[ids].float() * scale
    assert torch.equal(rows, expect)

    lf, lq, lp = _logits(ref, probe_ids), _logits(model, probe_ids), _logits(plain, probe_ids)
    kl = lambda a, b: torch.nn.functional.kl_div(
        b.log_softmax(-1), a.log_softmax(-1), log_target=True, reduction="batchmean").item()
    assert kl(lf, lq) < 2 * kl(lf, lp) + 1e-3  # the int8 head adds little to the layers' error
    assert (lf.argmax(-1) == lq.argmax(-1)).float().mean() > 0.9


def test_native_round_trip_and_serving(stories_dir, tmp_path, probe_ids):
    from npu_console.engine.models import load_model
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams

    model, _ = load_float(stories_dir)
    quantize_model(model, QuantConfig(method="w8a16", int8_head=True))
    out = io.export(model, tmp_path / "q", "native", source_dir=stories_dir)
    with pytest.raises(QuantError, match="65535"):  # refused before anything touches an NPU
        io.load_quantized_model(out, device="npu")
    back = io.load_quantized_model(out)
    assert back.npu_quant.int8_head["tied"]
    # the head keeps its scales per 32 values of a row, before and after
    assert model.lm_head.group_size == back.lm_head.group_size == 32
    assert model.model.layers[0].mlp.down_proj.act_rows == "block"
    assert isinstance(back.get_input_embeddings(), QuantEmbedding)
    assert torch.allclose(_logits(model, probe_ids), _logits(back, probe_ids), atol=1e-4)

    # served through the engine's batched path: greedy tokens = the model's own argmax loop
    loaded = load_model(out, device="cpu", dtype="float32", name="q-head")
    prompt = probe_ids[0, :12].tolist()
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        for _ in range(16):
            ids = torch.cat([ids, back(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    with own_engine(None) as eng:
        info = eng.add_model(loaded).result(60)
        assert info.path_kind == "batched"
        done = eng.generate(GenerationRequest(prompt_token_ids=prompt, params=SamplingParams(
            max_tokens=16, temperature=0.0, ignore_eos=True)), timeout=60)
    assert list(done.token_ids) == ids[0, 12:].tolist()


def test_untied_model_gets_its_own_int8_embedding(tmp_path):
    from npu_console.engine.bench.random_model import make_random_qwen
    from npu_console.engine.models import load_model

    path = make_random_qwen(tmp_path / "m", dtype="float32", hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            vocab_size=512, tie_word_embeddings=False)
    model = load_model(path, device="cpu", dtype="float32").model
    before = model.get_input_embeddings().weight.detach().clone()
    info = quantize_model(model, QuantConfig(method="w8a8-dynamic", int8_head=True))
    assert info.int8_head["tied"] is False
    emb = model.get_input_embeddings()
    assert emb.weight.dtype == torch.int8 and emb.weight.shape == before.shape
    ids = torch.arange(0, 512, 7)
    err = (emb(ids) - before[ids]).abs().max(-1).values
    assert torch.all(err <= before[ids].abs().amax(-1) / 127 / 2 + 1e-6)  # half a step per row
    half = copy.deepcopy(model).to(torch.bfloat16).get_input_embeddings()
    assert half.weight_scale.dtype == torch.float32 and half(ids).dtype == torch.bfloat16
    out = io.export(model, tmp_path / "q", "native", source_dir=path)
    back = io.load_quantized_model(out)
    prepare_for_serving(back)
    x = torch.randint(3, 512, (1, 20))
    assert torch.allclose(_logits(model, x), _logits(back, x), atol=1e-4)


def test_formats_that_keep_the_head_float_refuse_it(stories_dir, tmp_path):
    model, _ = load_float(stories_dir)
    quantize_model(model, QuantConfig(method="w8a8-dynamic", int8_head=True))
    for fmt in ("compressed-tensors", "msmodelslim"):
        with pytest.raises(QuantError, match="only be written in the native format"):
            io.export(model, tmp_path / fmt, fmt)
        assert not (tmp_path / fmt).exists()
