"""Persistent GUI settings (QSettings, INI format), with a path override for tests."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings

from ..engine.atomic_files import keep_corrupt
from ..engine.paths import state_dir

SETTINGS_ENV = "NPU_CONSOLE_SETTINGS"


def settings_path() -> Path:
    override = os.environ.get(SETTINGS_ENV)
    return Path(override) if override else state_dir() / "console.ini"


def open_settings(path: str | Path | None = None) -> QSettings:
    """An INI file, never the platform registry, so tests and users can inspect and delete it.

    Qt writes it atomically (QSaveFile); one it cannot parse is kept aside as
    console.ini.corrupt-<time> and reported, and the console starts with defaults."""
    path = str(path or settings_path())
    settings = QSettings(path, QSettings.IniFormat)
    if settings.status() == QSettings.FormatError:
        keep_corrupt(path, "not a valid INI file")
        settings = QSettings(path, QSettings.IniFormat)
    settings.setAtomicSyncRequired(True)
    return settings


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
