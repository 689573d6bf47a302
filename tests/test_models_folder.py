"""Model folder validation: every broken folder gets one plain sentence naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from npu_console.engine.models import (
    ModelFolderError,
    estimate_memory,
    fits_message,
    inspect_model_folder,
    load_model,
    validate_model_folder,
)
from npu_console.engine.models.memory import kv_bytes_per_token


@pytest.fixture
def model_copy(stories_dir, tmp_path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(stories_dir, dst, ignore=shutil.ignore_patterns("original"))
    return dst


def test_real_model_folder_is_valid(stories_dir):
    report = validate_model_folder(stories_dir)
    assert report.architecture == "LlamaForCausalLM"
    assert report.batched
    assert report.num_layers == 5 and report.num_kv_heads == 4 and report.head_dim == 8
    # 260K parameters per the model card (the tied lm_head is stored once)
    assert 255_000 <= report.num_parameters <= 265_000
    assert report.checkpoint_dtype == "float32"
    assert report.max_context == 512


def test_missing_config(model_copy):
    (model_copy / "config.json").unlink()
    with pytest.raises(ModelFolderError) as exc:
        validate_model_folder(model_copy)
    assert "config.json: missing" in str(exc.value)


def test_invalid_config_json(model_copy):
    (model_copy / "config.json").write_text("{not json")
    report = inspect_model_folder(model_copy)
    assert not report.ok
    assert any(p.file == "config.json" and "not valid JSON" in p.message for p in report.problems)


def test_truncated_safetensors(model_copy):
    data = (model_copy / "model.safetensors").read_bytes()
    (model_copy / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFolderError) as exc:
        validate_model_folder(model_copy)
    msg = str(exc.value)
    assert "model.safetensors: truncated" in msg and f"{len(data) // 2:,}" in msg


def test_garbage_safetensors(model_copy):
    (model_copy / "model.safetensors").write_bytes(b"\xff" * 64)
    report = inspect_model_folder(model_copy)
    assert any(p.file == "model.safetensors" and "corrupt" in p.message for p in report.problems)


def test_missing_tokenizer(model_copy):
    for name in ("tokenizer.json", "tokenizer.model"):
        (model_copy / name).unlink()
    with pytest.raises(ModelFolderError) as exc:
        validate_model_folder(model_copy)
    assert "no tokenizer" in str(exc.value)


def test_missing_weights_and_shard_listed_in_index(model_copy):
    (model_copy / "model.safetensors").rename(model_copy / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (model_copy / "model.safetensors.index.json").write_text(json.dumps(index))
    report = inspect_model_folder(model_copy)
    assert [str(p) for p in report.problems if p.fatal] == [
        "model-00002-of-00002.safetensors: missing: listed in model.safetensors.index.json"]


def test_unsupported_architecture(model_copy):
    cfg = json.loads((model_copy / "config.json").read_text())
    cfg["model_type"] = "no-such-arch"
    (model_copy / "config.json").write_text(json.dumps(cfg))
    report = inspect_model_folder(model_copy)
    assert any("unsupported architecture" in p.message for p in report.problems)


def test_not_a_causal_lm(model_copy):
    cfg = json.loads((model_copy / "config.json").read_text())
    cfg["architectures"] = ["BertForSequenceClassification"]
    (model_copy / "config.json").write_text(json.dumps(cfg))
    report = inspect_model_folder(model_copy)
    assert any("not a causal language model" in p.message for p in report.problems)


def test_missing_folder_and_file(tmp_path):
    assert str(inspect_model_folder(tmp_path / "nope").problems[0]) == "no such folder"
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert "is a file" in str(inspect_model_folder(f).problems[0])


def test_chat_template_absence_is_a_warning_only(stories_dir):
    report = inspect_model_folder(stories_dir)
    assert report.ok and not report.has_chat_template
    assert [p.fatal for p in report.warnings] == [False]


def test_memory_estimate_and_fit(stories_dir):
    report = inspect_model_folder(stories_dir)
    est = estimate_memory(report, "float32", context=512, max_seqs=4)
    assert est.weight_bytes == report.num_parameters * 4
    # 2 (K,V) * 5 layers * 4 kv heads * 8 head dim * 4 bytes
    assert kv_bytes_per_token(report, "float32") == 2 * 5 * 4 * 8 * 4
    assert est.kv_bytes == 2 * 5 * 4 * 8 * 4 * 512 * 4
    half = estimate_memory(report, "bfloat16", context=512)
    assert half.weight_bytes * 2 == est.weight_bytes
    # float32 weights beside the CPU's default fp16 cache: half the KV bytes, same weights
    kv16 = estimate_memory(report, "float32", context=512, max_seqs=4, kv_dtype="float16")
    assert kv16.weight_bytes == est.weight_bytes and kv16.kv_bytes * 2 == est.kv_bytes
    assert fits_message(est, free_bytes=10**12, device_label="cpu") is None
    msg = fits_message(est, free_bytes=1000, device_label="cpu")
    assert msg.startswith("not enough memory") and "cpu" in msg


def test_load_real_model_with_progress_and_cancel(stories_dir):
    import threading

    from npu_console.engine.models import LoadCancelled

    seen = []
    loaded = load_model(stories_dir, progress=lambda f, w: seen.append(f))
    assert loaded.architecture == "LlamaForCausalLM" and loaded.dtype == "float32"
    assert seen == sorted(seen) and seen[-1] == 1.0
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(LoadCancelled):
        load_model(stories_dir, cancel=cancel)


def test_load_refuses_when_memory_is_short(stories_dir, monkeypatch):
    from npu_console.engine import devices
    from npu_console.engine.models import ModelLoadError

    real = devices.cpu_device()
    tiny = devices.DeviceInfo("cpu", 0, real.name, real.total_memory, 1024, real.dtypes)
    monkeypatch.setattr(devices, "cpu_device", lambda: tiny)
    with pytest.raises(ModelLoadError, match="not enough memory"):
        load_model(stories_dir)


def test_recent_models_list(tmp_path):
    from npu_console.engine.models import add_recent_model, forget_recent_model, recent_models

    a, b = tmp_path / "a", tmp_path / "b"
    add_recent_model(a)
    add_recent_model(b)
    add_recent_model(a)
    assert recent_models() == [str(a.resolve()), str(b.resolve())]
    forget_recent_model(a)
    assert recent_models() == [str(b.resolve())]
