"""Each model family of the batched path (Llama, Qwen2 with q/k/v bias, Qwen3 with q/k norm,
Mistral) gives the same greedy tokens as transformers' generate, batched with prefix reuse and
chunked prefill. Tiny random-weight configurations of the real HF classes (no download)."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
from support.api import own_engine
from support.kernels import assert_same_greedy_tokens
from support.models import WIDE, RunnerSeq, needs_native, tiny, wide


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral"])
def test_family_greedy_matches_generate(family):
    loaded = tiny(family)
    g = torch.Generator().manual_seed(1)
    shared = torch.randint(5, 295, (12,), generator=g).tolist()
    prompts = [shared + torch.randint(5, 295, (n,), generator=g).tolist() for n in (1, 9, 40)]
    prompts.append(torch.randint(5, 295, (70,), generator=g).tolist())  # chunked: budget 32
    with own_engine(None, max_batched_tokens=32, min_prefix_tokens=4) as eng:
        info = eng.add_model(loaded).result(60)
        assert info.path_kind == "batched"
        first = eng.generate(GenerationRequest(prompt_token_ids=prompts[0], params=SamplingParams(
            max_tokens=20, temperature=0, ignore_eos=True)))
        hs = [eng.submit(GenerationRequest(prompt_token_ids=p, params=SamplingParams(
            max_tokens=20, temperature=0, ignore_eos=True))) for p in prompts]
        res = [h.result(60) for h in hs]
    assert res[1].finish.usage.cached_tokens >= 12  # shared prefix came from the cache
    for p, r in zip(prompts, res):
        with torch.inference_mode():
            out = loaded.model.generate(torch.tensor([p]), max_new_tokens=20, min_new_tokens=20,
                                        do_sample=False, eos_token_id=None, pad_token_id=0)
        assert_same_greedy_tokens(loaded.model, p, r.token_ids, out[0, len(p):].tolist())
    assert first.token_ids == res[0].token_ids


@pytest.mark.parametrize("tied", [True, False])
def test_transposed_lm_head_keeps_greedy_tokens(monkeypatch, tied):
    """The CPU layout for big heads (stored transposed; a tied embedding shares it), forced
    on a tiny model: same greedy tokens as generate on an untouched copy, same memory."""
    import npu_console.engine.runtime.runner as runner_mod

    monkeypatch.setattr(runner_mod, "HEAD_TRANSPOSE_MIN_BYTES", 0)
    loaded = tiny("qwen2", tie_word_embeddings=tied)
    pristine = tiny("qwen2", tie_word_embeddings=tied)
    params_before = sum(p.numel() for p in loaded.model.parameters())
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(5, 295, (n,), generator=g).tolist() for n in (3, 17, 50)]
    with own_engine(loaded, timeout=60, max_batched_tokens=32) as eng:
        res = [h.result(60) for h in [eng.submit(GenerationRequest(
            prompt_token_ids=p, params=SamplingParams(max_tokens=16, temperature=0,
                                                      ignore_eos=True))) for p in prompts]]
    head = loaded.model.lm_head.weight
    assert not head.is_contiguous() and head.t().is_contiguous()  # the layout was applied
    assert (loaded.model.model.embed_tokens.weight is head) == tied
    assert sum(p.numel() for p in loaded.model.parameters()) == params_before
    for p, r in zip(prompts, res):
        with torch.inference_mode():
            out = pristine.model.generate(torch.tensor([p]), max_new_tokens=16,
                                          min_new_tokens=16, do_sample=False,
                                          eos_token_id=None, pad_token_id=0)
        assert_same_greedy_tokens(pristine.model, p, r.token_ids, out[0, len(p):].tolist())


def test_batched_decode_in_any_slot_order_equals_decoding_alone():
    """Decode attention runs in slot order (a cache view when the slots form a range); rows
    must come back in the caller's order whatever the slots are."""
    from npu_console.engine.runtime.runner import BatchedRunner
    from npu_console.engine.runtime.scheduler import ScheduledSeq

    model = tiny("qwen2").model
    runner = BatchedRunner(model, num_slots=6, max_len=128)
    g = torch.Generator().manual_seed(3)
    for slots in ([4, 1, 5, 0], [2, 3, 4, 5], [5, 4, 3, 2]):  # scattered, a range, reversed
        seqs = [RunnerSeq(torch.randint(5, 295, (n,), generator=g).tolist(), s)
                for n, s in zip((7, 19, 3, 30), slots)]
        with torch.inference_mode():
            for s in seqs:
                s.ids.append(int(runner.execute([ScheduledSeq(s, 0, len(s.ids))], 0)[0].argmax()))
            alone = torch.cat([runner.execute([ScheduledSeq(s, len(s.ids) - 1, 1)], 1)
                               for s in seqs])
            together = runner.execute([ScheduledSeq(s, len(s.ids) - 1, 1) for s in seqs],
                                      len(seqs))
        assert torch.allclose(together, alone, atol=1e-5), slots


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3", "phi3"])
def test_native_decode_products_keep_greedy_tokens(family):
    """fp32 decode products on the native kernel (engine.runtime.cpu_linear), 12 sequences
    decoding together next to chunked prefills: same greedy tokens as generate, and the model
    itself is left as transformers built it."""
    needs_native()
    loaded = wide(family)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(5, 295, (n,), generator=g).tolist()
               for n in (1, 2, 3, 5, 8, 13, 21, 34, 40, 6, 9, 17)]
    with own_engine(None, max_batched_tokens=48) as eng:
        info = eng.add_model(loaded).result(60)
        hs = [eng.submit(GenerationRequest(prompt_token_ids=p, params=SamplingParams(
            max_tokens=24, temperature=0, ignore_eos=True))) for p in prompts]
        res = [h.result(60) for h in hs]
    assert info.linear_kernels == "native"
    assert info.decode_step == "native"  # decode-only steps: one native call (native_decode.py)
    assert info.kv_dtype == "float16"  # the CPU default with the native kernels: tokens kept
    model = loaded.model
    assert model.lm_head.weight.is_contiguous()  # kept as nn.Linear stores it
    assert not any("forward" in vars(m) for m in model.modules())
    for p, r in zip(prompts, res):
        with torch.inference_mode():
            out = model.generate(torch.tensor([p]), max_new_tokens=24, min_new_tokens=24,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
        assert_same_greedy_tokens(model, p, r.token_ids, out[0, len(p):].tolist())


def test_native_and_torch_products_give_the_same_logits():
    """One mixed step (decodes of several lengths + a prefill chunk) through both kernels."""
    needs_native()
    from npu_console.engine.runtime.runner import BatchedRunner
    from npu_console.engine.runtime.scheduler import ScheduledSeq

    model = wide("qwen2").model
    runners = {k: BatchedRunner(model, num_slots=8, max_len=128, linear_kernels=k)
               for k in ("auto", "torch")}
    assert runners["auto"].linear_kernels == "native"
    assert runners["torch"].linear_kernels == "torch"
    g = torch.Generator().manual_seed(5)
    ids = [torch.randint(5, 295, (n,), generator=g).tolist() for n in (4, 11, 30, 2, 7, 19)]
    out = {}
    for kind, runner in runners.items():
        seqs = [RunnerSeq(t, slot) for slot, t in enumerate(ids)]
        with torch.inference_mode():
            for s in seqs[:5]:  # prefill five, then decode them beside the sixth's prefill
                runner.execute([ScheduledSeq(s, 0, len(s.ids) - 1)], 0)
            out[kind] = runner.execute(
                [ScheduledSeq(s, len(s.ids) - 1, 1) for s in seqs[:5]]
                + [ScheduledSeq(seqs[5], 0, len(seqs[5].ids))], 5)
    assert out["auto"].shape == (6, 300)
    assert torch.allclose(out["auto"], out["torch"], rtol=1e-4, atol=1e-4)


def test_without_the_native_library_the_runner_keeps_torch(monkeypatch):
    from npu_console.engine.runtime import cpu_linear
    from npu_console.engine.runtime.runner import BatchedRunner

    monkeypatch.setattr(cpu_linear, "native_f32_available", lambda: False)
    model = tiny("qwen2", **WIDE).model
    assert BatchedRunner(model, num_slots=2, max_len=64).linear_kernels == "torch"
    bf16 = tiny("llama", **WIDE).model.to(torch.bfloat16)
    monkeypatch.undo()
    # bf16 weights are not the fp32 kernel's: the runner says so instead of half-applying it
    assert BatchedRunner(bf16, num_slots=2, max_len=64).linear_kernels == "torch"


def test_a_head_re_laid_out_by_another_runner_is_still_read_right(monkeypatch):
    """Two runners on one model: a "torch" runner stores the big head transposed in place
    (use_transposed_head); the native runner built before it must not read that storage as
    nn.Linear's layout."""
    needs_native()
    import npu_console.engine.runtime.runner as runner_mod
    from npu_console.engine.runtime.runner import BatchedRunner
    from npu_console.engine.runtime.scheduler import ScheduledSeq

    model = wide("qwen2").model
    native = BatchedRunner(model, num_slots=2, max_len=64)
    seq = RunnerSeq(list(range(5, 25)), 0)
    with torch.inference_mode():
        before = native.execute([ScheduledSeq(seq, 0, len(seq.ids))], 0)
    monkeypatch.setattr(runner_mod, "HEAD_TRANSPOSE_MIN_BYTES", 0)
    BatchedRunner(model, num_slots=2, max_len=64, linear_kernels="torch")
    assert not model.lm_head.weight.is_contiguous()  # the head was re-laid out
    with torch.inference_mode():
        after = native.execute([ScheduledSeq(seq, 0, len(seq.ids))], 0)
    assert torch.allclose(before, after, rtol=1e-4, atol=1e-4)
