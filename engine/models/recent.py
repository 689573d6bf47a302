"""Recently used model folders, newest first, kept in the user's state directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.paths import state_dir

MAX_RECENT = 12


def _file() -> Path:
    return state_dir() / "recent_models.json"


def recent_models() -> list[str]:
    try:
        data = json.loads(_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [p for p in data if isinstance(p, str)] if isinstance(data, list) else []


def add_recent_model(path: str | os.PathLike) -> list[str]:
    entry = str(Path(path).expanduser().resolve())
    items = [entry] + [p for p in recent_models() if p != entry]
    items = items[:MAX_RECENT]
    tmp = _file().with_suffix(".tmp")
    tmp.write_text(json.dumps(items, indent=1), encoding="utf-8")
    os.replace(tmp, _file())  # atomic: a crash never leaves a half-written list
    return items


def forget_recent_model(path: str | os.PathLike) -> list[str]:
    entry = str(Path(path).expanduser().resolve())
    items = [p for p in recent_models() if p != entry]
    _file().write_text(json.dumps(items, indent=1), encoding="utf-8")
    return items
