"""Shared fixtures. Qt must be told it has no display before any QApplication exists."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI sets it; spinning workers starve 2 cores
# compiled kernels (engine.kernels.native) are built once per run, outside the real home
os.environ.setdefault("NPU_CONSOLE_CACHE", tempfile.mkdtemp(prefix="npu-console-cache-"))

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
STORIES_DIR = SHARED / "models" / "stories260K"
NPU_SMI_FIXTURES = SHARED / "fixtures" / "npu-smi"


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """Keep recent-model lists, presets and results out of the real home."""
    monkeypatch.setenv("NPU_CONSOLE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="session")
def stories_dir() -> Path:
    if not (STORIES_DIR / "config.json").exists():
        pytest.skip("../shared/models/stories260K is not available")
    return STORIES_DIR


@pytest.fixture(scope="session")
def npu_smi_fixtures() -> Path:
    if not NPU_SMI_FIXTURES.is_dir():
        pytest.skip("../shared/fixtures/npu-smi is not available")
    return NPU_SMI_FIXTURES


@pytest.fixture(scope="session")
def think_model_dir() -> Path:
    from npu_console.engine.paths import THINK_MODEL_DIR

    if not (THINK_MODEL_DIR / "config.json").exists():
        pytest.fail(f"reasoning demo model missing at {THINK_MODEL_DIR}: run "
                    "packaging/train_think_model.sh")
    return THINK_MODEL_DIR


@pytest.fixture(scope="session")
def demo_model_dir() -> Path:
    from npu_console.engine.paths import DEMO_MODEL_DIR

    if not (DEMO_MODEL_DIR / "config.json").exists():
        pytest.fail(f"demo model missing at {DEMO_MODEL_DIR}: run packaging/train_demo_model.sh")
    return DEMO_MODEL_DIR


@pytest.fixture(scope="session")
def smollm_gguf() -> Path:
    from support.gguf import SMOLLM_GGUF

    if not SMOLLM_GGUF.is_file():
        pytest.skip("../shared/models/smollm2-135m-instruct is not available")
    return SMOLLM_GGUF
