"""The folders /v1/admin may touch, and the only way a client path becomes a file-system path.

Clients never see or send absolute paths: a model is named `ROOT/REL`, where ROOT is a root's
label (its folder name, made unique with -2, -3 ...) and REL a path inside it, exactly as
`GET /v1/admin/models` lists it. A path is refused (403) when it is absolute, holds `..`, or
resolves (symlinks followed) outside its root; quantize outputs are a single folder name under
the output root. Resolution is strict string handling first, file-system second, so nothing a
client sends is ever opened before it passed the string checks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .settings import UnsafeSettingsError

# a quantize output's folder name: one path component, no hidden or parent names
OUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
MAX_DEPTH = 3  # ROOT/org/model/: how deep the listing looks for model folders
MAX_LISTED = 500  # a root with thousands of folders must not stall the listing


class PathRefused(Exception):
    """A client path outside the roots (HTTP 403); the message says why in plain words."""


class PathNotFound(Exception):
    """A client path inside the roots that names nothing (HTTP 404)."""


@dataclass(frozen=True)
class Root:
    label: str
    path: Path  # resolved


class AdminRoots:
    """The model roots (read: list, load, quantize from) and the output root (quantize to; it
    is listed too, so an output can be loaded)."""

    def __init__(self, model_roots: tuple[str, ...] | list[str], output_root: str | Path):
        roots: list[Root] = []
        for raw in model_roots:
            path = Path(raw).expanduser()
            if not path.is_dir():
                raise UnsafeSettingsError(f"--model-root {raw}: no such folder")
            self._add(roots, path.resolve())
        out = Path(output_root).expanduser()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UnsafeSettingsError(f"--output-root {output_root}: cannot create it: "
                                      f"{exc.strerror or exc}") from None
        self.output = out.resolve()
        if self._holder(roots, self.output) is None:
            self._add(roots, self.output)
        self.roots = tuple(roots)

    @staticmethod
    def _add(roots: list[Root], path: Path) -> None:
        if any(r.path == path for r in roots):
            return
        base = path.name or "root"
        label, n = base, 2
        while any(r.label == label for r in roots):
            label, n = f"{base}-{n}", n + 1
        roots.append(Root(label, path))

    @staticmethod
    def _holder(roots, path: Path) -> Root | None:
        for root in roots:
            if path == root.path or path.is_relative_to(root.path):
                return root
        return None

    # ------------------------------------------------------------------ client -> disk
    def resolve(self, client_path: str) -> Path:
        """The model folder or GGUF file a client path names; PathRefused / PathNotFound."""
        if not isinstance(client_path, str) or not client_path.strip():
            raise PathRefused("empty path: name a model as GET /v1/admin/models lists it")
        text = client_path.strip()
        if "\x00" in text or "\\" in text:
            raise PathRefused(f"path {text!r} is refused: use '/' separators and printable "
                              "characters")
        pure = PurePosixPath(text)
        if pure.is_absolute() or re.match(r"^[A-Za-z]:", text) or text.startswith("~"):
            raise PathRefused(f"path {text!r} is refused: admin paths are relative to a model "
                              f"root ({self._labels()}), as GET /v1/admin/models lists them")
        if ".." in pure.parts:
            raise PathRefused(f"path {text!r} is refused: '..' may not appear in admin paths")
        label, *rest = pure.parts
        root = next((r for r in self.roots if r.label == label), None)
        if root is None:
            raise PathNotFound(f"no model root named {label!r}: the roots are "
                               f"{self._labels()} (paths read ROOT/FOLDER)")
        target = root.path.joinpath(*rest).resolve()
        if target != root.path and not target.is_relative_to(root.path):
            raise PathRefused(f"path {text!r} is refused: it leads outside the model roots "
                              "(a symbolic link pointing elsewhere)")
        if not target.exists():
            raise PathNotFound(f"no such model folder or file: {text}")
        return target

    def output_dir(self, out_name: str) -> Path:
        """The output folder of a quantize job: one plain name under the output root."""
        text = out_name.strip() if isinstance(out_name, str) else ""
        if not text or "/" in text or "\\" in text or "\x00" in text or text.startswith("."):
            raise PathRefused(f"out_name {out_name!r} is refused: a single folder name, "
                              "written under the server's output root")
        if not OUT_NAME.match(text):
            raise ValueError(f"out_name {text!r}: use letters, digits and . _ + - "
                             "(at most 128 characters)")
        target = self.output / text
        if target.is_symlink() or (target.exists() and
                                   not target.resolve().is_relative_to(self.output)):
            raise PathRefused(f"out_name {text!r} is refused: it is a link leading outside "
                              "the output root")
        return target

    # ------------------------------------------------------------------ disk -> client
    def relative(self, path: str | Path) -> str | None:
        """The client form ROOT/REL of a path inside the roots; None for any other."""
        resolved = Path(path).resolve()
        root = self._holder(self.roots, resolved)
        if root is None:
            return None
        rel = resolved.relative_to(root.path)
        return str(PurePosixPath(root.label, *rel.parts))

    def output_label(self) -> str:
        return self.relative(self.output) or ""

    def listing(self) -> list[tuple[str, Path]]:
        """(client path, resolved path) of every model folder and GGUF file under the roots,
        at most MAX_DEPTH levels down; hidden folders (unfinished writes) and links leading
        outside the roots are left out."""
        found: list[tuple[str, Path]] = []
        for root in self.roots:
            self._walk(root, root.path, 0, found)
        return found

    def _walk(self, root: Root, folder: Path, depth: int, found: list) -> None:
        if len(found) >= MAX_LISTED:
            return
        if (folder / "config.json").is_file():
            found.append((self._client(root, folder), folder))
            return
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return  # unreadable: nothing to offer from it
        for entry in entries:
            if entry.name.startswith(".") or len(found) >= MAX_LISTED:
                continue
            path = Path(entry.path)
            resolved = path.resolve()
            if resolved != root.path and not resolved.is_relative_to(root.path):
                continue
            if entry.name.endswith(".gguf") and resolved.is_file():
                found.append((self._client(root, path), resolved))
            elif depth < MAX_DEPTH and resolved.is_dir():
                self._walk(root, path, depth + 1, found)

    @staticmethod
    def _client(root: Root, path: Path) -> str:
        return str(PurePosixPath(root.label, *path.relative_to(root.path).parts))

    def _labels(self) -> str:
        return ", ".join(r.label for r in self.roots)
