"""The foundation's command line: doctor, generate, clean errors for broken folders. One
process-level run per command (version, generate); the rest through main([...]) in process."""

from __future__ import annotations

import json
import shutil

import pytest
from support.cli import cli_in_process, run_cli


def test_version():
    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.startswith("npu-console ")


def test_doctor_json_says_there_is_no_npu_and_why(capsys):
    res = cli_in_process(capsys, "doctor", "--json")
    data = json.loads(res.stdout)
    names = {c["name"]: c for c in data["checks"]}
    assert names["torch"]["status"] == "ok"
    if not any(n.startswith("device npu") for n in names):
        drv = names["ascend driver"]
        assert "no Ascend NPU" in drv["detail"] and "/dev/davinci" in drv["detail"]
        assert drv["fix"]
    assert names["device cpu"]["status"] == "ok"
    kern = names["cpu kernels"]
    from npu_console.engine.kernels import native
    if native.available():
        assert kern["status"] == "ok" and "native kernels" in kern["detail"]
        vnni = native.int8_isa() == "avx512-vnni"
        assert ("W8A8 and W8A16 (per-channel or per-group scales) on AVX512-VNNI"
                in kern["detail"]) == vnni
        assert ("packed 16 channels per register" in kern["detail"]) == vnni
    else:  # says which kernels run instead, and why
        assert kern["status"] in ("warn", "info") and "PyTorch's own" in kern["detail"]
    assert res.returncode == (1 if not data["ok"] else 0)


def test_doctor_reports_a_failing_npu_smi(tmp_path, capsys):
    fake = tmp_path / "npu-smi"
    fake.write_text("#!/bin/sh\necho 'dcmi model initialized failed, because the device is used. ret is -8020'\nexit 1\n")
    fake.chmod(0o755)
    res = cli_in_process(capsys, "doctor", "--json", "--npu-smi", str(fake))
    check = {c["name"]: c for c in json.loads(res.stdout)["checks"]}["npu-smi"]
    assert check["status"] == "fail" and "-8020" in check["detail"] and check["fix"]
    assert res.returncode == 1


def test_generate_on_stories_is_the_known_tinystories_text(stories_dir):
    res = run_cli("generate", "--model", str(stories_dir), "--prompt", "Once upon a time",
                  "--max-tokens", "30")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith(", there was a little girl named Lily. She loved to play outside")


@pytest.mark.parametrize("breakage,expected", [
    ("config", "config.json: missing"),
    ("truncate", "model.safetensors: truncated"),
    ("tokenizer", "no tokenizer"),
])
def test_broken_folder_is_one_line_error(stories_dir, tmp_path, breakage, expected, capsys):
    dst = tmp_path / "m"
    shutil.copytree(stories_dir, dst, ignore=shutil.ignore_patterns("original"))
    if breakage == "config":
        (dst / "config.json").unlink()
    elif breakage == "truncate":
        data = (dst / "model.safetensors").read_bytes()
        (dst / "model.safetensors").write_bytes(data[:1000])
    else:
        (dst / "tokenizer.json").unlink()
        (dst / "tokenizer.model").unlink()
    res = cli_in_process(capsys, "generate", "--model", str(dst), "--prompt", "hi")
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
    assert "Traceback" not in res.stderr


def test_unknown_device_is_a_clear_error(stories_dir, capsys):
    res = cli_in_process(capsys, "generate", "--model", str(stories_dir), "--prompt", "x", "--device", "npu:3")
    assert res.returncode == 2 and "not available here" in res.stderr and "Traceback" not in res.stderr
