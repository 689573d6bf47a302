"""Helpers for GUI tests and scripts: build a real window on a temp settings file, wait for models."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtWidgets import QApplication

from .app import LaunchOptions, build_window


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
