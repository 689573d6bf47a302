"""The aarch64 bundles (Kunpeng hosts of Atlas 800 / 900 servers), built the whole way through
packaging/bundle.py from a --find-links folder of stand-in wheels that carry the real names and
tags (tests/support/standin_wheels.py), with pip's --no-index and no network: which torch is
chosen (the PyTorch CPU index's `+cpu` build over PyPI's CUDA one), and the refusals (only a
CUDA torch: one line naming the CPU index, before anything is downloaded; CUDA wheels pulled by
anything else: refused, named). The real indexes are not reachable from this machine
(docs/packaging.md says what that leaves unverified)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename
from support import standin_wheels as standin
from support.offline import offline_env, offline_prefix

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "packaging" / "bundle.py"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# bundles are the dist lane's (`make test-dist`): each build here resolves a whole server's
# wheels through pip, about 80 s of the default lane on 2 cores
pytestmark = pytest.mark.dist


def bundle(folder: Path, out: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """bundle.py for an aarch64 / CPython 3.11 server, every wheel from `folder`, pip's own
    configuration (this machine's mirrors) left out and the network cut off."""
    cmd = [*offline_prefix(), sys.executable, str(BUNDLE), "--server", "--target", "aarch64",
           "--python", "3.11", "--no-index", "--find-links", str(folder), "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          env=offline_env(PIP_CONFIG_FILE="/dev/null"), cwd=out.parent)


def error_line(res: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("flavour,torch", [("cpu", "2.13.0"), ("ascend", "2.12.0")])
def test_only_a_cuda_torch_stops_before_anything_is_downloaded(tmp_path, flavour, torch):
    folder = tmp_path / "wheels"
    standin.dependency_folder(folder, "aarch64", extras=("npu",))
    standin.torch_cuda(folder, torch, "aarch64")
    standin.torch_npu(folder, "2.12.0", "aarch64")
    res = bundle(folder, tmp_path / "out", "--flavour", flavour, timeout=300)
    assert res.returncode == 2, res.stderr[-3000:]
    line = error_line(res)
    assert f"torch-{torch}-cp311-cp311-manylinux_2_28_aarch64.whl" in line, line
    assert "nvidia-cublas" in line and CPU_INDEX in line, line
    assert f"torch-{torch}+cpu-*-aarch64.whl" in line, line
    # it stopped at the first step: no project wheel built, nothing collected, nothing written
    assert "[1/5] finding torch" in res.stderr and "[2/5]" not in res.stderr, res.stderr
    assert not any((tmp_path / "out").iterdir())


def test_no_torch_at_all_names_the_cpu_index(tmp_path):
    folder = tmp_path / "wheels"
    standin.dependency_folder(folder, "aarch64")
    standin.torch_cpu(folder, "2.13.0", "x86_64")  # the wrong architecture does not count
    res = bundle(folder, tmp_path / "out", "--flavour", "cpu", timeout=300)
    assert res.returncode == 2
    line = error_line(res)
    assert "no torch==2.13.0 wheel for aarch64 / CPython 3.11" in line and CPU_INDEX in line, line
    assert "[2/5]" not in res.stderr


def _built(res: subprocess.CompletedProcess, out: Path) -> Path:
    assert res.returncode == 0, res.stderr[-4000:]
    archive = Path(res.stdout.strip().splitlines()[-1])
    assert archive.parent == out and archive.is_file()
    with tarfile.open(archive) as tar:
        tar.extractall(out / "unpacked", filter="data")
    (unpacked,) = (out / "unpacked").iterdir()
    return unpacked


def _check_wheels(unpacked: Path, manifest: dict) -> list[str]:
    names = sorted(p.name for p in (unpacked / "wheels").glob("*.whl"))
    assert names == sorted(manifest["wheels"])
    for name in names:  # every wheel runs on an aarch64 glibc 2.28 server (read with packaging)
        for tag in parse_wheel_filename(name)[3]:
            assert tag.platform == "any" or tag.platform.endswith("_aarch64"), name
    assert not [n for n in names if n.startswith(("nvidia", "triton"))], names
    return names


@pytest.mark.slow
def test_the_aarch64_cpu_server_bundle_takes_the_cpu_torch(tmp_path):
    folder = tmp_path / "wheels"
    standin.dependency_folder(folder, "aarch64")
    standin.torch_cuda(folder, "2.13.0", "aarch64")  # PyPI's, beside the CPU index's
    standin.torch_cpu(folder, "2.13.0", "aarch64")
    out = tmp_path / "out"
    out.mkdir()
    unpacked = _built(bundle(folder, out, "--flavour", "cpu"), out)
    assert unpacked.name == f"npu-console-{_version()}-cpu-server-aarch64-py311"
    manifest = json.loads((unpacked / "bundle.json").read_text())
    assert manifest["target"] == "aarch64" and manifest["torch"] == "2.13.0+cpu"
    assert manifest["glibc_min"] == "2.28" and manifest["torch_npu"] is None
    names = _check_wheels(unpacked, manifest)
    assert "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl" in names
    assert not [n for n in names if n.lower().startswith(("pyside6", "shiboken6"))]
    reqs = (unpacked / "requirements.txt").read_text().split()
    assert reqs == [f"npu-console=={_version()}", "torch==2.13.0+cpu"]
    # the project wheel in it records the build it was made for
    project = next(unpacked.glob("wheels/npu_console-*.whl"))
    import zipfile

    with zipfile.ZipFile(project) as z:
        stamp = z.read("npu_console/engine/_build_flavour.py").decode()
    assert "TARGET = 'aarch64'" in stamp and "TORCH = '2.13.0+cpu'" in stamp


@pytest.mark.slow
def test_the_aarch64_ascend_server_bundle_pairs_torch_npu_with_the_cpu_torch(tmp_path):
    folder = tmp_path / "wheels"
    standin.dependency_folder(folder, "aarch64", extras=("npu",))
    standin.torch_cuda(folder, "2.12.0", "aarch64")
    standin.torch_cpu(folder, "2.12.0", "aarch64")
    standin.torch_npu(folder, "2.12.0", "aarch64")
    out = tmp_path / "out"
    out.mkdir()
    unpacked = _built(bundle(folder, out, "--flavour", "ascend"), out)
    manifest = json.loads((unpacked / "bundle.json").read_text())
    assert (manifest["torch"], manifest["torch_npu"], manifest["cann"]) == (
        "2.12.0+cpu", "2.12.0", "9.1.0")
    names = _check_wheels(unpacked, manifest)
    assert "torch_npu-2.12.0-cp311-cp311-manylinux_2_28_aarch64.whl" in names
    assert (unpacked / "ascend_pairs.py").is_file() and (unpacked / "preflight.py").is_file()
    reqs = (unpacked / "requirements.txt").read_text().split()
    assert reqs == [f"npu-console[npu]=={_version()}", "torch==2.12.0+cpu", "torch-npu==2.12.0"]


@pytest.mark.slow
def test_cuda_wheels_pulled_by_another_dependency_are_refused_by_name(tmp_path):
    folder = tmp_path / "wheels"
    standin.dependency_folder(folder, "aarch64")
    standin.torch_cpu(folder, "2.13.0", "aarch64")
    standin.torch_cuda(folder, "2.13.0", "aarch64")  # provides the nvidia / triton wheels
    (accelerate,) = folder.glob("accelerate-*.whl")
    accelerate.unlink()
    standin.write_wheel(folder, "accelerate", "1.0.0", "py3-none-any",
                        ("nvidia-nccl-cu13==2.28.9", "triton==3.7.0"))
    out = tmp_path / "out"
    out.mkdir()
    res = bundle(folder, out, "--flavour", "cpu")
    assert res.returncode == 2
    line = error_line(res)
    assert "a cpu bundle must not carry CUDA wheels" in line, line
    assert "nvidia_nccl_cu13-2.28.9" in line and "triton-3.7.0" in line, line
    assert not any(p.suffix == ".gz" for p in out.iterdir())


def _version() -> str:
    from npu_console.engine import __version__

    return __version__
