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
