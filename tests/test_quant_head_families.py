"""`quantize` with its defaults on every family: the int8 head and embedding take tied and
scaled embeddings (Gemma multiplies its rows by sqrt(hidden)), the scale survives export and
load, `--int8-head auto` never picks a head the model cannot take, and an impossible `on` is
refused in one line right after the load, before any calibration. Tiny random-weight models of
the real transformers classes, written as model folders and quantized through the workflow."""

from __future__ import annotations

import math

import pytest
import torch
from npu_console.engine.quant.config import QuantError
from npu_console.engine.quant.head import decide, embedding_scale, unsupported
from npu_console.engine.quant.workflow import QuantizeRequest, run_workflow
from support.models import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _folder(tmp_path, family, **kw):
    loaded = tiny(family, vocab_size=2000, **kw)  # a head big enough for auto to take it
    d = tmp_path / family
    loaded.model.save_pretrained(d)
    loaded.tokenizer.save_pretrained(d)
    return loaded, d


@pytest.mark.parametrize("family", ["gemma3", "gemma2", "qwen2", "phi3", "qwen2_moe",
                                    "qwen3_moe"])
def test_defaults_quantize_every_family_with_an_int8_head(tmp_path, family):
    from npu_console.engine.models import load_model
    from npu_console.engine.quant.qlinear import QuantEmbedding
    from npu_console.engine.runtime.runner import make_runner
    from npu_console.engine.runtime.scheduler import ScheduledSeq
    from support.models import RunnerSeq

    loaded, d = _folder(tmp_path, family)
    emb = loaded.model.get_input_embeddings()
    scaled = family.startswith("gemma")
    assert embedding_scale(emb) == (pytest.approx(math.sqrt(64)) if scaled else 1.0)
    res = run_workflow(QuantizeRequest(model_dir=str(d), out_dir=str(tmp_path / "q")))
    assert res.info.int8_head and res.head.reason.startswith("auto: head =")
    # every routed expert's three projections are int8 too (4 experts in each of 2 layers)
    experts = [n for n in res.info.quantized if ".mlp.experts." in n]
    assert len(experts) == (2 * 4 * 3 if family.endswith("_moe") else 0)
    q = load_model(tmp_path / "q", device="cpu", dtype="float32", name="q")
    qemb = q.model.get_input_embeddings()
    assert isinstance(qemb, QuantEmbedding)
    assert qemb.embed_scale == pytest.approx(8.0 if scaled else 1.0)
    # the int8 rows, scaled as the float module scales them, are the float rows to int8 error
    ids = torch.arange(3, 40)
    with torch.inference_mode():
        want, got = emb(ids), qemb(ids)
    step = emb.weight.abs().amax(1)[ids, None] / 127 * embedding_scale(emb)
    assert ((got - want).abs() <= step * 0.51).all()
    # the quantized model next to the float one (int8 everywhere: the same greedy path mostly)
    prompt = torch.randint(3, 1990, (24,), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        f = loaded.model(input_ids=prompt[None]).logits[0]
        i8 = q.model(input_ids=prompt[None]).logits[0]
    assert (f.argmax(-1) == i8.argmax(-1)).float().mean() >= 0.75
    # our batched path on the int8 model equals its own transformers forward
    runner = make_runner(q.model, num_slots=2, max_len=64)
    assert runner.path_kind == "batched"
    seqs = [RunnerSeq(prompt.tolist(), 0), RunnerSeq(prompt[:11].tolist(), 1)]
    out = runner.execute([ScheduledSeq(s, 0, s.num_tokens) for s in seqs], 0)
    assert (out[0] - i8[-1]).abs().max() < 1e-3
    with torch.inference_mode():
        short = q.model(input_ids=prompt[None, :11]).logits[0, -1]
    assert (out[1] - short).abs().max() < 1e-3


def test_an_impossible_int8_head_is_refused_before_any_work(tmp_path):
    """A head that is not a plain linear (here a weight-normed one): 'on' fails in one line
    before calibration starts, 'auto' keeps the head float and says why."""
    loaded = tiny("qwen2", vocab_size=2000)
    torch.nn.utils.parametrizations.weight_norm(loaded.model.lm_head)
    why = unsupported(loaded.model)
    assert "lm_head" in why and "ParametrizedLinear" in why
    with pytest.raises(QuantError, match="not possible") as exc:
        decide("on", 0.5, not_possible=why)
    assert "\n" not in str(exc.value)
    auto = decide("auto", 0.5, not_possible=why)
    assert not auto.int8_head and "float" in auto.reason and "lm_head" in auto.reason

    stages: list[str] = []
    with pytest.raises(QuantError, match="--int8-head on is not possible"):
        run_workflow(QuantizeRequest(model_dir="tiny", out_dir=None, int8_head="on"),
                     on_event=lambda ev: stages.append(ev.stage), loaded=loaded)
    assert set(stages) <= {"load"}  # nothing after the load ran
    res = run_workflow(QuantizeRequest(model_dir="tiny", out_dir=None, method="w8a16",
                                       recipe="plain"), loaded=loaded)
    assert not res.info.int8_head and "stays float" in res.head.reason
