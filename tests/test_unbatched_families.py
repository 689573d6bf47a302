"""A model whose architecture no family module knows still loads and runs through its own
transformers forward, and everything that shows a model says so in the same words: the engine's
ModelInfo, `/v1/models`, the Models page (its row tooltip and the folder card), and
`npu-console doctor --model`. The folder check's list of batched architectures is the registry's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
from support.api import own_engine
from support.models import _tokenizer, tiny

REASON = "runs unbatched: no native support for GPT2LMHeadModel"


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    import transformers as tf

    cfg = tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=300, n_positions=128,
                        bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    d = tmp_path_factory.mktemp("gpt2") / "tiny-gpt2"
    model.save_pretrained(d)
    _tokenizer(300).save_pretrained(d)
    return d


def test_the_folder_list_is_the_registry():
    from npu_console.engine.models.folder import BATCHED_ARCHITECTURES
    from npu_console.engine.runtime import families

    assert BATCHED_ARCHITECTURES == set(families.architectures())


def test_unknown_family_loads_runs_and_says_so(gpt2_dir):
    from npu_console.engine.api.routes_misc import model_card
    from npu_console.engine.models import load_model

    loaded = load_model(gpt2_dir, device="cpu", dtype="float32", name="g")
    with own_engine(None) as eng:
        info = eng.add_model(loaded, name="g").result(300)
        gemma = eng.add_model(tiny("gemma3"), name="gemma").result(300)
        res = eng.generate(GenerationRequest(prompt_token_ids=list(range(5, 17)), params=SamplingParams(
            max_tokens=6, temperature=0, ignore_eos=True), model="g"))
    assert info.path_kind == "fallback" and info.unbatched_reason == REASON
    assert gemma.path_kind == "batched" and gemma.unbatched_reason == ""
    ids = torch.tensor([list(range(5, 17))])
    with torch.inference_mode():
        want = loaded.model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                                     eos_token_id=None, pad_token_id=0)[0, 12:].tolist()
    assert list(res.token_ids) == want
    assert model_card(info)["unbatched_reason"] == REASON
    assert model_card(gemma)["unbatched_reason"] == ""


def test_models_page_says_unbatched(gpt2_dir):
    import dataclasses

    from npu_console.console.pages.models import kernels_tip
    from npu_console.engine.models.folder import inspect_model_folder
    from npu_console.engine.runtime.types import ModelInfo

    assert inspect_model_folder(gpt2_dir).unbatched_reason == REASON
    base = ModelInfo(name="m", path="/m", architecture="GPT2LMHeadModel", dtype="float32",
                     quantization=None, device="cpu", max_context=8, num_parameters=1,
                     weight_bytes=1, kv_bytes=1, path_kind="fallback", created=0.0)
    assert kernels_tip(dataclasses.replace(base, unbatched_reason=REASON)).startswith(REASON)
    assert REASON not in kernels_tip(base)


def test_doctor_names_a_model_that_runs_unbatched(gpt2_dir, tmp_path):
    out = subprocess.run([sys.executable, "-m", "npu_console.cli.main", "doctor",
                          "--json", "--model", str(gpt2_dir)],
                         capture_output=True, text=True, timeout=300, check=False)
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["model"]["status"] == "warn" and REASON in checks["model"]["detail"]
    loaded = tiny("phi3")
    loaded.model.save_pretrained(tmp_path / "phi3")
    loaded.tokenizer.save_pretrained(tmp_path / "phi3")
    from npu_console.engine.doctor import check_model

    ok = check_model(tmp_path / "phi3")
    assert ok.status == "ok" and ok.detail.endswith(": batched")
