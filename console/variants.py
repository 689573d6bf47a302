"""Loaded variants as the Models page names and describes them, free of Qt: the name a newly
opened folder's variant gets, and what runs a loaded variant's products, in words."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any


def variant_name(report: Any, taken: Iterable[str]) -> str:
    """The folder's name (a GGUF file's stem), with -2, -3, … while a loaded variant has it."""
    path = Path(report.path)
    name = path.stem if report.source_format == "gguf" else path.name
    taken = set(taken)
    base, i = name, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


def kernels_tip(m: Any) -> str:
    """What runs a loaded variant's decode steps and int8 products, for its row's tooltip."""
    if m.decode_step == "native":
        tip = f"{m.path_kind} runner; decode steps: one native call for all layers"
    else:
        kernels = "the native AVX2 kernel" if m.linear_kernels == "native" else "PyTorch"
        tip = f"{m.path_kind} runner; float decode products on {kernels}"
    if m.int8_kernels:
        tip += f"; int8 products on {m.int8_kernels}"
    if getattr(m, "unbatched_reason", ""):
        tip = f"{m.unbatched_reason}; {tip}"
    return tip
