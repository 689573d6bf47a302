"""One reading of npu-smi's printed values, for the table parser and the key : value parsers
alike: blanks and the placeholders npu-smi prints for "no value" become None, never an error."""

from __future__ import annotations

MISSING = frozenset({"", "NA", "N/A", "-", "--"})


def to_str(v: str | None) -> str | None:
    if v is None:
        return None
    v = v.strip()
    return None if v in MISSING else v


def to_float(v: str | None) -> float | None:
    v = to_str(v)
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        return None


def to_int(v: str | None) -> int | None:
    """An int from "42", "0x2A" (some IDs print in hex) or "42.0"; None otherwise."""
    v = to_str(v)
    if v is None:
        return None
    try:
        return int(v, 0) if v.lower().startswith("0x") else int(v)
    except ValueError:
        f = to_float(v)
    try:
        return None if f is None else int(f)
    except (ValueError, OverflowError):  # nan, inf
        return None
