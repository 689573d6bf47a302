"""Helpers for GUI tests and scripts: build a real window on a temp settings file, wait for models."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

from npu_console.console.app import LaunchOptions, build_window
from PySide6.QtWidgets import QApplication


def make_window(settings_dir: str | Path, **options):
    """A real MainWindow; `options` go to LaunchOptions (model="" means: load nothing)."""
    options.setdefault("model", "")
    options.setdefault("settings_path", str(Path(settings_dir) / "console.ini"))
    return build_window(LaunchOptions(**options))


def pump_until(predicate, timeout: float = 30.0, step: float = 0.01) -> bool:
    """Process Qt events until predicate() is true (scripts; tests use qtbot.waitUntil)."""
    app = QApplication.instance()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        app.processEvents()
        if predicate():
            return True
        time.sleep(step)
    app.processEvents()
    return predicate()


def model_names(window) -> list[str]:
    return [m.name for m in window.ctx.engine_host.models()]


@contextmanager
def window_with_models(home: str | Path, model_dir: str | Path, names: list[str], page: str,
                       timeout: float = 180.0):
    """A real window whose engine has `model_dir` loaded under each of `names`, showing `page`.

    NPU_CONSOLE_HOME points at `home` meanwhile, so presets and histories stay out of the user's
    state. The window is closed on exit (engine and threads shut down)."""
    previous = os.environ.get("NPU_CONSOLE_HOME")
    os.environ["NPU_CONSOLE_HOME"] = str(home)
    win = make_window(home, model="")
    try:
        host = win.ctx.engine_host
        host.start()
        for name in names:
            host.load(model_dir, name=name)
        if not pump_until(lambda: model_names(win) == names, timeout=timeout):
            raise TimeoutError(f"models {names} did not load within {timeout:.0f} s")
        win.show_page(page)
        yield win
    finally:
        win.close()
        if previous is None:
            os.environ.pop("NPU_CONSOLE_HOME", None)
        else:
            os.environ["NPU_CONSOLE_HOME"] = previous
