"""Recently used model folders, newest first, kept in the user's state directory."""

from __future__ import annotations

import os
from pathlib import Path

from ..atomic_files import atomic_write_json, load_json
from ..paths import state_dir

MAX_RECENT = 12


def _file() -> Path:
    return state_dir() / "recent_models.json"


def _check(data) -> None:
    if not isinstance(data, list):
        raise TypeError("not a list of folders")


def recent_models() -> list[str]:
    data = load_json(_file(), [], check=_check)  # a damaged list is kept aside, not lost
    return [p for p in data if isinstance(p, str)]


def add_recent_model(path: str | os.PathLike) -> list[str]:
    entry = str(Path(path).expanduser().resolve())
    items = [entry] + [p for p in recent_models() if p != entry]
    items = items[:MAX_RECENT]
    atomic_write_json(_file(), items, indent=1)  # a crash never leaves a half-written list
    return items


def forget_recent_model(path: str | os.PathLike) -> list[str]:
    entry = str(Path(path).expanduser().resolve())
    items = [p for p in recent_models() if p != entry]
    atomic_write_json(_file(), items, indent=1)
    return items
