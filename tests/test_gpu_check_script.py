"""tests/device/gpu_check.sh in its no-GPU mode, as CI runs it: it says there is no GPU, installs
nothing, runs doctor, records every CUDA step as skipped in $OUT/gpu_check.json, writes its log
and exits 0, quickly."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "device" / "gpu_check.sh"


@pytest.mark.slow
def test_gpu_check_without_a_gpu_skips_the_cuda_steps_and_exits_0(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "GPU_CHECK_CUDA": "0"}
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=50, check=False)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NO NVIDIA GPU" in p.stdout and "nothing is installed" in p.stdout
    assert took < 45

    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["cuda"]["steps"] == "skipped"
    assert summary["cuda"]["skipped_because"] == "GPU_CHECK_CUDA=0"
    steps = {s["name"]: s for s in summary["steps"]}
    assert steps["doctor"]["status"] == "passed"  # the CPU-capable step still runs
    assert steps["doctor"]["result"]["checks"]
    cuda_steps = [s for name, s in steps.items() if name != "doctor"]
    assert {"kernels", "parity-stories260K", "parity-demo", "pytest-gpu",
            "serve-qwen05b", "bench-smollm2-w8a8-dynamic"} <= steps.keys()
    assert all(s["status"] == "skipped" and s["reason"].startswith("no CUDA device")
               for s in cuda_steps)
    assert summary["failed"] == 0 and summary["skipped"] == len(cuda_steps)
    log = (tmp_path / "gpu_check.log").read_text()
    assert "NO NVIDIA GPU" in log and "gpu_check.json" in log
