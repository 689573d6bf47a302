"""`--int8-head auto`: the rule (the head's share of the weights) says yes for the demo model
(a 4096 x 256 table of ~4M weights) and no for stories260K (512 x 64 of ~260K); auto writes an
int8 head natively and a float one, with the reason, for a vLLM format; what the int8 head alone
costs; `quantize --json` and `bench offline --int8-head` as a user runs them."""

from __future__ import annotations

import json

import pytest
import torch
from fakes.stories_text import sampled_text, write_text_file
from npu_console.engine.quant.config import QuantError
from npu_console.engine.quant.head import (
    AUTO_MIN_SHARE,
    decide,
    head_mode,
    measure_head_cost,
    share_of_model,
    share_of_path,
)
from npu_console.engine.quant.workflow import QuantizeRequest, load_float, run_workflow
from support.cli import cli_in_process


@pytest.fixture(scope="module")
def heldout_file(stories_dir, tmp_path_factory):
    return write_text_file(tmp_path_factory.mktemp("held") / "held.txt",
                           sampled_text(stories_dir, 1, 4, 120))


def test_rule_says_yes_for_a_large_head_and_no_for_a_small_one(demo_model_dir, stories_dir):
    demo, stories = share_of_path(demo_model_dir), share_of_path(stories_dir)
    # from the headers alone, the same as counting the loaded weights (a tied table once)
    assert demo == pytest.approx(share_of_model(load_float(str(demo_model_dir), "cpu",
                                                           "float32").model), rel=1e-3)
    assert stories == pytest.approx(share_of_model(load_float(str(stories_dir), "cpu",
                                                              "float32").model), rel=1e-3)
    assert demo == pytest.approx(4096 * 256 / 3_950_848, rel=0.01)  # 26.5 %
    assert stories == pytest.approx(512 * 64 / 260_032, rel=0.01)  # 12.6 %
    assert stories < AUTO_MIN_SHARE < demo
    assert decide("auto", demo).int8_head and not decide("auto", stories).int8_head
    assert "27 %" in decide("auto", demo).reason and "13 %" in decide("auto", stories).reason
    off = decide("auto", demo, "compressed-tensors")
    assert not off.int8_head and "compressed-tensors" in off.reason
    assert decide("on", stories).int8_head and not decide("off", demo).int8_head
    npu = decide("auto", demo, "native", "npu:0")
    assert not npu.int8_head and "65535" in npu.reason
    # every method alike (static W8A8 kept a float head until its down_proj inputs were
    # turned; engine.quant.head)
    assert decide("auto", demo, "native", "cpu").int8_head
    assert head_mode(True) == "on" and head_mode(False) == "off" and head_mode(None) == "auto"
    with pytest.raises(QuantError, match="auto, on, off"):
        head_mode("yes")


def test_auto_native_writes_an_int8_head_that_loads_and_generates(demo_model_dir, heldout_file,
                                                                  tmp_path):
    from npu_console.engine.models import load_model
    from npu_console.engine.quant.qlinear import QuantEmbedding, QuantLinear

    out = tmp_path / "q"
    res = run_workflow(QuantizeRequest(model_dir=str(demo_model_dir), out_dir=str(out),
                                       method="w8a16", recipe="plain",
                                       eval_file=str(heldout_file)))
    d = res.to_dict()
    assert d["int8_head"] is True and d["int8_head_mode"] == "auto"
    assert d["int8_head_reason"].startswith("auto: head = 27 %")
    assert d["int8_head_layers"]["tied"] is True
    meta = json.loads((out / "npu_quant.json").read_text())
    assert meta["int8_head"] == {"head": "lm_head", "embedding": "model.embed_tokens",
                                 "tied": True, "group": 32}
    # the int8 head alone, measured on the held-out text
    cost = res.head_cost
    assert cost is not None and cost.tokens > 100
    assert 0.9 <= cost.top1_agreement <= 1.0
    assert abs(cost.perplexity_change_pct) < 2.0
    assert d["int8_head_cost"]["perplexity_change_pct"] == pytest.approx(
        cost.perplexity_change_pct, abs=1e-3)

    loaded = load_model(out, device="cpu", dtype="float32", name="q")
    assert isinstance(loaded.model.lm_head, QuantLinear)
    assert isinstance(loaded.model.get_input_embeddings(), QuantEmbedding)
    ids = loaded.tokenizer("Once upon a time", return_tensors="pt").input_ids
    with torch.inference_mode():
        for _ in range(8):  # greedy, past any EOS
            logits = loaded.model(input_ids=ids).logits[:, -1]
            assert torch.isfinite(logits).all()
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    assert loaded.tokenizer.decode(ids[0, -8:]).strip()


def test_head_cost_is_zero_when_both_heads_are_the_same(stories_dir):
    """The measurement can tell: the int8 head against its own dequantized table costs
    nothing; against the float table it costs something."""
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.config import QuantConfig

    loaded = load_float(str(stories_dir), "cpu", "float32")
    float_table = loaded.model.get_output_embeddings().weight
    quantize_model(loaded.model, QuantConfig(method="w8a16", int8_head=True))
    head = loaded.model.lm_head
    own = head.dequantized_weight()
    ids = loaded.tokenizer("\n".join(sampled_text(stories_dir, 1, 2, 120)),
                           add_special_tokens=False).input_ids[:300]
    same = measure_head_cost(loaded.model, own, ids, window=128)
    assert same.top1_agreement == 1.0
    assert same.perplexity_float_head == pytest.approx(same.perplexity_int8_head, rel=1e-4)
    real = measure_head_cost(loaded.model, float_table, ids, window=128)
    assert real.tokens == same.tokens == len(ids) - 1
    assert real.perplexity_float_head != same.perplexity_float_head


def test_auto_with_compressed_tensors_keeps_the_head_float_and_says_why(demo_model_dir,
                                                                        tmp_path):
    out = tmp_path / "ct"
    res = run_workflow(QuantizeRequest(model_dir=str(demo_model_dir), out_dir=str(out),
                                       method="w8a8-dynamic", fmt="compressed-tensors",
                                       recipe="plain"))
    d = res.to_dict()
    assert d["int8_head"] is False and d["int8_head_layers"] is None
    assert "compressed-tensors" in d["int8_head_reason"] and d["int8_head_mode"] == "auto"
    assert "lm_head" in json.loads((out / "config.json").read_text())[
        "quantization_config"]["ignore"]
    with pytest.raises(QuantError, match="only in the native format"):
        run_workflow(QuantizeRequest(model_dir=str(demo_model_dir), out_dir=str(tmp_path / "x"),
                                     method="w8a8-dynamic", fmt="compressed-tensors",
                                     recipe="plain", int8_head="on"))
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_cli_json_reports_the_head_and_the_bare_flag_means_on(stories_dir, tmp_path, capsys):
    r = cli_in_process(capsys, "quantize", "--model", stories_dir, "--method", "w8a16", "--recipe", "plain",
             "--out", tmp_path / "a", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["int8_head"] is False and "below 15 %" in d["int8_head_reason"]
    assert "lm_head and embedding: float" in r.stderr
    r = cli_in_process(capsys, "quantize", "--model", stories_dir, "--method", "w8a16", "--recipe", "plain",
             "--int8-head", "--out", tmp_path / "b", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["int8_head"] is True and d["int8_head_mode"] == "on"
    r = cli_in_process(capsys, "quantize", "--model", stories_dir, "--method", "w8a8-dynamic", "--recipe",
             "plain", "--int8-head", "on", "--format", "compressed-tensors",
             "--out", tmp_path / "c")
    assert r.returncode != 0 and "only in the native format" in r.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def test_bench_offline_int8_head_on_runs_a_tiny_sweep(stories_dir, capsys):
    r = cli_in_process(capsys, "bench", "offline", "--model", stories_dir, "--quant", "w8a16", "--int8-head",
             "on", "--batch-sizes", "1,2", "--input-len", "8", "--output-len", "4",
             "--bandwidth", "10", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["settings"]["int8_head"] == "on"
    assert [b["batch_size"] for b in d["batches"]] == [1, 2]
    assert all(b["output_tokens"] == b["batch_size"] * 4 for b in d["batches"])
    assert any(n.startswith("lm_head and embedding: int8") for n in d["notes"])
    r = cli_in_process(capsys, "bench", "offline", "--model", stories_dir, "--int8-head", "on",
             "--batch-sizes", "1")
    assert r.returncode != 0 and "give --quant" in r.stderr
