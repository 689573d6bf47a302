"""Where the development machine keeps the real fixtures that are too large, or not ours, to
live in the repository: the TinyStories checkpoint stories260K, the SmolLM2-135M-Instruct GGUF
and real npu-smi captures, in a `shared` folder beside the checkout. Test setup only: the
tests and the docs' screenshot scripts (packaging/screenshot*.py) look here and do without
what is missing; the product itself never names a path outside the repository
(tests/test_no_outside_paths.py)."""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
SHARED = CHECKOUT.parent / "shared"
MODELS = SHARED / "models"
STORIES_DIR = MODELS / "stories260K"
SMOLLM2_GGUF = MODELS / "smollm2-135m-instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
NPU_SMI_FIXTURES = SHARED / "fixtures" / "npu-smi"
