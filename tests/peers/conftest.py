"""The peers lane's shared set-up: SmolLM2 as the Hugging Face folder our GGUF conversion writes,
its compressed-tensors exports written by `npu-console quantize`, and one `vllm serve` at a
time (tests/support/vllm.py). Every module here has
`pytestmark = [pytest.mark.peers, pytest.mark.slow]` (`make peers`; out of every other lane)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.vllm import OneAtATime, need_vllm

# the methods our compressed-tensors export writes (engine/quant/io.py); w8a16 and per-group
# scales are refused at export time
CT_METHODS = ("w8a8-dynamic", "w8a8-static")


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_gguf) -> Path:
    """The float Hugging Face folder our GGUF conversion writes (what vLLM is given)."""
    from npu_console.engine.models.gguf_convert import ensure_converted

    return Path(ensure_converted(smollm2_gguf))


@pytest.fixture(scope="session")
def ct_exports(smollm2_hf) -> dict[str, Path]:
    """{method: folder} of `npu-console quantize --format compressed-tensors` (plain recipe,
    a small calibration: what is compared is the two engines on the same checkpoint). Kept in
    the run's cache ($NPU_CONSOLE_CACHE: `make peers` keeps it across runs; minutes each on a
    busy 2-core machine); the quantization itself is tested in the default lane."""
    need_vllm()  # no point in minutes of quantization without vLLM to load them
    out = Path(os.environ["NPU_CONSOLE_CACHE"]) / "peers-exports"
    folders = {}
    for method in CT_METHODS:
        dest = out / f"{smollm2_hf.name}-{method}-ct"
        if (dest / "config.json").is_file():  # written atomically: complete when there
            folders[method] = dest
            continue
        res = subprocess.run(
            [sys.executable, "-m", "npu_console.cli.main", "quantize", "--model",
             str(smollm2_hf), "--method", method, "--recipe", "plain", "--samples", "16",
             "--seq-len", "128", "--format", "compressed-tensors", "--out", str(dest),
             "--json"], capture_output=True, text=True, timeout=1800, check=False)
        assert res.returncode == 0, res.stderr[-3000:]
        cfg = json.loads((dest / "config.json").read_text())
        assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"
        folders[method] = dest
    return folders


@pytest.fixture(scope="session")
def vllm_servers():
    servers = OneAtATime()
    yield servers
    servers.close()
