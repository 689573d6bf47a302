"""Families through GGUF, as a user brings them: a tiny random-weight model written with the
`gguf` package's writer (llama.cpp's layout and names), loaded by our one load path (GGUF ->
transformers' reader), then served by our batched path. The file is faithful (transformers'
forward of what it read = the original model's, exactly: F32 tensors) and our batched logits,
batch 1 and a mixed step, match that forward to 1e-4."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine.runtime.runner import make_runner
from npu_console.engine.runtime.scheduler import ScheduledSeq
from support.gguf import write_model_gguf
from support.models import RunnerSeq, tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

# what transformers' GGUF reader can express: Qwen3's head_dim is not read (128 assumed),
# Gemma 3's window pattern and query scale are its defaults (5 local : 1 global, 256)
SHAPES = {"qwen2": {}, "qwen3": {"head_dim": 128},
          "gemma3": {"num_hidden_layers": 6, "layer_types": None, "query_pre_attn_scalar": 256}}


@pytest.mark.slow  # the GGUF -> folder conversion runs in a child process (~10 s on a quiet box)
@pytest.mark.parametrize("family", sorted(SHAPES))
def test_gguf_written_family_loads_and_runs_batched(tmp_path, family):
    from npu_console.engine.models import load_model

    original = tiny(family, **SHAPES[family]).model
    path = write_model_gguf(original, tmp_path / f"{family}.gguf")
    loaded = load_model(path, device="cpu", dtype="float32", name=family)
    model = loaded.model
    assert type(model) is type(original)
    g = torch.Generator().manual_seed(5)
    full = [torch.randint(3, 295, (n,), generator=g).tolist() for n in (21, 12)]
    with torch.inference_mode():
        ref = [model(input_ids=torch.tensor([ids])).logits[0] for ids in full]
        assert torch.equal(ref[0], original(input_ids=torch.tensor([full[0]])).logits[0])
    # an fp32 cache: the comparison is to 1e-4 (tests/test_model_families.py holds the default
    # fp16 cache to its own tolerance)
    runner = make_runner(model, num_slots=2, max_len=64, kv_dtype="float32")
    assert runner.path_kind == "batched" and runner.family_name == family
    a, b = RunnerSeq(full[0][:20], 0), RunnerSeq(full[1][:12], 1)
    out = runner.execute([ScheduledSeq(a, 0, 20)], 0)
    assert (out[0] - ref[0][19]).abs().max() < 1e-4
    a.ids.append(full[0][20])
    out = runner.execute([ScheduledSeq(a, 20, 1), ScheduledSeq(b, 0, 12)], 1)
    assert (out[0] - ref[0][20]).abs().max() < 1e-4
    assert (out[1] - ref[1][11]).abs().max() < 1e-4
