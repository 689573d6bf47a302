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
