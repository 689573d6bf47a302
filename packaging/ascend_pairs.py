"""Which torch and CANN each torch_npu release is built for.

Standard library only: the bundle builder uses it to pick pins, and a copy travels inside every
Ascend bundle where preflight.py checks the server's CANN against it (no third-party package can be
assumed there before the install). Source: the compatibility table of the Ascend/pytorch
repository (COMPATIBILITY.en.md, https://github.com/Ascend/pytorch, mirrored from
https://gitee.com/ascend/pytorch) and the torch_npu wheels' own metadata on PyPI: torch_npu
X.Y.Z[.postN] requires torch X.Y.Z exactly (the x86_64 wheels: `Requires-Dist: torch==X.Y.Z+cpu`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# torch_npu release -> CANN release it was built against. Only releases from the practical floor
# of our feature set (torch_npu 2.4 / CANN 8.0) up; None where the table read did not list it.
_CANN_BY_TORCH_NPU = {
    "2.4.0.post2": "8.0.0",
    "2.4.0.post4": "8.1.RC1",
    "2.5.1": "8.1.RC1",
    "2.5.1.post1": "8.2.RC1",
    "2.6.0": "8.2.RC1",
    "2.6.0.post3": "8.3.RC1",
    "2.7.1": "8.3.RC1",
    "2.8.0": "8.3.RC1",
    "2.6.0.post5": "8.5.0",
    "2.7.1.post2": "8.5.0",
    "2.8.0.post2": "8.5.0",
    "2.9.0": "8.5.0",
    "2.7.1.post4": "9.0.0",
    "2.8.0.post4": "9.0.0",
    "2.9.0.post2": "9.0.0",
    "2.7.1.post8": "9.1.0",
    "2.9.0.post6": "9.1.0",
    "2.10.0.post4": "9.1.0",
    "2.11.0": "9.1.0",
    "2.12.0": "9.1.0",
    "2.13.0": None,  # on PyPI, but newer than the compatibility table that was read
}

# CPython minors each torch line ships wheels for (torch_npu follows torch)
_PYTHONS_BY_TORCH = {
    "2.6": ("3.9", "3.10", "3.11"),
    "2.7": ("3.9", "3.10", "3.11", "3.12", "3.13"),
    "2.8": ("3.9", "3.10", "3.11", "3.12", "3.13"),
    "2.9": ("3.10", "3.11", "3.12", "3.13"),
    "2.10": ("3.10", "3.11", "3.12", "3.13"),
    "2.11": ("3.10", "3.11", "3.12", "3.13", "3.14"),
    "2.12": ("3.10", "3.11", "3.12", "3.13", "3.14"),
    "2.13": ("3.10", "3.11", "3.12", "3.13", "3.14"),
}

# The recommended combination at the time of reading: torch 2.12.0 + torch_npu 2.12.0 + CANN 9.1.0
DEFAULT_TORCH_NPU = "2.12.0"


@dataclass(frozen=True)
class AscendPair:
    torch_npu: str
    torch: str  # the public release; on x86_64 the wheel is its +cpu build
    cann: str | None
    pythons: tuple[str, ...] | None  # None: not known for this line

    def torch_requirement(self, machine: str) -> str:
        # x86_64 torch_npu wheels require the CPU build (Requires-Dist: torch==X+cpu); PyPI's
        # x86_64 torch is the CUDA build, which torch_npu refuses to run beside.
        return f"torch=={self.torch}+cpu" if machine == "x86_64" else f"torch=={self.torch}"


def torch_for(torch_npu: str) -> str:
    """The torch release a torch_npu release requires: the same X.Y.Z without .postN."""
    m = re.match(r"^(\d+\.\d+\.\d+)(?:\.post\d+)?$", torch_npu.strip())
    if not m:
        raise ValueError(f"not a torch_npu release number: {torch_npu!r}")
    return m.group(1)


def pair_for(torch_npu: str) -> AscendPair:
    torch = torch_for(torch_npu)
    if torch_npu not in _CANN_BY_TORCH_NPU:
        known = ", ".join(sorted(_CANN_BY_TORCH_NPU, key=_release_key))
        raise ValueError(f"torch_npu {torch_npu} is not in the pairing table; known: {known}")
    minor = ".".join(torch.split(".")[:2])
    return AscendPair(torch_npu, torch, _CANN_BY_TORCH_NPU[torch_npu], _PYTHONS_BY_TORCH.get(minor))


def pairs_for_cann(cann: str) -> list[AscendPair]:
    """Releases built for this CANN, newest first: what to rebuild the bundle with instead."""
    want = normalize_cann(cann)
    hits = [pair_for(v) for v, c in _CANN_BY_TORCH_NPU.items() if c and normalize_cann(c) == want]
    return sorted(hits, key=lambda p: _release_key(p.torch_npu), reverse=True)


def normalize_cann(version: str) -> str:
    """`8.0.RC3.alpha003` and `8.0.rc3` are the 8.0.RC3 release; `9.1.0` stays as it is."""
    parts = version.strip().split(".")
    return ".".join(parts[:3]).upper()


def split_torch_version(version: str) -> tuple[str, str | None]:
    """`2.13.0+cpu` -> ("2.13.0", "cpu")."""
    public, _, local = version.partition("+")
    return public, (local or None)


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))
