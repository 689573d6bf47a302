"""Sampling presets (system prompt + sampling parameters) as JSON files in state_dir()/presets."""

from __future__ import annotations

import math
import re
from pathlib import Path

from ..engine.atomic_files import atomic_write_json, load_json
from ..engine.paths import state_dir

DEFAULT = {"system_prompt": "", "temperature": 0.7, "top_p": 0.95, "top_k": 0, "max_tokens": 256,
           "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
           "seed": None, "stop": []}
BUILTIN = {
    "Balanced": DEFAULT,
    "Precise (greedy)": {**DEFAULT, "temperature": 0.0, "top_p": 1.0},
    "Creative": {**DEFAULT, "temperature": 1.1, "top_p": 0.98, "top_k": 80},
}


def presets_dir() -> Path:
    d = state_dir() / "presets"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _file(name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "preset"
    return presets_dir() / f"{slug}.json"


def list_presets() -> dict[str, dict]:
    out = {k: dict(v) for k, v in BUILTIN.items()}
    for p in sorted(presets_dir().glob("*.json")):
        data = load_json(p, None, check=_check)  # a damaged preset is kept aside, reported
        if data is not None:
            values = {k: v for k, v in data.get("values", {}).items() if k in DEFAULT}
            out[data.get("name") or p.stem] = {**DEFAULT, **values}
    return out


def _check(data) -> None:
    """A preset file's shape, every value of the type the chat page's fields take."""
    if not isinstance(data, dict) or not isinstance(data.get("values"), dict):
        raise TypeError("not a preset object (no 'values')")
    if not isinstance(data.get("name", ""), str):
        raise TypeError("a preset's name must be a string")
    for key, value in data.get("values", {}).items():
        if key not in DEFAULT:
            continue  # an older or newer field: dropped when read
        want = DEFAULT[key]
        if key == "seed":
            ok = value is None or type(value) is int
        elif key == "stop":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        elif isinstance(want, str):
            ok = isinstance(value, str)
        else:
            ok = type(value) in (int, float) and math.isfinite(value) and abs(value) < 1e9
        if not ok:
            raise TypeError(f"preset value {key!r} has the wrong type")


def save_preset(name: str, values: dict) -> Path:
    name = name.strip()
    if not name:
        raise ValueError("a preset needs a name")
    if name in BUILTIN:
        raise ValueError(f"'{name}' is a built-in preset; choose another name")
    path = _file(name)
    clean = {k: values[k] for k in DEFAULT if k in values}
    atomic_write_json(path, {"name": name, "values": clean}, indent=1)
    return path


def delete_preset(name: str) -> None:
    _file(name).unlink(missing_ok=True)
