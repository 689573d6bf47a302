"""Settings and history files: written atomically, and never silently reset when damaged.

A write goes to a temporary file in the same folder, is flushed to disk and renamed over the
target, so a crash leaves the old file or the new one, never half of one. A file that exists
but cannot be read is moved aside as `<name>.corrupt-<time>` (kept for the user, not
overwritten by the next save) and reported: logged, and listed by corrupt_files() for the GUI.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_reported: list[tuple[Path, Path, str]] = []  # (original, kept as, why)


def atomic_write_text(path: str | os.PathLike, text: str, mode: int | None = None) -> Path:
    """Write `text` to `path` in one step; `mode` (e.g. 0o600) is set before the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any, **dump_kw: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, **dump_kw))


def keep_corrupt(path: str | os.PathLike, why: str) -> Path:
    """Move a damaged file aside as `<name>.corrupt-<time>` and report it; returns the new
    path (the original's when it could not be moved)."""
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while kept.exists():
        n += 1
        kept = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        os.replace(path, kept)
    except OSError as exc:
        log.warning("could not move the damaged %s aside: %s", path, exc)
        kept = path
    log.warning("%s could not be read (%s); kept as %s, starting afresh", path, why, kept.name)
    with _lock:
        _reported.append((path, kept, why))
    return kept


def load_json(path: str | os.PathLike, default: Any, check=None) -> Any:
    """The JSON in `path`, or `default` when it is missing. A file that is not valid JSON (or
    that `check(data)` rejects with ValueError/TypeError/KeyError) is kept aside and reported,
    and `default` is returned."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return default
    except (OSError, UnicodeDecodeError) as exc:
        keep_corrupt(path, f"{type(exc).__name__}: {exc}")
        return default
    try:
        data = json.loads(text)
        if check is not None:
            check(data)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        # RecursionError: "[[[[..." nested deeper than json can follow
        keep_corrupt(path, f"{type(exc).__name__}: {exc}"[:200])
        return default
    return data


def corrupt_files() -> list[tuple[Path, Path, str]]:
    """Every (file, kept as, why) reported by this process so far."""
    with _lock:
        return list(_reported)


def check_runs_history(data: Any) -> None:
    """The shape of the console's run histories: {"runs": [...]} (for load_json's check)."""
    if not isinstance(data, dict) or not isinstance(data.get("runs", []), list):
        raise TypeError('not a {"runs": [...]} history')
