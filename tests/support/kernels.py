"""Builds of the native kernels for another CPU type than this one, for tests that compare
kernel paths (engine/kernels/native.py builds this CPU's own)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from npu_console.engine.kernels import native


def avx2_only_build(tmp_path):
    """The kernels compiled for an AVX2 + FMA CPU without AVX-512 (Haswell), as a CPU of that
    type builds them: this machine's own build may use AVX-512 encodings for its loops."""
    flags = native.cpu_flags()
    if native._unavailable_reason(flags):
        pytest.skip("not an AVX2 x86-64 CPU")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path / "avx2.so"
    cmd = [cc, *(f if f != "-march=native" else "-march=haswell" for f in native.FLAGS),
           "-mno-avx512f", "-o", str(out), str(native.SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    lib = ctypes.CDLL(str(out))
    native.declare(lib)
    return lib


def assert_same_choice(got, ref, tol: float) -> None:
    """Greedy agreement between two kernel paths whose logits differ by up to `tol`: where the
    reference's top-2 margin is clear (over 2 tol) both pick the same token; on a near-tie
    either pick is right, so `got`'s must be within 2 tol of the reference's best (an exact
    comparison there would flip with the CPU's summation order, AVX2 against AVX-512)."""
    import torch

    top2 = ref.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 2 * tol
    picked = got.argmax(-1)
    assert torch.equal(picked[clear], ref.argmax(-1)[clear]), (picked, ref.argmax(-1))
    picked_ref = ref.gather(-1, picked.unsqueeze(-1)).squeeze(-1)
    assert bool((top2[..., 0] - picked_ref <= 2 * tol).all()), top2[..., 0] - picked_ref


def assert_same_greedy_tokens(model, prompt: list[int], got: list[int], want: list[int],
                              rel_tol: float = 1e-3) -> None:
    """`got` (one kernel path's greedy tokens after `prompt`) equals `want` (the reference's),
    or first differs where `model`'s logits hold a near-tie (top-2 within rel_tol of the
    largest logit) and `got` took the other side of it; after that the two texts are rightly
    different and are not compared."""
    import torch

    got, want = list(got), list(want)
    assert len(got) == len(want), (got, want)
    i = next((k for k in range(len(want)) if got[k] != want[k]), None)
    if i is None:
        return
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + want[:i]])).logits[0, -1].float()
    tol = rel_tol * float(logits.abs().max())
    best = float(logits.max())
    assert best - float(logits[got[i]]) <= tol, (
        f"token {i}: {got[i]} is {best - float(logits[got[i]]):.3g} below the best "
        f"({want[i]}), more than a near-tie's {tol:.3g}: {got} != {want}")
