"""Static W8A8's down_proj inputs turned at run time (engine.quant.turn, engine.kernels.turn):
the fast transform is the dense orthogonal, the turned float model computes the same function
and settles back, the turn moves an outlier channel off the static range, the native decode
step turns down's rows as the PyTorch loop does, the native format keeps the turn and the
formats that cannot carry it refuse it (docs/quantization.md, "down_proj's input turned")."""

from __future__ import annotations

import pytest
import torch
from fakes.stories_text import sampled_ids
from npu_console.engine.kernels.turn import apply_turn
from npu_console.engine.quant import io, smooth, turn
from npu_console.engine.quant.config import QuantConfig, QuantError
from npu_console.engine.quant.rotate import hadamard_factors, hadamard_orthogonal
from npu_console.engine.quant.workflow import QuantizeRequest, run_workflow
from support.kernels import assert_same_choice
from support.models import decode_both, needs_native, tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("dim", [1536, 576, 172, 64, 8960])  # odd parts 3, 9, 43, 1, 35
def test_the_fast_turn_is_the_dense_orthogonal(dim):
    signs, odd = hadamard_factors(dim, 4)
    x = torch.randn(3, 5, dim, generator=torch.Generator().manual_seed(1))
    want = (x.double() @ hadamard_orthogonal(dim, 4)).float()
    got = apply_turn(x, signs.float(), odd.float())
    assert got.shape == x.shape and got.dtype == x.dtype
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert torch.allclose(got.norm(dim=-1), x.norm(dim=-1), rtol=1e-5)  # orthogonal
    half = apply_turn(x.bfloat16(), signs.float(), odd.float())
    assert half.dtype == torch.bfloat16


def test_a_turned_float_model_computes_the_same_function_and_settles_back():
    model = tiny("llama", intermediate_size=192).model  # 192 = 64 x 3: an odd part
    ids = torch.randint(3, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    want = _logits(model, ids)
    weights = [layer.mlp.down_proj.weight.clone() for layer in model.model.layers]
    assert turn.turn_down_inputs(model) == len(model.model.layers)
    assert all(turn.is_turned(layer.mlp) for layer in model.model.layers)
    got = _logits(model, ids)
    assert torch.allclose(got, want, atol=1e-5 * want.abs().max()), (got - want).abs().max()
    # R sits between up_proj and down_proj: no smoothing factor may fold across it
    producers = {g.producer for g in smooth.find_groups(model)}
    assert not any(p.endswith("mlp.up_proj") for p in producers)
    assert any(p.endswith("post_attention_layernorm") for p in producers)
    # nothing int8 to hand the turn to: every down_proj gets its own weight back
    assert turn.settle(model) == 0
    for layer, w in zip(model.model.layers, weights):
        assert not turn.is_turned(layer.mlp) and "forward" not in vars(layer.mlp)
        assert torch.allclose(layer.mlp.down_proj.weight, w, atol=1e-6)
    assert any(g.producer.endswith("mlp.up_proj") for g in smooth.find_groups(model))
    assert torch.allclose(_logits(model, ids), want, atol=1e-5 * want.abs().max())


def test_the_turn_spreads_an_outlier_channel_under_a_static_range():
    """What static W8A8 pays for: one channel far above the rest sets the range. Turned, the
    row's peak over its typical value falls, so the step is finer for every value."""
    x = torch.randn(64, 1536, generator=torch.Generator().manual_seed(2))
    x[:, 17] *= 60
    signs, odd = hadamard_factors(1536, turn.SEED)
    turned = apply_turn(x, signs.float(), odd.float())

    def peak_over_rms(t):
        return float(t.abs().max() / t.pow(2).mean().sqrt())

    assert peak_over_rms(turned) < 0.2 * peak_over_rms(x)


def _static(turned: bool, family: str = "qwen2"):
    """A wide tiny model of `family` with an MLP width that has an odd part (768 = 256 x 3),
    static W8A8 (with SmoothQuant where the norms fold: not Gemma's), its down_proj inputs
    turned first when asked, prepared for serving as the engine loads it."""
    from npu_console.engine.quant.apply import prepare_for_serving, quantize_model
    from npu_console.engine.quant.calib import collect_stats
    from npu_console.engine.quant.config import select_layers

    model = tiny(family, hidden_size=256, intermediate_size=768).model
    cfg = QuantConfig(method="w8a8-static", smoothquant=0.5 if family == "qwen2" else None)
    if turned:
        turn.turn_down_inputs(model)
    g = torch.Generator().manual_seed(2)
    data = [torch.randint(3, 300, (1, 32), generator=g) for _ in range(4)]
    quantize_model(model, cfg, collect_stats(model, data, select_layers(model, cfg).quantize))
    if turned:
        assert turn.settle(model) == len(model.model.layers)
    prepare_for_serving(model)
    return model


@pytest.mark.parametrize("family", ["qwen2", "gemma3"])
def test_the_native_step_turns_down_inputs_like_the_pytorch_loop(family):
    """cpu_decode.c turn_row against kernels/turn.py apply_turn inside whole decode steps; held
    as test_native_decode holds static W8A8 (a share of one step, the same greedy tokens).
    A step that skipped the turn would multiply W R by unturned rows: far outside that."""
    needs_native()
    model = _static(True, family)
    down = model.model.layers[0].mlp.down_proj
    assert down.turn_signs is not None and down.turn_odd.shape == (3, 3)
    out, native, _ = decode_both(model)
    assert native.decode_plan.layers[0].turn_m == 3
    for a, b in out:
        tol = 0.02 * float(b.abs().max())
        assert (a - b).abs().max() <= tol, (a - b).abs().max()
        assert_same_choice(a, b, tol)


def test_the_native_format_keeps_the_turn_and_other_formats_refuse_it(tmp_path):
    model = _static(True)
    ids = torch.randint(3, 300, (2, 20), generator=torch.Generator().manual_seed(3))
    want = _logits(model, ids)
    io.export(model, tmp_path / "native")
    back = io.load_quantized_model(tmp_path / "native")
    downs = [layer.mlp.down_proj for layer in back.model.layers]
    assert all(d.turn_signs is not None for d in downs)
    assert torch.equal(downs[0].turn_odd, model.model.layers[0].mlp.down_proj.turn_odd)
    got = _logits(back, ids)
    assert torch.allclose(got, want, atol=1e-5 * want.abs().max()), (got - want).abs().max()
    for fmt in ("compressed-tensors", "msmodelslim"):
        with pytest.raises(QuantError, match="turns its down_proj inputs.*--turn-down off"):
            io.export(model, tmp_path / fmt, fmt=fmt)
        assert not (tmp_path / fmt).exists()


def test_the_recipe_turns_static_by_default_in_the_native_format_only(stories_dir):
    """stories260K (MLP width 172 = 4 x 43) through the workflow: w8a8-static turns every
    down_proj it keeps int8 and reports it; the same model stays in its basis where asked or
    where the format cannot carry it, and for the methods with run-time activation scales."""
    res = run_workflow(QuantizeRequest(model_dir=str(stories_dir), out_dir=None,
                                       method="w8a8-static", samples=4, seq_len=32))
    assert res.info.config["turn_down"] is True
    downs = {n: m for n, m in res.model.named_modules() if n.endswith("mlp.down_proj")}
    int8 = [n for n in downs if n in res.info.quantized]
    assert int8 and res.info.config["recipe"]["turned_down_inputs"] == 5
    assert all(downs[n].turn_signs is not None for n in int8)
    assert all(getattr(downs[n], "turn_signs", None) is None for n in downs if n not in int8)
    assert all(not turn.is_turned(layer.mlp) for layer in res.model.model.layers)
    ids = sampled_ids(str(stories_dir), 3, 2, 24)
    assert torch.isfinite(_logits(res.model, ids)).all()

    def config(**kw):
        return QuantizeRequest(model_dir="", out_dir=None, **kw).config()

    assert not config(method="w8a8-static", fmt="compressed-tensors").turn_down
    assert not config(method="w8a8-static", turn_down="off").turn_down
    assert not config(method="w8a8-static", recipe="plain").turn_down
    assert not config(method="w8a8-dynamic").turn_down
    assert not config(method="w8a16").turn_down


@pytest.mark.parametrize("kw, message", [
    ({"method": "w8a8-dynamic", "turn_down": "on"}, "--turn-down on is for w8a8-static"),
    ({"method": "w8a8-static", "turn_down": "on", "fmt": "msmodelslim"},
     "--turn-down on is for w8a8-static"),
    ({"method": "w8a8-static", "turn_down": "sideways"}, "unknown --turn-down"),
])
def test_an_impossible_turn_is_refused_before_loading(tmp_path, kw, message):
    events = []
    with pytest.raises(QuantError, match=message):
        run_workflow(QuantizeRequest(model_dir=str(tmp_path / "nowhere"), out_dir=None, **kw),
                     on_event=events.append)
    assert not any(e.stage == "load" and e.fraction for e in events)
