"""Self-generated calibration must not depend on the CPU (issue 32): the same samples where
ATen, MKL and oneDNN run their AVX-512 code and where they are held to AVX2 (what an AVX2-only
AMD EPYC runs), and the same as before when nothing changed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from npu_console.engine.quant import selfcalib

# what an AVX2-only CPU runs: ATen's AVX2 kernels, MKL and oneDNN held to AVX2, our native
# kernels built for haswell
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "DNNL_MAX_CPU_ISA": "AVX2", "NPU_CONSOLE_KERNEL_ARCH": "haswell"}

SCRIPT = """
import hashlib, json, sys, torch
from npu_console.engine.models.loader import load_model
from npu_console.engine.quant.selfcalib import self_calibration
loaded = load_model(sys.argv[1], device="cpu", dtype="float32")
sc = self_calibration(loaded.model, loaded.tokenizer, n=4, new_tokens=48, seed=int(sys.argv[2]))
rows = [s[0].tolist() for s in sc.samples]
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                  "hash": hashlib.sha256(json.dumps(rows).encode()).hexdigest(),
                  "description": sc.description}))
"""


def _samples_hash(model_dir, seed: int, extra_env: dict[str, str]) -> dict:
    env = {**os.environ, **extra_env}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(model_dir), str(seed)], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not torch.cpu._is_avx2_supported(), reason="needs an x86 CPU with AVX2")
def test_samples_are_the_same_on_the_avx2_build(stories_dir):
    native = _samples_hash(stories_dir, 0, {})
    held = _samples_hash(stories_dir, 0, AVX2_ENV)
    assert held["capability"] == "AVX2"
    assert "float64" in native["description"]
    assert native["hash"] == held["hash"], (native, held)


def test_draw_is_inverse_cdf_over_the_top_p_set():
    probs = torch.tensor([0.05, 0.5, 0.3, 0.1, 0.05], dtype=torch.float64)
    # sorted: 1 (0.5), 2 (0.3), 3 (0.1), 0 (0.05), 4 (0.05): top-p 0.95 keeps 1, 2, 3, 0
    # (0.05 at id 0 before id 4: ties by id), cumulative 0.5, 0.8, 0.9, 0.95
    assert selfcalib._draw(probs, 0.0) == 1
    assert selfcalib._draw(probs, 0.5) == 1  # 0.5 * 0.95 = 0.475 < 0.5
    assert selfcalib._draw(probs, 0.6) == 2  # 0.57
    assert selfcalib._draw(probs, 0.9) == 3
    assert selfcalib._draw(probs, 0.99) == 0  # never id 4: outside the top-p set
    assert selfcalib._draw(probs, 0.999999) == 0


def test_same_seed_same_samples_in_process(stories_dir):
    from npu_console.engine.models.loader import load_model

    loaded = load_model(stories_dir, device="cpu", dtype="float32")
    a = selfcalib.self_calibration(loaded.model, loaded.tokenizer, n=2, new_tokens=16, seed=3)
    b = selfcalib.self_calibration(loaded.model, loaded.tokenizer, n=2, new_tokens=16, seed=3)
    c = selfcalib.self_calibration(loaded.model, loaded.tokenizer, n=2, new_tokens=16, seed=4)
    digest = [hashlib.sha256(json.dumps([s[0].tolist() for s in x.samples]).encode()).digest()
              for x in (a, b, c)]
    assert digest[0] == digest[1]
    assert digest[2] != digest[0]  # another seed draws other samples
    # the float model itself is left as it was (the float64 writer is a copy)
    assert next(loaded.model.parameters()).dtype == torch.float32


def test_cache_key_survives_the_gguf_cache_touching_its_meta_json(tmp_path, monkeypatch):
    """The GGUF cache rewrites a converted model's meta.json on every load (its eviction
    order); the samples' cache must not follow it, or every load regenerates them (minutes),
    while a changed weight file must still give a new key."""
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "config.json").write_text("{}")
    (model / "meta.json").write_text('{"used": 1}')
    before = selfcalib._cache_path(model, 16, 128, 0)
    (model / "meta.json").write_text('{"used": 22}')
    os.utime(model / "meta.json", (1e9, 1e9))
    assert selfcalib._cache_path(model, 16, 128, 0) == before
    (model / "model.safetensors").write_bytes(b"other weights")
    assert selfcalib._cache_path(model, 16, 128, 0) != before
    assert selfcalib._cache_path(model, 16, 128, 1) != before
