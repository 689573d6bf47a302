"""A Qt-free install (issue 25): `pip install npu-console` without the `gui` extra, in a fresh
venv, gives the engine, the CLI and `serve` with no PySide6 / pyqtgraph / qasync.

The venv is real: the wheel built from this checkout, the CPU torch 2.13.0 this machine has on
disk (pinned by a constraints file so pip can never swap it), and every other dependency
resolved by pip as a user's `pip install` would (pip's wheel cache makes the second run quick).
Then the commands run on the shipped demo model from the installed copy (cwd outside the
checkout), and the engine/API tests that need no Qt run there with the venv's own pytest.
"""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"
GUI_MODULES = ("PySide6", "pyqtgraph", "qasync")
# the engine / API / telemetry tests that run in the Qt-free venv (none of them imports Qt)
HEADLESS_TESTS = ("test_layering.py", "test_api_units.py", "test_api_http.py",
                  "test_api_telemetry.py", "test_telemetry_parse.py", "test_telemetry_details.py")

pytestmark = [pytest.mark.slow, pytest.mark.dist, pytest.mark.timeout(1800)]


def _run(cmd, timeout=900, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False,
                          timeout=timeout, **kw)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "QT_QPA_PLATFORM")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               **extra)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory, built_dists) -> Path:
    if platform.system() != "Linux":
        pytest.skip("checked on Linux")
    work = tmp_path_factory.mktemp("qtfree")
    wheel = built_dists["wheel"]
    prefix = work / "venv"
    res = _run([sys.executable, "-m", "venv", prefix])
    assert res.returncode == 0, res.stderr
    pip = [prefix / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile"]
    res = _run([*pip, TORCH])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    torch_version = _run([prefix / "bin" / "python", "-c",
                          "import importlib.metadata as m; print(m.version('torch'))"])
    pin = work / "torch-pin.txt"
    pin.write_text(f"torch=={torch_version.stdout.strip()}\n")
    # the project as a user installs it, no extras; then the test runner's own tools
    res = _run([*pip, "-c", pin, wheel])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = _run([*pip, "-c", pin, "pytest>=8", "pytest-timeout>=2.3", "hypothesis>=6.100"])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return prefix


def _cli(venv: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    return _run([venv / "bin" / "npu-console", *args], timeout=timeout, cwd=venv, env=_env())


def test_no_gui_module_is_installed_and_the_engine_is_the_installed_copy(venv):
    py = venv / "bin" / "python"
    for name in GUI_MODULES:
        res = _run([py, "-c", f"import {name}"], cwd=venv, env=_env())
        assert res.returncode != 0 and "ModuleNotFoundError" in res.stderr, name
    res = _run([py, "-c", "import npu_console.engine as e, torch; print(e.__file__); print(torch.__version__)"],
               cwd=venv, env=_env())
    where, torch_version = res.stdout.split()
    assert where.startswith(str(venv)) and torch_version.startswith("2.13.0")
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"Qt-free venv: {size / 2**20:.0f} MiB")


def test_gui_says_how_to_get_it_and_doctor_reports_the_extra(venv):
    res = _cli(venv, "gui")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "pip install 'npu-console[gui]'" in res.stderr
    report = json.loads(_cli(venv, "doctor", "--json").stdout)
    gui = next(c for c in report["checks"] if c["name"] == "gui extra")
    assert gui["status"] == "info" and "not installed" in gui["detail"]


def test_generate_smi_eval_quantize_and_bench_offline(venv, tmp_path):
    res = _cli(venv, "generate", "--prompt", "Once upon a time", "--max-tokens", "8",
               "--temperature", "0")
    assert res.returncode == 0 and res.stdout.strip(), res.stderr[-2000:]
    here = _run([Path(sys.executable).parent / "npu-console", "generate", "--prompt",
                 "Once upon a time", "--max-tokens", "8", "--temperature", "0"], env=_env())
    assert res.stdout == here.stdout  # greedy: the installed demo model says what the checkout's says

    res = _cli(venv, "smi", "--once", "--json", "--source", "host")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["devices"][-1]["kind"] == "cpu"

    data = ROOT / "assets" / "calib" / "heldout_demo.txt"
    res = _cli(venv, "eval", "--data", data, "--max-tokens", "512", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["perplexity"] > 1

    out = tmp_path / "demo-w8a16"
    demo = venv.glob("lib/python*/site-packages/npu_console/assets/models/demo")
    res = _cli(venv, "quantize", "--model", next(demo), "--method", "w8a16", "--out", out,
               "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "config.json").is_file()

    res = _cli(venv, "bench", "offline", "--batch-sizes", "1,2", "--input-len", "16",
               "--output-len", "8", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)


def test_serve_answers_and_bench_serve_measures_it(venv):
    proc = subprocess.Popen(
        [str(venv / "bin" / "npu-console"), "serve", "--port", "0", "--api-key", "k3y",
         "--telemetry-input", str(ROOT.parent / "shared" / "fixtures" / "npu-smi" /
                                  "910b3_info_1.txt")],
        cwd=venv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        url = None
        deadline = time.monotonic() + 300
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            m = re.search(r" at (http://\S+)/v1", line)
            url = m.group(1) if m else None
        assert url, f"serve did not start: {proc.stderr.read()[-2000:]}"
        headers = {"Authorization": "Bearer k3y"}
        with httpx.Client(base_url=url, timeout=120) as client:
            assert client.get("/v1/models").status_code == 401
            reply = client.post("/v1/completions", headers=headers,
                                json={"prompt": "Once upon a time", "max_tokens": 8,
                                      "ignore_eos": True})  # sampled: EOS may come first
            assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 8
            if (ROOT.parent / "shared" / "fixtures" / "npu-smi").is_dir():
                tele = client.get("/v1/telemetry", headers=headers)
                assert tele.status_code == 200, tele.text
                assert [d["kind"] for d in tele.json()["devices"]].count("npu") == 8
        res = _run([venv / "bin" / "npu-console", "bench", "serve", "--base-url", url,
                    "--api-key", "k3y", "--num-prompts", "4", "--concurrency", "2",
                    "--input-len", "16", "--output-len", "8", "--json"], cwd=venv, env=_env())
        assert res.returncode == 0, res.stderr[-2000:]
        assert json.loads(res.stdout)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0


def test_engine_and_api_tests_pass_in_the_qt_free_venv(venv):
    tests = [ROOT / "tests" / name for name in HEADLESS_TESTS if (ROOT / "tests" / name).exists()]
    # the venv's pytest from outside the checkout: `engine` is the installed copy
    res = _run([venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
               timeout=1200, cwd=venv, env=_env())
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout
    print(f"in the Qt-free venv: {res.stdout.strip().splitlines()[-1]}")
