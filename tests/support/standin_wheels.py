"""Small stand-in wheels that carry the real names, versions, tags and requirements of the
wheels an offline bundle collects, so that packaging/bundle.py's whole path (pip's resolver
over a --find-links folder, the torch choice, the refusals, the bundle written) runs here
without the network. Each holds only its .dist-info: what pip reads to resolve."""

from __future__ import annotations

import zipfile
from pathlib import Path

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]

# the project's dependencies that publish compiled wheels (the rest are pure Python)
COMPILED = {"numpy", "safetensors", "tokenizers", "psutil", "httptools", "uvloop", "pyyaml",
            "markupsafe", "pydantic-core"}


def write_wheel(folder: Path, name: str, version: str, tag: str,
                requires: tuple[str, ...] = ()) -> Path:
    """A wheel `name-version-tag.whl` (tag: "py3-none-any", "cp311-cp311-manylinux_2_28_aarch64")
    whose METADATA lists `requires` as Requires-Dist."""
    dist = f"{canonicalize_name(name).replace('-', '_')}-{version}"
    path = folder / f"{dist}-{tag}.whl"
    meta = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires))
    pure = "true" if tag.endswith("-none-any") else "false"
    wheel = f"Wheel-Version: 1.0\nGenerator: stand-in\nRoot-Is-Purelib: {pure}\nTag: {tag}\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", meta)
        z.writestr(f"{dist}.dist-info/WHEEL", wheel)
        z.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def binary_tag(target: str, python: str = "3.11", glibc: str = "2_17") -> str:
    cp = "cp" + python.replace(".", "")
    return f"{cp}-{cp}-manylinux_{glibc}_{target}"


def project_requirements(*extras: str) -> list[Requirement]:
    """pyproject.toml's dependencies and those of the given extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return [Requirement(r) for r in reqs]


def version_for(req: Requirement) -> str:
    """A version the requirement accepts: one of its own bounds, else a high one."""
    candidates = [s.version for s in req.specifier if s.operator in (">=", "==", "~=")]
    for v in [*candidates, "99.0"]:
        if "*" not in v and req.specifier.contains(Version(v), prereleases=True):
            return v
    raise AssertionError(f"no stand-in version for {req}")


def dependency_folder(folder: Path, target: str, python: str = "3.11",
                      extras: tuple[str, ...] = ()) -> dict[str, Path]:
    """Stand-ins for every dependency of the project (and extras) but torch and torch-npu, with
    torch's and torch_npu's own Python dependencies; returns {name: wheel}."""
    env = dict(default_environment(), sys_platform="linux", platform_machine=target,
               python_version=python)
    reqs = [r for r in project_requirements(*extras) if r.marker is None or r.marker.evaluate(env)]
    # what torch and torch_npu themselves require (their real METADATA, trimmed)
    reqs += [Requirement(r) for r in ("filelock", "typing-extensions>=4.10", "jinja2",
                                      "pyyaml", "markupsafe>=2.0")]
    made = {}
    for req in reqs:
        name = canonicalize_name(req.name)
        if name in ("torch", "torch-npu") or name in made:
            continue
        tag = binary_tag(target, python) if name in COMPILED else "py3-none-any"
        needs = ("markupsafe>=2.0",) if name == "jinja2" else ()
        made[name] = write_wheel(folder, req.name, version_for(req), tag, needs)
    return made


TORCH_REQUIRES = ("filelock", "typing-extensions>=4.10", "jinja2")
# what PyPI's aarch64 torch 2.12 / 2.13 (the CUDA build) requires besides
CUDA_REQUIRES = ("nvidia-cublas==13.1.1.3; platform_system == 'Linux'",
                 "nvidia-nccl-cu13==2.28.9; platform_system == 'Linux'",
                 "triton==3.7.0; platform_system == 'Linux'")


def torch_cpu(folder: Path, version: str, target: str, python: str = "3.11") -> Path:
    """The PyTorch CPU index's build: torch-X+cpu-cp311-cp311-manylinux_2_28_<target>.whl"""
    return write_wheel(folder, "torch", f"{version}+cpu", binary_tag(target, python, "2_28"),
                       TORCH_REQUIRES)


def torch_cuda(folder: Path, version: str, target: str, python: str = "3.11") -> list[Path]:
    """PyPI's torch for Linux, the CUDA build (no local label), and the CUDA wheels it pulls."""
    made = [write_wheel(folder, "torch", version, binary_tag(target, python, "2_28"),
                        TORCH_REQUIRES + CUDA_REQUIRES)]
    for req in map(Requirement, CUDA_REQUIRES):
        made.append(write_wheel(folder, req.name, version_for(req),
                                f"py3-none-manylinux_2_27_{target}"))
    return made


def torch_npu(folder: Path, version: str, target: str, python: str = "3.11") -> Path:
    """torch_npu as PyPI has it: the same torch release exactly, which any local label (+cpu)
    satisfies (torch_npu-2.12.0-cp311-cp311-manylinux_2_28_aarch64.whl: `Requires-Dist:
    torch ==2.12.0` and nothing else)."""
    torch = ".".join(version.split(".")[:3])
    return write_wheel(folder, "torch_npu", version, binary_tag(target, python, "2_28"),
                       (f"torch =={torch}",))
