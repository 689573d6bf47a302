"""No file of the product names a path outside the repository.

A user has the repository (or a wheel, or a bundle) and nothing beside it: a design note cited
by an absolute path, a model under the development machine's `shared` folder, or a wheel folder
of its pip config means nothing to them. Every tracked text file is scanned except tests/: the
tests and benchmarks run on the development machine and find its fixtures through
tests/support/shared.py, the one place that names them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# paths of the development environment, not of any user's machine
OUTSIDE = re.compile(
    r"/work/"                        # the development checkouts' root
    r"|\.\./shared\b"                # the shared fixtures folder beside the checkout
    r"|\bparents?\b.{0,40}\"shared\""  # the same, joined with pathlib: ROOT.parent / "shared"
    r"|/opt/wheels\b"                # the development machines' local wheel folder
    r"|/home/[a-z_][a-z0-9_-]*/"     # someone's home directory
    r"|/root/"
    r"|/Users/[A-Za-z]"
)
EXEMPT = ("tests/",)


def product_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    names = [n for n in out.stdout.decode().split("\0") if n and not n.startswith(EXEMPT)]
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def outside_paths(text: str) -> list[tuple[int, str]]:
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1)
            if OUTSIDE.search(line)]


def test_the_scan_catches_each_kind_of_outside_path():
    for line in ("Source: /work/shared/design/ASCEND_INT8.md section 1.1",
                 "npu-console serve --telemetry-input ../shared/fixtures/npu-smi",
                 'FIXTURES = ROOT.parent / "shared" / "fixtures" / "npu-smi"',
                 "the development machines have it in `/opt/wheels`",
                 "see /home/alice/notes.md", "cp /root/.pip/pip.conf ."):
        assert outside_paths(line), line
    for line in ("~/.cache/npu-console/gguf", "/usr/local/Ascend/ascend-toolkit/latest",
                 "https://download.pytorch.org/whl/cpu", "a shared 2-core machine",
                 "/opt/npu-console/bin/npu-console", "docs/packaging.md"):
        assert not outside_paths(line), line


def test_no_product_file_names_a_path_outside_the_repository():
    files = product_files()
    assert any(f.name == "bundle.py" for f in files) and any(f.suffix == ".md" for f in files)
    found = []
    for path in files:
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary: images, weights
        for line_no, line in outside_paths(data.decode("utf-8", errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{line_no}: {line[:120]}")
    assert not found, "paths outside the repository:\n" + "\n".join(found)
