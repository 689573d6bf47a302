"""The residual stream rotated before static W8A8 (engine.quant.rotate): the float function
stays the same, the outlier channels the one per-tensor range could not follow spread out, the
rotated checkpoint (untied head, unit norms) writes and reads back in every export format and
serves in the engine, and the architectures it cannot fold are refused, with why. Off unless
asked for (docs/quantization.md, "The residual stream rotated")."""

from __future__ import annotations

import pytest
import torch
from fakes.stories_text import load_float, sampled_ids
from npu_console.engine.quant import io
from npu_console.engine.quant.config import QuantError
from npu_console.engine.quant.rotate import (
    decide,
    hadamard_orthogonal,
    rotate_residual,
)
from npu_console.engine.quant.workflow import QuantizeRequest, run_workflow
from support.models import tiny, wide

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits


def _stream_inputs(model, ids):
    """What each q_proj reads: the residual stream after its (weightless once rotated) norm."""
    seen = []
    hooks = [layer.self_attn.q_proj.register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].detach().reshape(-1, args[0].shape[-1])))
        for layer in model.model.layers]
    try:
        _logits(model, ids)
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_rotation_keeps_the_float_function_and_spreads_the_outlier_channels(stories_dir):
    model, _ = load_float(stories_dir)
    ids = sampled_ids(str(stories_dir), 3, 2, 48)
    before, inputs_before = _logits(model, ids), _stream_inputs(model, ids)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # stories260K is tied
    rotate_residual(model)
    after, inputs_after = _logits(model, ids), _stream_inputs(model, ids)
    assert torch.allclose(before, after, atol=1e-4 * before.abs().max()), \
        (before - after).abs().max()
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert model.config.tie_word_embeddings is False
    norms = [model.model.norm] + [m for layer in model.model.layers
                                  for m in (layer.input_layernorm,
                                            layer.post_attention_layernorm)]
    assert all(bool((n.weight == 1).all()) for n in norms)

    def channel_peak(x):  # the largest channel's peak over the typical channel's
        peak = x.abs().amax(0)
        return float(peak.max() / peak.median())

    # what a per-tensor int8 range pays for: one channel far above the rest, layer by layer
    worse = [channel_peak(b) for b in inputs_before]
    better = [channel_peak(a) for a in inputs_after]
    assert sum(better) < 0.7 * sum(worse), (worse, better)


@pytest.mark.parametrize("kind", ["hadamard", "random"])
def test_rotation_keeps_qwen2s_biases_and_is_the_same_for_one_seed(kind):
    # biases on q/k/v that are not zero, grouped-query attention: the value heads' turn must
    # follow each query head to its value head
    a, b = wide("qwen2"), wide("qwen2")
    assert a.config.num_attention_heads > a.config.num_key_value_heads
    ids = torch.randint(3, 300, (2, 20), generator=torch.Generator().manual_seed(0))
    want = _logits(a.model, ids)
    stream_only = wide("qwen2")
    rotate_residual(a.model, seed=5, kind=kind)
    rotate_residual(b.model, seed=5, kind=kind)
    rotate_residual(stream_only.model, seed=5, kind=kind, values=False)
    for m in (a.model, stream_only.model):
        assert torch.allclose(_logits(m, ids), want, atol=1e-4 * want.abs().max())
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(),
                                                  strict=True))
    # the value heads turned too (R2), not only the residual stream (R1): v_proj's rows and
    # o_proj's columns differ from the stream-only turn, q/k's do not
    va, vs = (m.model.layers[0].self_attn for m in (a.model, stream_only.model))
    assert not torch.allclose(va.v_proj.weight, vs.v_proj.weight, atol=1e-3)
    assert not torch.allclose(va.o_proj.weight, vs.o_proj.weight, atol=1e-3)
    assert torch.equal(va.q_proj.weight, vs.q_proj.weight)


@pytest.mark.parametrize("dim,flat", [(64, 1.0), (576, 3.0), (896, 3.0), (4096, 1.0)])
def test_the_hadamard_rotation_is_orthogonal_with_flat_entries(dim, flat):
    q = hadamard_orthogonal(dim, 0)
    assert torch.allclose(q @ q.T, torch.eye(dim, dtype=q.dtype), atol=1e-12)
    # no output channel leans on a few inputs: every entry within `flat` of 1/sqrt(dim)
    # (exactly 1/sqrt(dim) for a power of two; the odd factor, 9 or 7 here, is random)
    assert q.abs().max() * dim ** 0.5 <= flat + 1e-9
    assert not torch.equal(q, hadamard_orthogonal(dim, 1))  # the seed picks the signs


@pytest.mark.parametrize("family,why", [("gemma2", "RMSNorm"), ("phi3", "q/k/v/o"),
                                        ("qwen2_moe", "q/k/v/o")])
def test_models_it_cannot_fold_are_refused_with_why(family, why):
    model = tiny(family).model
    with pytest.raises(QuantError, match=f"--rotate on is not possible.*{why}"):
        decide("on", "w8a8-static", model)
    assert not decide("off", "w8a8-static", model).rotate


def test_rotation_is_asked_for_not_chosen(stories_dir):
    model, _ = load_float(stories_dir)
    for method in ("w8a16", "w8a8-dynamic", "w8a8-static"):
        on = decide("on", method, model)
        assert on.rotate and "untied" in on.reason
        assert not decide("off", method, model).rotate
    with pytest.raises(QuantError, match="unknown rotation"):
        decide("auto", "w8a8-static", model)


@pytest.fixture(scope="module")
def rotated_static(stories_dir):
    """stories260K through the workflow's w8a8-static, rotated, kept in memory; down_proj's
    inputs not turned, so that every format can carry it (tests/test_quant_turn.py)."""
    torch.set_num_threads(1)
    return run_workflow(QuantizeRequest(model_dir=str(stories_dir), out_dir=None,
                                        method="w8a8-static", samples=8, seq_len=64,
                                        rotate="on", turn_down="off"))


@pytest.mark.parametrize("fmt", ["native", "compressed-tensors", "msmodelslim"])
def test_the_rotated_static_checkpoint_reads_back_in_every_format(rotated_static, stories_dir,
                                                                  tmp_path, fmt):
    res = rotated_static
    assert res.rotation.rotate and res.info.config["rotate"] is True
    assert res.to_dict()["rotation"]["rotated"] is True
    model = res.model
    io.export(model, tmp_path / fmt, fmt=fmt, source_dir=stories_dir)
    back = io.load_quantized(tmp_path / fmt).model
    assert back.config.tie_word_embeddings is False
    ids = sampled_ids(str(stories_dir), 3, 2, 48)
    want = _logits(model, ids)
    assert torch.allclose(_logits(back, ids), want, atol=1e-4 * want.abs().max())


def test_the_engine_serves_the_rotated_checkpoint_as_transformers_computes_it(
        rotated_static, stories_dir, tmp_path):
    from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
    from support.api import own_engine

    io.export(rotated_static.model, tmp_path / "q", source_dir=stories_dir)
    ids = sampled_ids(str(stories_dir), 4, 1, 12)[0]
    with torch.inference_mode():
        want = rotated_static.model.generate(ids[None], max_new_tokens=16, do_sample=False,
                                             attention_mask=torch.ones_like(ids[None]))
    greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    with own_engine(tmp_path / "q", "rot") as eng:
        got = eng.generate(GenerationRequest(prompt_token_ids=ids.tolist(), params=greedy),
                           timeout=120)
    assert list(got.token_ids) == want[0, len(ids):].tolist()


def test_by_default_the_model_keeps_its_basis(stories_dir):
    res = run_workflow(QuantizeRequest(model_dir=str(stories_dir), out_dir=None,
                                       method="w8a8-static", samples=4, seq_len=32))
    assert not res.rotation.rotate and res.info.config["rotate"] is False
    assert res.model.lm_head.weight.data_ptr() == res.model.model.embed_tokens.weight.data_ptr()


def test_an_impossible_rotate_on_is_refused_before_any_calibration(tmp_path):
    loaded = tiny("gemma2")
    d = tmp_path / "gemma2"
    loaded.model.save_pretrained(d)
    loaded.tokenizer.save_pretrained(d)
    events = []
    with pytest.raises(QuantError, match="--rotate on is not possible"):
        run_workflow(QuantizeRequest(model_dir=str(d), out_dir=None, method="w8a8-static",
                                     rotate="on"), on_event=events.append)
    assert all(e.stage == "load" for e in events)
