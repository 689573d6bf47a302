"""The Quantize wizard's steps as real widgets, without an engine."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

pytestmark = pytest.mark.gui


def test_sample_sizes_are_offered_only_for_a_calibration_file(qtbot, tmp_path):
    """The model's own text has a fixed size; Samples / Tokens per sample cut a file."""
    from npu_console.console.pages.quantize_steps import CalibStep

    step = CalibStep()
    qtbot.addWidget(step)
    step.show()
    assert step.calib_builtin.isChecked() and not step.samples.isVisible()
    step.calib_path.setText(str(tmp_path / "calib.txt"))  # typing a path picks "a file"
    assert step.calib_file_radio.isChecked() and step.samples.isVisible()
    assert step.file() == str(tmp_path / "calib.txt")
    step.calib_builtin.setChecked(True)
    assert not step.samples.isVisible() and step.file() is None
    step.set_calibration(str(tmp_path / "calib.txt"), 8, 64)
    assert step.samples.isVisible() and step.samples.value() == 8


def test_an_int8_model_alone_is_named_not_called_missing(qtbot):
    """`make run` opens the chat model in INT8: step 1 says why it is not offered."""
    from npu_console.console.pages.quantize_steps import ModelStep
    from npu_console.engine.runtime.types import ModelInfo

    def info(name, quantization):
        return ModelInfo(name=name, path=f"/m/{name}", architecture="LlamaForCausalLM",
                         dtype="float32", quantization=quantization, device="cpu",
                         max_context=2048, num_parameters=1, weight_bytes=1, kv_bytes=0,
                         path_kind="batched", created=0.0)

    step = ModelStep()
    qtbot.addWidget(step)
    assert step.model_info.text().startswith("No model loaded yet")
    step.set_models([info("smollm2", "w8a16")])
    assert step.choice() is None
    assert step.model_info.text().startswith("Loaded already in INT8: smollm2.")
    step.set_models([info("smollm2", "w8a16"), info("smollm2-float", None)])
    assert step.choice() == ("smollm2-float", "/m/smollm2-float")
