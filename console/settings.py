"""Persistent GUI settings (QSettings, INI format), with a path override for tests."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings

from engine.paths import state_dir

SETTINGS_ENV = "NPU_CONSOLE_SETTINGS"


def settings_path() -> Path:
    override = os.environ.get(SETTINGS_ENV)
    return Path(override) if override else state_dir() / "console.ini"


def open_settings(path: str | Path | None = None) -> QSettings:
    """An INI file, never the platform registry, so tests and users can inspect and delete it."""
    return QSettings(str(path or settings_path()), QSettings.IniFormat)


def get_list(settings: QSettings, key: str) -> list[str]:
    value = settings.value(key, [])
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value]


def push_recent(settings: QSettings, key: str, item: str, limit: int = 10) -> list[str]:
    items = [i for i in get_list(settings, key) if i != item]
    items.insert(0, item)
    items = items[:limit]
    settings.setValue(key, items)
    return items
