"""Output folders of quantize / export: what --overwrite may replace, and replacing it safely.

--overwrite replaces only an empty folder or one that looks like a model folder (a config, a
weights file, a quantization description): a typo such as `--out ~` must not delete a home
directory. The new folder is written beside the old one and swapped in by two renames; if the
second fails, the old folder is put back, and an old folder left aside by a crash between the
two is restored by the next run.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

MODEL_MARKERS = ("config.json", "npu_quant.json", "quant_model_description.json",
                 "generation_config.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


class OutputFolderError(Exception):
    pass


def looks_like_model(folder: Path) -> bool:
    names = {p.name for p in folder.iterdir()}
    return bool(names & set(MODEL_MARKERS)) or any(n.endswith(WEIGHT_SUFFIXES) for n in names)


def check_replaceable(out: Path, overwrite: bool) -> None:
    """Raise OutputFolderError unless `out` may be written: absent, or (with overwrite) an
    empty or model-looking folder."""
    out = Path(out)
    if not out.exists() and not out.is_symlink():
        return
    if not overwrite:
        raise OutputFolderError(f"output folder {out} already exists (pass --overwrite to "
                                "replace it)")
    if out.is_symlink() or not out.is_dir():
        raise OutputFolderError(f"{out} is not a folder: --overwrite replaces only a model "
                                "folder or an empty one")
    if any(out.iterdir()) and not looks_like_model(out):
        raise OutputFolderError(f"{out} does not look like a model folder (no config.json or "
                                "weights): --overwrite replaces only a model folder or an "
                                "empty one; choose another --out")


def _aside(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.old-*/x"))


def restore_left_aside(out: Path) -> None:
    """Put back an old folder that a crash left aside while `out` was being replaced."""
    if out.exists():
        return
    for old in reversed(_aside(out)):  # the newest first
        os.replace(old, out)
        shutil.rmtree(old.parent, ignore_errors=True)
        log.warning("restored %s, left aside by an interrupted replace", out)
        return


def write_folder(out: str | os.PathLike, overwrite: bool,
                 write: Callable[[Path], None]) -> Path:
    """Write a folder with `write(tmp)` into a hidden temporary folder, then put it at `out`
    (replacing an old one only as check_replaceable allows); nothing half-written is left."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    restore_left_aside(out)
    check_replaceable(out, overwrite)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        write(tmp)
        if not out.exists():
            os.replace(tmp, out)
            return out
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / "x")
        try:
            os.replace(tmp, out)
        except BaseException:
            os.replace(old / "x", out)  # put the old folder back
            shutil.rmtree(old, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
