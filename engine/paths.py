"""Where the application's shipped data and per-user state live."""

from __future__ import annotations

import os
from pathlib import Path

from .. import assets as _assets

ASSETS_DIR = Path(_assets.__file__).resolve().parent
DEMO_MODEL_DIR = ASSETS_DIR / "models" / "demo"
# a second tiny model that thinks in <think> blocks before it answers (engine.demo.train_think)
THINK_MODEL_DIR = ASSETS_DIR / "models" / "demo-think"
CALIB_DIR = ASSETS_DIR / "calib"
# held-out evaluation texts: no recipe is chosen on them (assets/eval/README.md)
EVAL_DIR = ASSETS_DIR / "eval"


def state_dir() -> Path:
    """Per-user state (recent models, presets, conversations, results); XDG on Linux.

    NPU_CONSOLE_HOME overrides it, which tests use to stay out of the user's home.
    """
    override = os.environ.get("NPU_CONSOLE_HOME")
    if override:
        base = Path(override)
    else:
        base = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "npu-console"
    base.mkdir(parents=True, exist_ok=True)
    return base


def cache_dir() -> Path:
    """Rebuildable per-user files (compiled kernels); NPU_CONSOLE_CACHE overrides it."""
    override = os.environ.get("NPU_CONSOLE_CACHE")
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "npu-console"
