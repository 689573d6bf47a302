"""launch_command: how a console export is served on vllm-ascend, vLLM or npu-console."""

from __future__ import annotations

import json

import pytest
from npu_console.engine.remote.launch import LaunchError, export_format, launch_command


def folder(tmp_path, name, config, files=()):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    for f in files:
        (d / f).write_text("{}")
    return d


def test_msmodelslim_export_runs_on_vllm_ascend_with_the_ascend_flag(tmp_path):
    d = folder(tmp_path, "qwen-w8a8", {"model_type": "qwen2"},
               ["quant_model_description_w8a8_dynamic.json"])
    assert export_format(d) == "msmodelslim"
    cmd = launch_command(d, "vllm-ascend", port=8100, max_model_len=4096)
    assert cmd.startswith(f"vllm serve {d} ")
    assert "--quantization ascend" in cmd and "--served-model-name qwen-w8a8" in cmd
    assert "--port 8100" in cmd and "--max-model-len 4096" in cmd
    with pytest.raises(LaunchError, match="vllm-ascend"):
        launch_command(d, "vllm")


def test_compressed_tensors_export_runs_on_vllm_as_is(tmp_path):
    d = folder(tmp_path, "ct", {"quantization_config": {"quant_method": "compressed-tensors"}})
    assert export_format(d) == "compressed-tensors"
    cmd = launch_command(d, "vllm", served_model_name="my model")
    assert "--quantization" not in cmd and "--served-model-name 'my model'" in cmd
    assert "--quantization" not in launch_command(d, "vllm-ascend")


def test_float_folder_and_npu_console(tmp_path):
    d = folder(tmp_path, "plain", {"model_type": "llama"})
    assert export_format(d) == "float"
    cmd = launch_command(d, "npu-console", host="127.0.0.1")
    assert cmd.startswith("npu-console serve --model") and "--api-key" not in cmd
    assert "--api-key" in launch_command(d, "npu-console", host="0.0.0.0")


def test_errors(tmp_path):
    with pytest.raises(LaunchError, match="no config.json"):
        launch_command(tmp_path, "vllm")
    d = folder(tmp_path, "awq", {"quantization_config": {"quant_method": "awq"}})
    with pytest.raises(LaunchError, match="awq"):
        export_format(d)
    with pytest.raises(LaunchError, match="unknown target"):
        launch_command(d, "tgi")
