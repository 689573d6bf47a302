"""Each family module of engine.runtime.families against transformers' own forward: a tiny
random-weight model of the family's real config class (few layers, real head sizes, its quirks
on: windows shorter than the prompts, soft-caps, partial rotary, q/k norms, biases, routed
experts). Our batched path's logits, at batch 1 and in mixed steps (decodes next to prefill
chunks of other lengths, a chunk that starts mid-prompt), match transformers' to 1e-4 with an
fp32 KV cache (only summation order differs), and within half's rounding with the default cache
(fp16 on CPU where the native kernels build); greedy tokens are equal wherever the top-2 margin
is clear.
Adding a family adds its name to FAMILIES (and its quirks to support.models.QUIRKS)."""

from __future__ import annotations

import functools

import pytest
import torch
from npu_console.engine.kernels.native import available as native_available
from npu_console.engine.runtime import families
from npu_console.engine.runtime.runner import BatchedRunner, make_runner, unbatched_reason
from npu_console.engine.runtime.scheduler import ScheduledSeq
from support.models import RunnerSeq, tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "qwen2_moe",
            "qwen3_moe"]
ATOL = 1e-4  # on logits of magnitude ~1-10; fp32 differs from HF only in summation order
# the default CPU cache keeps K and V in fp16 (11 bits): a logit moves by up to a few 1e-4 of
# the largest one; measured at most 6.3e-4 x max |logit| over these families (gemma3)
HALF_RTOL = 2e-3
MARGIN = 1e-3  # top-2 gap from which the greedy token must be the same
# Mistral's window is shorter than the prompts here (its default, 4096, is what the native
# decode tests use: support.models.tiny keeps it)
OVERRIDES = {"mistral": {"sliding_window": 6}}


def _reference(model, ids):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def _check(ours, ref, what, half=False):
    assert torch.isfinite(ours).all(), what
    diff = (ours - ref).abs().max().item()
    tol = HALF_RTOL * ref.abs().max().item() if half else ATOL
    assert diff < tol, f"{what}: max |diff| {diff:.2e} (tolerance {tol:.2e})"
    top2 = ref.topk(2).values
    clear = (top2[0] - top2[1]) > max(MARGIN, 2 * tol)
    if clear:
        assert ours.argmax().item() == ref.argmax().item(), what


@pytest.mark.parametrize("kv", ["float32", "auto"])
@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("family", FAMILIES)
def test_batched_logits_match_transformers(family, kernels, kv):
    loaded = tiny(family, **OVERRIDES.get(family, {}))
    model = loaded.model
    if family == "qwen2":  # HF initialises biases to zero: give them something to compute
        g = torch.Generator().manual_seed(6)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.Linear) and m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.5)
    runner = make_runner(model, num_slots=4, max_len=64, linear_kernels=kernels, kv_dtype=kv)
    assert isinstance(runner, BatchedRunner) and runner.family_name == family
    half = runner.kv.k.dtype == torch.float16
    assert half == (kv == "auto" and native_available())
    check = functools.partial(_check, half=half)
    g = torch.Generator().manual_seed(3)
    full = {k: torch.randint(3, 295, (n,), generator=g).tolist()
            for k, n in (("a", 26), ("b", 16), ("c", 19))}
    ref = {k: _reference(model, ids) for k, ids in full.items()}
    a = RunnerSeq(full["a"][:20], 1)
    b = RunnerSeq(full["b"][:11], 0)
    c = RunnerSeq(full["c"][:13], 3)

    # batch 1: one prompt, longer than the sliding windows
    out = runner.execute([ScheduledSeq(a, 0, 20)], 0)
    check(out[0], ref["a"][19], f"{family} batch 1 prefill")
    # mixed: a decode next to the first chunk of another prompt (that chunk does not sample)
    a.ids.append(full["a"][20])
    out = runner.execute([ScheduledSeq(a, 20, 1), ScheduledSeq(b, 0, 5)], 1)
    assert out.shape[0] == 1
    check(out[0], ref["a"][20], f"{family} decode beside a prefill chunk")
    # mixed: a decode, a chunk from mid-prompt, and a whole prompt of a third length
    a.ids.append(full["a"][21])
    out = runner.execute([ScheduledSeq(a, 21, 1), ScheduledSeq(b, 5, 6),
                          ScheduledSeq(c, 0, 13)], 1)
    for row, (seq, k) in enumerate(((a, "a"), (b, "b"), (c, "c"))):
        check(out[row], ref[k][seq.num_tokens - 1], f"{family} mixed step row {row}")
    # decode-only steps of three lengths (the native step where the family has it)
    for _ in range(3):
        for seq, k in ((a, "a"), (b, "b"), (c, "c")):
            seq.ids.append(full[k][seq.num_tokens])
        items = [ScheduledSeq(s, s.num_tokens - 1, 1) for s in (a, b, c)]
        out = runner.execute(items, 3)
        for row, (seq, k) in enumerate(((a, "a"), (b, "b"), (c, "c"))):
            check(out[row], ref[k][seq.num_tokens - 1], f"{family} decode row {row}")


@pytest.mark.parametrize("family", ["qwen3", "gemma2"])
def test_a_half_cache_rounds_nothing_before_the_first_token(family):
    """A prompt's first chunk attends to the keys and values it has just computed, not to their
    fp16 copies in the cache: its logits equal the fp32 cache's bit for bit. A later chunk
    reads the stored rows, so there half's rounding shows."""
    model = tiny(family, **OVERRIDES.get(family, {})).model
    ids = torch.randint(3, 295, (24,), generator=torch.Generator().manual_seed(8)).tolist()
    out = {}
    for kv in ("float32", "float16"):
        runner = make_runner(model, num_slots=2, max_len=64, kv_dtype=kv)
        seq = RunnerSeq(ids[:16], 0)
        first = runner.execute([ScheduledSeq(seq, 0, 16)], 0)
        seq.ids.extend(ids[16:])
        out[kv] = first, runner.execute([ScheduledSeq(seq, 16, 8)], 0)
    assert torch.equal(out["float16"][0], out["float32"][0])
    later = (out["float16"][1] - out["float32"][1]).abs().max().item()
    assert 0 < later < HALF_RTOL * out["float32"][1].abs().max().item()


def test_native_decode_only_where_the_family_math_is_covered():
    """Every dense family decodes on the native step, windows included; the MoE families keep
    the PyTorch loop and say why."""
    from support.models import needs_native

    needs_native()
    for family in FAMILIES:
        runner = make_runner(tiny(family).model, num_slots=2, max_len=64)
        covered = not family.endswith("_moe")
        assert (runner.decode_plan is not None) == covered, (family, runner.decode_plan_reason)
        if not covered:
            assert family in runner.decode_plan_reason
    windowed = make_runner(tiny("mistral", sliding_window=8).model, num_slots=2, max_len=64)
    assert windowed.decode_plan is not None and windowed.family.windows == [8, 8]


def test_unknown_architecture_runs_unbatched_and_says_so():
    import transformers as tf

    cfg = tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=300, n_positions=128)
    model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    assert families.module_for(model) is None
    assert unbatched_reason(model) == "runs unbatched: no native support for GPT2LMHeadModel"
    runner = make_runner(model, num_slots=2, max_len=64)
    assert runner.path_kind == "fallback"
    seq = RunnerSeq(list(range(5, 17)), 0)
    seq.extra = {}  # the fallback keeps each sequence's HF cache there
    out = runner.execute([ScheduledSeq(seq, 0, 12)], 0)
    assert torch.allclose(out[0], _reference(model, seq.ids)[-1], atol=1e-5)


def test_registry_names_every_family_module():
    archs = families.architectures()
    for name in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "MistralForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                 "Phi3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
        assert name in archs


@pytest.mark.parametrize("method", ["w8a16", "w8a8-dynamic"])
@pytest.mark.parametrize("family", FAMILIES)
def test_int8_methods_match_the_quantized_model(family, method):
    """Each INT8 method (int8 head too) on each family: our batched path equals transformers'
    forward of the same quantized model (the int8 layers are the same modules in both; the
    native decode step, where it runs, differs only in summation order)."""
    from npu_console.engine.quant.apply import quantize_model
    from npu_console.engine.quant.config import QuantConfig

    model = tiny(family, **OVERRIDES.get(family, {})).model
    info = quantize_model(model, QuantConfig(method=method, int8_head=True))
    if family.endswith("_moe"):  # the routed experts are int8 as well (4 in each of 2 layers)
        assert sum(".mlp.experts." in n for n in info.quantized) == 2 * 4 * 3
    # fp32 cache: what this compares is the int8 layers (tests/test_native_decode.py holds the
    # fp16 cache to the fp32 one)
    runner = make_runner(model, num_slots=2, max_len=64, kv_dtype="float32")
    assert runner.path_kind == "batched"
    g = torch.Generator().manual_seed(4)
    full = [torch.randint(3, 295, (n,), generator=g).tolist() for n in (18, 11)]
    ref = [_reference(model, ids) for ids in full]
    seqs = [RunnerSeq(full[0][:15], 0), RunnerSeq(full[1][:8], 1)]
    out = runner.execute([ScheduledSeq(s, 0, s.num_tokens) for s in seqs], 0)
    tol = 2e-3  # int8 activations may round differently across summation orders
    for row, s in enumerate(seqs):
        assert (out[row] - ref[row][s.num_tokens - 1]).abs().max() < tol
    for _ in range(3):
        for s, ids in zip(seqs, full):
            s.ids.append(ids[s.num_tokens])
        out = runner.execute([ScheduledSeq(s, s.num_tokens - 1, 1) for s in seqs], 2)
        for row, s in enumerate(seqs):
            assert (out[row] - ref[row][s.num_tokens - 1]).abs().max() < tol, (family, row)


@pytest.mark.parametrize("family,rope", [
    *[(f, None) for f in FAMILIES],
    ("llama", {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}),
    ("llama", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}),
])
def test_rotary_rows_from_the_table_equal_the_model_s_own(family, rope):
    """A family reads its rotary rows from a table the model's rotary_emb computed once (on
    CPU, RoPE types whose frequencies do not follow the sequence length): every row equals
    what rotary_emb gives for the step's positions alone, bit for bit, each layer kind
    (Gemma 3's local and global); the table grows past its first length. "dynamic" RoPE
    follows the positions each step, so it is computed each step, as transformers does."""
    overrides = {"rope_parameters": rope, "max_position_embeddings": 64} if rope else {}
    model = tiny(family, **overrides).model
    fam, why = families.build(model, max_len=600)
    assert fam is not None, why
    h = torch.zeros(1, 3, model.config.hidden_size)
    kinds = sorted(set(model.config.layer_types)) if family == "gemma3" else [None]
    with torch.inference_mode():
        for pos in ([0, 7, 3], [100, 5, 99], [599, 300, 1]):  # 599: past the first table
            pos_t = torch.tensor(pos)
            for kind in kinds:
                want = model.model.rotary_emb(h, pos_t[None], *([kind] if kind else []))
                got = fam.rope_rows(h, pos_t, kind)
                assert torch.equal(got[0], want[0][0]) and torch.equal(got[1], want[1][0])
    assert fam._rope_is_static == (rope is None or rope["rope_type"] != "dynamic")
    assert bool(fam._rope_cache) == fam._rope_is_static
